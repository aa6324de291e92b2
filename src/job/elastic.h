/* elastic.h - in-place replacement of a failed worker: the job's generation, kept in the store. */
#ifndef CDDP_JOB_ELASTIC_H
#define CDDP_JOB_ELASTIC_H

#include <stdint.h>

#include "cddp/comm.h"
#include "cddp/store.h"
#include "job/jobkeys.h"

/* The job's keys and the text of their values: job/jobkeys.h (the table: docs/elastic.md).
 * A survivor whose collective failed waits for elastic/gen/<its G + 1>, then builds the
 * communicator of the latest generation; building gives up (ABORTED) the moment a later one
 * is announced, and is retried there, so two failures close together converge on the last. */

/* ---- membership: elastic/members/<G>, written before elastic/gen/<G> is announced ---- */
/* The member index of agent_id (-1 when absent) and its rank_base, the world size. */
int cddp__members_find(const cddp__members_t *m, int agent_id, int *rank_base, int *world);
int cddp__members_world(const cddp__members_t *m);
/* Reads elastic/members/<gen>: NOT_FOUND when absent, REMOTE when malformed. */
cddp_result_t cddp__members_read(cddp_store_t *s, int64_t gen, cddp__members_t *out);
/* The members a rendezvous round gathered (every one new), in node-rank order; -1 when there
 * are more than CDDP__MAX_MEMBERS (out then holds the first of them). */
int cddp__members_of_nodes(const cddp__job_node_t *nodes, int n, cddp__members_t *out);
/* Writes elastic/members/<gen> (the first value wins; generation 0 is written by every agent). */
cddp_result_t cddp__members_write(cddp_store_t *s, int64_t gen, const cddp__members_t *m);

/* ---- the next member record: drop a lost agent, take pending ones in ----
 * Pending agents (cand, in the order they registered) are appended after the members, so
 * the ranks of a join are unchanged and a loss shifts ranks down past the lost node. A
 * candidate is taken while the record has fewer than max_nodes members and the world it
 * makes is listed in worlds (NULL or "": any). Below min_nodes the record is a stop, or with
 * wait_ms > 0 a wait (the survivors, waiting up to wait_ms for pending nodes); a wait record
 * takes pending agents in only when they bring it to min_nodes, and expired = 1 turns it
 * into the stop. */
typedef struct cddp__change {
  int self;                    /* the proposing agent: no change when it is not a member */
  int lost;                    /* the agent to drop, or -1 */
  const char *why;             /* why it is lost ("its connection closed") */
  int min_nodes, max_nodes;
  int wait_ms;                 /* below MIN after a loss: wait this long (0: stop at once) */
  int expired;                 /* the wait is over: a wait record becomes the stop */
  const cddp__member_t *cand;  /* pending agents (a member among them is skipped) */
  int ncand;
  const char *worlds;          /* elastic/worlds, or NULL */
  /* results of the last call */
  cddp__job_announce_t ann;    /* the announcement: loss "node H (agent A, why)[; spare node H2
                                  (agent B) takes its place]", join "node H (agent A)[, node ...]",
                                  wait, or stop */
  int added, proposed_stop, proposed_wait, ended_wait;
  int spare_at;                /* where "; spare node ..." starts in ann.what (-1: no spare) */
  int refused_id;              /* a candidate not taken (-1: none) and why, one line */
  char refused[240];
} cddp__change_t;
/* The edit for cddp__gen_change (ctx = cddp__change_t): 1 when nothing is to change (the
 * lost agent is gone already and nobody can be taken in, or self is not a member). */
int cddp__members_next(const cddp__members_t *cur, cddp__members_t *next, void *ctx);

/* Announces the next generation: claims latest+1 (compare_set on elastic/claim/<G>, so
 * exactly one caller makes each generation), writes its member record, its announcement
 * ann, then bumps elastic/gen. edit builds the next record from the latest one (NULL: the
 * same members); it returns 1 when no change is needed any more (a peer already made it),
 * then *gen = 0. ann is read after edit (edit may rewrite it). A caller that loses the claim
 * waits for the winner's announcement and tries again on top of it. *gen = the generation
 * announced. */
cddp_result_t cddp__gen_change(cddp_store_t *s, const cddp__job_announce_t *ann, int self_id,
                               int (*edit)(const cddp__members_t *cur, cddp__members_t *next, void *ctx),
                               void *ctx, int64_t *gen);
