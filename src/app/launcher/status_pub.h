/* status_pub.h - the agent's side of `cddp status`: its node record, built about every second
 * from its workers' flight pages, and the events it saw (a worker lost, replaced, recovered),
 * posted by a thread of its own over a connection of its own, so a store that stops answering
 * never holds up the agent's loop. */
#ifndef CDDP_LAUNCHER_STATUS_PUB_H
#define CDDP_LAUNCHER_STATUS_PUB_H

#include <pthread.h>

#include "job/status.h"
#include "launcher/workers.h"

#define CDDP__STATUS_QUEUE 8       /* events waiting to be posted (more are dropped) */
#define CDDP__STATUS_RATE_POINTS 8  /* step changes kept per rank for its steps/s */

typedef struct cddp__status_pub {
  int on;                   /* the poster runs */
  cddp__status_node_t node; /* the agent fills round, node_rank, ... per round; the ranks per tick */
  const int64_t *agent_gen; /* replace mode: the agent's generation, copied at each tick (the agent's
                               thread owns it; the poster reads no counter of its own) */
  int post_every;           /* ticks between two records posted: more in a large job (below) */
  unsigned ticks;            /* ticks so far: a record is posted at every post_every-th */
  /* each slot's last CDDP__STATUS_RATE_POINTS changes of the step (when, to what; a ring of
   * rate_n in all) and whose: the rate is averaged over those of the last 10 s, at least two (a
   * tick is 1 s: a step longer than that would read 0 over one tick) */
  uint64_t rate_ns[CDDP__STATUS_RANKS][CDDP__STATUS_RATE_POINTS], rate_step[CDDP__STATUS_RANKS][CDDP__STATUS_RATE_POINTS];
  uint64_t rate_n[CDDP__STATUS_RANKS];
  int prev_pid[CDDP__STATUS_RANKS];
  /* each slot's CPU time as last read, when, and whose (the CPU % between two ticks) */
  uint64_t prev_ticks[CDDP__STATUS_RANKS], prev_ticks_ns[CDDP__STATUS_RANKS];
  int prev_ticks_pid[CDDP__STATUS_RANKS];
  /* a loss not yet recovered from: when (monotonic), and each slot's step and pid then */
  uint64_t lost_ns;
  uint64_t lost_step[CDDP__STATUS_RANKS];
  int lost_pid[CDDP__STATUS_RANKS];
  /* the poster: its connection, and what it is given under mu */
  cddp_store_t *store;
  pthread_t th;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  cddp__status_node_t out;  /* the record to post next */
  int out_new, stop;
  char events[CDDP__STATUS_QUEUE][300];
  int nevents;
  int64_t gen_seen;         /* the poster's: the last generation it read (-1: none yet) */
  uint64_t loss_ns;         /* atomic: the poster saw a generation that lost a node, at (monotonic) */
  uint64_t loss_seen;       /* the agent's: the last loss_ns whose recovery clock it started */
  /* the other nodes, for the watchdog: while it wants them (a local worker has been idle outside
   * any collective for half the hang timeout), the poster reads their records and tracks how long
   * each of their ranks has been inside the same collective */
  int remote_wanted;        /* atomic: set by the agent's watchdog */
  uint64_t remote_since;    /* atomic: since when (monotonic) some rank of another node has been inside
                               the same collective; 0: none */
  uint64_t *seen_coll, *seen_ns; /* the poster's: per (slot, rank), the collective and since when */
} cddp__status_pub_t;

/* Connects (host, port, token, the job's run id) and starts the poster, which takes the agent's
 * slot; a failure only turns status off (logged at INFO). agent_gen: replace mode's generation
 * as the agent knows it (NULL otherwise), read at each tick on the agent's thread. A record is
 * posted each tick (1 s), or each CDDP_HEARTBEAT_TIMEOUT_MS / 3 s where the timeout grew with
 * the job's size, so the store's load per agent falls as the heartbeat's does. */
void cddp__status_pub_begin(cddp__status_pub_t *p, const char *store_host, int store_port, const char *token,
                            const char *run_id, const char *host, int agent_id, const int64_t *agent_gen);
/* The workers' tick (workers.h): reads their pages, hands the record to the poster, and the
 * recovery event once every local worker made a step after a loss. Never blocks on the store. */
void cddp__status_pub_tick(cddp__workers_t *ws, void *arg);
/* Hands over the record with the node's state ("spare", "done", "failed") and no rank running. */
void cddp__status_pub_state(cddp__status_pub_t *p, const char *state);
/* A loss this agent saw (a worker failed, hung, or the job restarts): an event now, and the
 * clock of its recovery starts. */
void cddp__status_pub_lost(cddp__status_pub_t *p, const cddp__workers_t *ws, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Posts what is left (waiting at most about a second: the store may be gone) and stops. */
void cddp__status_pub_end(cddp__status_pub_t *p);
/* r->rate, the steps/s of slot i's process (r->pid at r->step, seen at now): averaged over its
 * step's changes of the last 10 s (at least the last two), so one slow or fast step does not
 * swing it; a new process counts afresh. While the step stays, at most one step over the time
 * since: a stall shows as a fall. Left as it is (0) until two changes are seen. */
void cddp__status_pub_rate(cddp__status_pub_t *p, int i, cddp__status_rank_t *r, uint64_t now);

#endif /* CDDP_LAUNCHER_STATUS_PUB_H */
