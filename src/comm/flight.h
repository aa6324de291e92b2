/* flight.h - the flight recorder: each process's last collectives, in a page its agent can read. */
#ifndef CDDP_COMM_FLIGHT_H
#define CDDP_COMM_FLIGHT_H

#include <stddef.h>
#include <stdint.h>

#define CDDP__FLIGHT_MAGIC 0x6364647066726563ull /* "cddpfrec" */
#define CDDP__FLIGHT_VERSION 1
#define CDDP__FLIGHT_RING 64 /* records kept: the last 64 collectives */

enum { CDDP__FLIGHT_STARTED = 1, CDDP__FLIGHT_DONE = 2, CDDP__FLIGHT_FAILED = 3 };

/* One collective, as its rank saw it. Times are CLOCK_MONOTONIC ns (comparable on one host). */
typedef struct cddp__flight_rec {
  uint64_t seq;               /* this process's collective number, from 1 */
  uint64_t cseq;              /* the communicator's: the same on every rank of it (desync checks) */
  uint64_t count;             /* elements */
  uint64_t t_start, t_end;    /* t_end 0 while it runs */
  int32_t kind, dt, op, root; /* cddp__coll_kind_t, cddp_dtype_t, cddp_redop_t */
  int32_t rank, world, round, state;
} cddp__flight_rec_t;

/* The page: written by the process (each communicator runs its collectives one at a time; a
 * process with several, on several threads, takes numbers atomically and writes its own ring
 * slots), read by its agent through a shared file (CDDP_FLIGHT_FILE) or dumped by the process. */
typedef struct cddp__flight_page {
  uint64_t magic;
  uint32_t version, pid;
  uint64_t seq;  /* the last collective started (0: none yet) */
  uint64_t done; /* the last collective finished (seq == done: not inside one) */
  uint64_t beat; /* bumped by long work outside collectives (a checkpoint, a step): alive */
  cddp__flight_rec_t ring[CDDP__FLIGHT_RING]; /* record of collective s at ring[(s - 1) % RING] */
  uint64_t step; /* the program's own progress (the trainer's optimizer steps done), 0: none said */
} cddp__flight_page_t;

/* Records the start of a collective; returns its seq. Cheap (a few stores); a no-op returning
 * 0 when CDDP_FLIGHT=0. Never blocks. */
uint64_t cddp__flight_start(int kind, int dt, int op, int root, uint64_t count, int rank, int world, int round,
                            uint64_t cseq);
/* Records the end (ok: done, else failed) of collective seq. */
void cddp__flight_end(uint64_t seq, int ok);

/* The process's page (mapped from CDDP_FLIGHT_FILE when its agent gave one, else private). */
const cddp__flight_page_t *cddp__flight_page(void);

/* A helper thread that calls cddp_progress_alive every beat_ms, for one long call that cannot
 * beat itself (writing and fsyncing hundreds of MB), at most max_ms: a call stuck longer is
 * judged as any other. SIGSTOP stops it with the process, so a stopped rank is still found.
 * alive_start returns NULL (nothing runs) when no thread can be made; alive_stop joins it. */
typedef struct cddp__alive cddp__alive_t;
cddp__alive_t *cddp__alive_start(int beat_ms, int max_ms);
void cddp__alive_stop(cddp__alive_t *a);

/* The name of a collective kind ("allreduce", ...). */
const char *cddp__flight_kind_name(int kind);

/* One line describing collective r of a page: "allreduce #123 (4096 float32, sum)". */
void cddp__flight_describe(const cddp__flight_rec_t *r, char *buf, size_t size);

/* Writes a page's records as JSON to path (oldest first), with now_ns for the ages. 0 or -1. */
int cddp__flight_dump(const cddp__flight_page_t *p, int rank, const char *path, uint64_t now_ns);

#endif /* CDDP_COMM_FLIGHT_H */
