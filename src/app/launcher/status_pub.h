/* status_pub.h - the agent's side of `cddp status`: its node record, posted about every second
 * from its workers' flight pages, and the events it saw (a worker lost, replaced, recovered). */
#ifndef CDDP_LAUNCHER_STATUS_PUB_H
#define CDDP_LAUNCHER_STATUS_PUB_H

#include "launcher/status.h"
#include "launcher/workers.h"

typedef struct cddp__status_pub {
  cddp_store_t *store;      /* the job's view; NULL: nothing is posted */
  cddp__status_node_t node; /* the agent fills slot, host, pid, agent_id; round, node_rank, ... per round */
  int replace;              /* replace mode: the generation comes from the store */
  uint64_t prev_ns[CDDP__STATUS_RANKS], prev_step[CDDP__STATUS_RANKS]; /* the last tick's, per slot */
  int prev_pid[CDDP__STATUS_RANKS];
  /* a loss not yet recovered from: when (monotonic), what, and each slot's step then */
  uint64_t lost_ns;
  char lost_what[200];
  uint64_t lost_step[CDDP__STATUS_RANKS];
  int lost_pid[CDDP__STATUS_RANKS];
} cddp__status_pub_t;

/* Takes the agent's slot; a failure only turns status off (logged at INFO). */
void cddp__status_pub_begin(cddp__status_pub_t *p, cddp_store_t *s, const char *host, int agent_id, int replace);
/* The workers' tick (workers.h): reads their pages, posts the record, and the recovery event
 * once every local worker made a step after a loss. */
void cddp__status_pub_tick(cddp__workers_t *ws, void *arg);
/* Posts the record with the node's state ("spare", "done", "failed") and no ranks running. */
void cddp__status_pub_state(cddp__status_pub_t *p, const char *state);
/* A loss this agent saw (a worker failed, hung, or the job restarts): an event now, and the
 * clock of its recovery starts. */
void cddp__status_pub_lost(cddp__status_pub_t *p, const cddp__workers_t *ws, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif /* CDDP_LAUNCHER_STATUS_PUB_H */
