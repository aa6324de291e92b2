/* rdzv.h - the rendezvous of node agents, in the store under "rdzv/": round R gathers the
 * members of generation R (0, and in restart-all each restart generation, in which every
 * member is new; job/elastic.h). */
#ifndef CDDP_JOB_RDZV_H
#define CDDP_JOB_RDZV_H

#include "cddp/store.h"
#include "job/jobkeys.h"

/* What each node publishes when it joins a round (its record: job/jobkeys.h). */
typedef cddp__job_node_t cddp__rdzv_node_t;

typedef struct cddp__rdzv_cfg {
  int min_nodes, max_nodes;
  int node_rank;    /* static backend: this node's rank; -1: c10d (rank = join order) */
  int static_nodes; /* static: the node records a round waits for (0: max_nodes) */
  int last_call_ms; /* after min_nodes joined, wait this long for more (c10d) */
  int timeout_ms;   /* bound on the whole join */
  int late_ok;      /* a node that comes after the round closed (c10d: or beyond max_nodes;
                       static: its slot holds another agent's record, e.g. a restarted node's)
                       returns with late = 1 instead of waiting for the next round */
  cddp__rdzv_node_t self;
} cddp__rdzv_cfg_t;

typedef struct cddp__rdzv {
  int round, restart_count;
  int node_rank, nnodes;
  int rank_base, world_size;   /* global rank of this node's local rank 0; sum of nproc */
  int closed_here;             /* 1 when this agent closed the round (exactly one does) */
  int late;                    /* late_ok: the round closed without this node; nodes[] holds the
                                  round's nodes and then this one (node_rank = the last) */
  cddp__rdzv_node_t *nodes;    /* nnodes entries in node-rank order (malloc'd) */
  int ended;                   /* the join failed because the job ended before a round took this
                                  node in (restart-all: cddp__gen_close_job) */
  int end_code;                /* ended: the job's exit code (0: it finished) */
} cddp__rdzv_t;

/* Joins the first open round >= min_round and returns when it closed with this node in
 * it. Round R > 0 is open once generation R is announced as a restart (cddp__gen_open_restart;
 * round 0 is open from the start); the latest such round is where a node starts. Keys
 * (relative to s): rdzv/R/joined (add(): slot = join order), rdzv/R/node/<slot>, rdzv/R/closed (compare_set from absent to the node count:
 * exactly one agent decides). The round closes at max_nodes, or last_call_ms after a
 * node saw at least min_nodes joined. A node whose slot is past the close waits for the
 * next round. The static backend publishes rdzv/R/node/<node_rank> and waits for all
 * (static_nodes of them); with late_ok, a slot already filled makes this node late.
 * Blocks at most cfg->timeout_ms; TIMEOUT names the round and how many nodes joined.
 * Nodes that disagree on --nnodes fail with INVALID_ARG and one line naming both values, on
 * every node: the first node's setting is kept in rdzv/settings; a node whose own differs
 * says so in rdzv/mismatch and wakes the nodes waiting on the round (its "closed" key, or,
 * static, its node record, which carries MIN and MAX). */
cddp_result_t cddp__rdzv_join(cddp_store_t *s, const cddp__rdzv_cfg_t *cfg, int min_round, cddp__rdzv_t *out);
/* Ends round's join on every node with line (INVALID_ARG, exit 2), as a disagreement on --nnodes
 * does: rdzv/mismatch = line (the first one wins), the round's "closed" key and node records
 * 0..node_records-1 (static: the records the nodes wait for) set to "mismatch" where absent. */
void cddp__rdzv_mismatch(cddp_store_t *s, int round, int node_records, const char *line);
void cddp__rdzv_release(cddp__rdzv_t *r);
/* Writes round r as it closed (its settings, node records, joined count, "closed") into s,
 * where absent (the generation it gathered comes back with cddp__gen_restore): a store that was
 * rebuilt after its host was lost (store_move.c) then tells a node started later that the
 * round closed without it (late_ok) instead of letting it wait for a round that never fills. */
cddp_result_t cddp__rdzv_restore(cddp_store_t *s, const cddp__rdzv_cfg_t *cfg, const cddp__rdzv_t *r);

/* The round's event (rdzv/R/event): its first value wins (done, restart, fail). Agents watch
 * it to learn about the other nodes. Posts ev; *now (when not NULL) gets the event that won. */
cddp_result_t cddp__rdzv_post(cddp_store_t *s, int round, const cddp__job_event_t *ev, cddp__job_event_t *now);
/* The job's failure line comes from the failure that happened first on any node, not from the
 * node that posted "fail" first (a rank that lost its peer often fails, and posts, before the
 * peer's own node does). Each node that saw a worker fail by itself posts its first failure:
 * when it happened (wall clock, ns), the exit code, its line; key rdzv/R/failure/<node_rank>.
 * A node without a failure of its own posts wall_ns 0 ("none") once its workers are gone. */
cddp_result_t cddp__rdzv_failure_post(cddp_store_t *s, int round, int node_rank, uint64_t wall_ns, int code,
                                      const char *line);
/* The earliest failure posted in the round, waiting at most wait_ms for every node's record
 * (a node that is gone never posts). 1 with *code and line set, 0 when none was posted. */
int cddp__rdzv_failure_first(cddp_store_t *s, int round, int nnodes, int wait_ms, int *code, char *line, size_t size);
/* restart-all: the round's event this node's agent leaves behind if it dies (killed, its host
 * gone): the store posts ev at rdzv/R/event when the agent's connection ends without a goodbye,
 * unless the round already has an outcome. Without it a dead node's "done" never comes and the
 * others wait for ever. view: the agent's "<run_id>/" view on its TCP connection. */
cddp_result_t cddp__rdzv_will(cddp_store_t *view, const char *run_id, int round, const cddp__job_event_t *ev);
/* This node's workers all succeeded; the last node to say so posts "done". */
cddp_result_t cddp__rdzv_node_done(cddp_store_t *s, const cddp__rdzv_t *r);
/* Exit barrier: counts this agent out; with wait = 1 (the agent hosting the store)
 * waits up to timeout_ms for every node to be out, so nobody loses the store early. */
cddp_result_t cddp__rdzv_exit(cddp_store_t *s, const cddp__rdzv_t *r, int wait, int timeout_ms);

#endif /* CDDP_JOB_RDZV_H */