/* restart-all: opens generation from + 1, in which every member is new: the rendezvous round
 * of the same number gathers them (round from + 1), and the first of them writes its member
 * record. Every agent of generation from may call it (self: its node rank there): exactly
 * one claim makes it, the others wait (bounded) for that one's announcement. */
cddp_result_t cddp__gen_open_restart(cddp_store_t *s, int64_t from, int self);
/* restart-all: the job ended with round from (its event, done or fail, says how): generation
 * from + 1 is announced as its end, so that a node waiting for round from + 1 (it came after
 * round from closed) stops at once instead of waiting out --rdzv-timeout. Every agent of the
 * round may call it; exactly one claim makes it, and nobody waits for it. */
cddp_result_t cddp__gen_close_job(cddp_store_t *s, int64_t from, int self);
/* The generation the rendezvous gathered last: the latest restart generation (or the job's end,
 * whose round never opens), or 0 (replace mode gathers generation 0 only; a node that comes
 * later is taken in as pending). */
cddp_result_t cddp__gen_gathering(cddp_store_t *s, int64_t *gen);
/* Agent: announces the next generation for a replacement (same members); *gen = its number. */
cddp_result_t cddp__gen_bump(cddp_store_t *s, const cddp__job_announce_t *ann, int64_t *gen);
/* A fresh store (the store's new host) gets generation gen back: its member record, its
 * announcement ann, and the counter at gen, so the next change makes gen + 1. */
cddp_result_t cddp__gen_restore(cddp_store_t *s, int64_t gen, const cddp__job_announce_t *ann,
                                const cddp__members_t *m);
/* What made generation g (elastic/gen/<g>): 1 with *out set, 0 when g was not announced
 * (or its announcement is not one: out->kind = CDDP__GEN_NONE). */
int cddp__gen_what(cddp_store_t *s, int64_t g, cddp__job_announce_t *out);
/* The trainer's world sizes (elastic/worlds): a joiner that would make another is kept pending. */
cddp_result_t cddp__job_worlds_publish(cddp_store_t *s, const int *sizes, int n);
/* The job cannot go on (elastic/stop = line): the agents replace nobody and stop. */
cddp_result_t cddp__job_stop(cddp_store_t *s, const char *line);
/* The latest announced generation (0 when none was). */
cddp_result_t cddp__gen_latest(cddp_store_t *s, int64_t *gen);
/* Blocks until a generation later than gen is announced, at most timeout_ms (TIMEOUT). */
cddp_result_t cddp__gen_wait_past(cddp_store_t *s, int64_t gen, int timeout_ms);
/* A view of s under "elastic/g<gen>/" whose blocking get / wait calls poll in slices and
 * fail with ABORTED as soon as a later generation is announced, or with TIMEOUT at deadline
 * (monotonic ns; UINT64_MAX = none). Close it after the communicator built over it. */
cddp_result_t cddp__gen_view(cddp_store_t **out, cddp_store_t *s, int64_t gen, uint64_t deadline);
/* The communicator formed: from now on the view is a plain prefix view. */
void cddp__gen_view_disarm(cddp_store_t *view);

/* Builds the communicator of the latest generation (at least min_gen) over s; when a later
 * generation is announced while it forms, starts over there. Bounded by deadline for the
 * store waits (the transports by cfg's timeout). On OK, *view is the store view *comm was
 * built on (close it after destroying *comm) and *gen its generation. */
/* place (NULL: rank and world are fixed): with agent_id >= 0, the rank and world of each
 * generation tried come from its member record (rank_base of the agent + local_rank); on
 * OK place->rank / world hold them. NOT_FOUND with place->gone = 1 when the agent is not a
 * member (this worker was dropped), 2 when the record says the job stops, 3 when the job
 * finished (elastic/complete) before the generation formed (a newcomer came too late). */
typedef struct cddp__gen_place {
  int agent_id, local_rank;
  int rank, world, gone;
} cddp__gen_place_t;
cddp_result_t cddp__gen_form(cddp_store_t *s, int rank, int world, int round, const cddp_comm_config_t *cfg,
                             int64_t min_gen, uint64_t deadline, cddp__gen_place_t *place, cddp_comm_t **comm,
                             cddp_store_t **view, int64_t *gen);

#endif /* CDDP_JOB_ELASTIC_H */
