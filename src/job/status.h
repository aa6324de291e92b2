/* status.h - what `cddp status` reads of a running job: each agent's node record, the job's
 * recent events, and the endpoint record a launcher leaves in a folder (all owned here). */
#ifndef CDDP_JOB_STATUS_H
#define CDDP_JOB_STATUS_H

#include <stddef.h>
#include <stdint.h>

#include "cddp/store.h"

#define CDDP__STATUS_RANKS 64  /* ranks per node record */
#define CDDP__STATUS_NODES 256 /* node records read */

/* Keys, relative to the job's "<run_id>/" view:
 *   status/slots      add(): each agent takes a slot at start
 *   status/node/<S>   the record of the agent in slot S (cddp__status_node_t), rewritten every second
 *   status/events     add(): events posted so far
 *   status/event/<i>  event i (1-based): "<wall ms> <text>"
 *   status/once/<G>   compare_set: the one agent that posts generation G's membership event */

typedef struct cddp__status_rank {
  int rank, pid;
  char state[12];     /* starting (no collective yet; without a flight page: no line yet, importing
                         or forming its group), alive, exited, failed, hung (the watchdog killed
                         it); and before any verdict, for a program without a flight page: stopped,
                         waiting (in a collective), stuck (idle in its own code) */
  int replaced;       /* this process replaced one that failed */
  uint64_t step;      /* the program's steps done (the trainer's), 0: not said */
  double rate;        /* steps per second between the last two changes of step */
  uint64_t coll;      /* collectives started */
  int in_coll;        /* inside one now */
  char last[100];     /* the last one: "allreduce #123 (4096 f32, sum)", or "-" */
  /* the process as its agent sees it (/proc, its output): what `cddp status` shows of any program */
  double cpu_pct;     /* CPU (all threads) over the last second, in % of one CPU; -1: not read */
  uint64_t rss_kb;    /* resident memory */
  int64_t out_age_ms; /* since its last output line; -1: none yet */
  int64_t idle_ms;    /* no progress (no line, under 5% CPU) for this long, by the watchdog; 0: busy or not judged */
  char out[84];       /* that line, printable ASCII, or "-" */
} cddp__status_rank_t;

typedef struct cddp__status_node {
  int slot, node_rank, agent_id, pid, round, restarts, nproc, rank_base, world;
  int64_t gen;
  uint64_t wall_ms;   /* when it was posted (CLOCK_REALTIME) */
  char state[12];     /* running, spare (waits to be taken in), done, failed, left */
  char host[64];
  int nranks;
  cddp__status_rank_t ranks[CDDP__STATUS_RANKS];
} cddp__status_node_t;

typedef struct cddp__status_event {
  uint64_t wall_ms;
  char text[300];
} cddp__status_event_t;

/* The record's text (NUL-terminated in buf); its length, 0 when it does not fit. */
size_t cddp__status_format(const cddp__status_node_t *n, char *buf, size_t size);
/* 0, or -1 when the text is malformed. */
int cddp__status_parse(const char *text, size_t len, cddp__status_node_t *out);

/* Takes this agent's slot. */
cddp_result_t cddp__status_slot(cddp_store_t *s, int *slot);
/* Writes n's record under its slot. */
cddp_result_t cddp__status_post(cddp_store_t *s, const cddp__status_node_t *n);
/* Every slot's record (malloc'd array in *out, *n of them; malformed ones skipped). */
cddp_result_t cddp__status_read(cddp_store_t *s, cddp__status_node_t **out, int *n);

/* Posts an event now (wall clock), text printf-style. */
cddp_result_t cddp__status_event(cddp_store_t *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Posts text as an event once per tag however many agents try (the first one does). */
cddp_result_t cddp__status_event_once(cddp_store_t *s, int64_t tag, const char *text);
/* The last (at most max) events, oldest first; *n of them. */
cddp_result_t cddp__status_events(cddp_store_t *s, cddp__status_event_t *out, int max, int *n);

/* Where a job's store is: the launcher records it in its --log-dir (and the trainer in its run
 * folder) as "<dir>/endpoint", readable by its owner only (it holds the token). */
typedef struct cddp__endpoint {
  char host[256];
  int port;
  char run_id[128];
  char token[256];    /* "" when the job has none */
  char ended[160];    /* how the run ended ("done at step 702"), "" while it runs or when not said */
} cddp__endpoint_t;

cddp_result_t cddp__endpoint_write(const char *dir, const cddp__endpoint_t *e);
/* NOT_FOUND naming the file when there is none; INVALID_ARG when it is malformed. */
cddp_result_t cddp__endpoint_read(const char *dir, cddp__endpoint_t *e);
/* Records in dir's endpoint file how the run ended (printf-style); NOT_FOUND when it has none. */
cddp_result_t cddp__endpoint_end(const char *dir, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* A job's events outlive its store in its folder (the --log-dir, the run folder): "<dir>/events",
 * one "WALL_MS TEXT" line each. save reads the last CDDP__EVENTS_KEPT from s (each call bounded
 * by s's timeout) and replaces the file (0600) when there are any. load reads the newest max of
 * them (the file is hostile: bounded, printable); NOT_FOUND when there is none. */
#define CDDP__EVENTS_KEPT 100
#define CDDP__EVENTS_SAVE_MS 1000 /* the bound its savers set on a store that may be going away */
cddp_result_t cddp__events_save(const char *dir, cddp_store_t *s);
cddp_result_t cddp__events_load(const char *dir, cddp__status_event_t *out, int max, int *n);

/* What a run folder's metrics.jsonl says, read from its last 64 KiB (the file is hostile: any
 * size, any bytes): the last step of a line that parses, 0 and *has_step 0 when none does; bad
 * gets the start of the last line that does not parse and came after it ("" when none). NOT_FOUND
 * when dir has no metrics.jsonl. */
cddp_result_t cddp__run_last_step(const char *dir, uint64_t *step, int *has_step, char *bad, size_t bad_size);

#endif /* CDDP_JOB_STATUS_H */
