/* member.h - an agent's watch over the other member agents of its job: its own heartbeat, a
 * will that marks it dead the moment its connection drops, and the detection of peers that
 * crashed (their will fired) or went silent (no heartbeat within the timeout). */
#ifndef CDDP_JOB_MEMBER_H
#define CDDP_JOB_MEMBER_H

#include <stdint.h>

#include "job/elastic.h"
#include "job/events.h"
#include "job/rdzv.h"
#include "job/store_move.h"

typedef struct cddp__monitor cddp__monitor_t;

/* Connects to the store at host:port (own connection, own thread), registers the will
 * "<run_id>/elastic/dead/<self_id>" and starts beating elastic/hb/<self_id> every hb_ms.
 * It reports on notify_fd, one cddp__agent_ev_t per event (job/events.h; each write is atomic):
 *   LOST id, why        a watched member's will fired, or its heartbeat stood still for
 *                       timeout_ms (why says which)
 *   GEN value           generation `value` was announced (a later one than watched)
 *   STOP                elastic/stop was set (a worker asked the job to stop)
 *   PENDING id          agent id waits to be taken in (elastic/pending/<id>, alive); once per
 *                       id per cddp__monitor_watch
 *   WAITED              the deadline set by cddp__monitor_deadline passed (once per setting)
 *   CUT why             the store did not answer within timeout_ms (every call on this
 *                       connection is bounded by it): this node is cut off; the thread ends
 * A member is reported lost once per cddp__monitor_watch. */
cddp_result_t cddp__monitor_start(cddp__monitor_t **out, const char *host, int port, const char *token,
                                  const char *run_id, int self_id, int hb_ms, int timeout_ms, int notify_fd);
/* The beat for a job of n members: base_ms up to 1,024 members, then base_ms * n / 1,024, so the
 * store's steady heartbeat load stops growing with N; at most timeout_ms / 4 and 2 s (a loss is
 * seen within the timeout + one beat), never below base_ms. Every agent derives it from the same
 * generation record, so all beat alike. cddp__monitor_watch applies it. */
int cddp__heartbeat_ms(int n, int base_ms, int timeout_ms);
/* The heartbeat timeout of a job of up to max_nodes nodes (--nnodes' MAX) when
 * CDDP_HEARTBEAT_TIMEOUT_MS is not set: floor_ms (its default, 3 s) up to 1,536 nodes with the
 * default beat, then four of the grown beat (so the beat is not capped by the timeout and the
 * store's load stays flat), at most 8 s: a loss is seen within 8 s + 2 s at any size. Every
 * agent of a job has the same MAX, so all agree on it for the job's whole life (a timeout that
 * followed each generation's N would differ between agents while a generation forms). */
int cddp__heartbeat_timeout_ms(int max_nodes, int base_ms, int floor_ms);
/* The members as of generation gen: this agent watches the two after it in the record
 * (wrapping; self is skipped), the store's host every member's heartbeat too; a pending agent,
 * not in the record, watches none. */
void cddp__monitor_watch(cddp__monitor_t *m, const cddp__members_t *members, int64_t gen);
/* Reports WAITED once the monotonic time passes deadline_ns (0: none). */
void cddp__monitor_deadline(cddp__monitor_t *m, uint64_t deadline_ns);
/* This agent waits to be taken in with this pending record (NULL: not any more): after the
 * store moves, the monitor publishes it again in the new store, whose host never saw it. */
void cddp__monitor_pending(cddp__monitor_t *m, const char *rec, size_t len);
/* Split-brain guard of the store's host (docs/store.md, "Failover"): while *hosting, a beat that
 * finds fewer than half of the members (this one included) alive reports a MINORITY event
 * (job/events.h) instead of any loss (when a member is lost, one silent for half the timeout
 * counts as gone: the others of a cut go silent a beat apart), and a turn of the thread that comes the heartbeat timeout or more after the last
 * (the process was frozen) reports FROZE with the ms it stood still, once: the others, a majority, may take the
 * store over after the lease. NULL: off. */
void cddp__monitor_lease(cddp__monitor_t *m, const int *hosting);
/* Stops the thread; goodbye = 1 marks elastic/left/<self> and closes with a goodbye (the
 * will is dropped); 0 leaves the connection to die with the process. NULL is a no-op. */
void cddp__monitor_stop(cddp__monitor_t *m, int goodbye);

#endif /* CDDP_JOB_MEMBER_H */

/* ---- the agent's side of membership changes ---- */
typedef struct cddp__membership {
  cddp_store_t *store;  /* the agent's "<run_id>/" view */
  int self, min_nodes, max_nodes, round;
  int wait_ms;          /* below MIN after a loss: wait this long for pending nodes (--rdzv-timeout) */
  int64_t wait_gen;     /* the wait generation whose deadline the monitor holds (-1: none) */
  char host[64];
  cddp__members_t cur;  /* the members of generation gen */
  int64_t gen;
  cddp__monitor_t *mon;
  cddp__store_move_t *mv; /* the store's failover (NULL: off): told each generation seen */
  int pipe[2];          /* the monitor's reports */
  int ending;           /* 0 running; 1 this node was dropped; 2 the job stops */
  int marked;           /* this node's workers are done and it said so (marked again after a move) */
  int fence;            /* 1: the store's host lost its lease: its workers die now, no grace (2: done) */
  int pending;          /* 1 while this agent waits in elastic/pending/<self> to be taken in */
  int joined;           /* set when a generation took this pending agent in (the agent clears it) */
  char line[512];       /* why, one line (printed by the agent at exit) */
} cddp__membership_t;

/* Generation 0's members are the round's nodes in node-rank order (every agent writes the
 * same record; the first write wins); then adopts the latest generation. */
cddp_result_t cddp__membership_begin(cddp__membership_t *ms, const cddp__rdzv_node_t *nodes, int n);
/* A late joiner, a spare or a node that comes back: registers elastic/pending/<self> = "<nproc>
 * <host>" and waits (pending = 1) until a member proposes a generation that lists it. */
cddp_result_t cddp__membership_pend(cddp__membership_t *ms, int nproc);
/* Handles what the monitor reported (call when ms->pipe[0] is readable): a lost member is
 * proposed away, a spare taking its place when one is pending (exactly one agent makes the
 * new generation and logs its line; below min_nodes the generation says the job stops); a
 * pending agent is taken in while the job has fewer than max_nodes members (a "join"
 * generation); a new generation is adopted. Below min_nodes the job first waits wait_ms for
 * pending nodes (a "wait" generation; one line); when they come, one generation takes them in,
 * when the monitor says "waited", the generation says the job stops. */
void cddp__membership_events(cddp__membership_t *ms);
/* Adopts the latest generation: its members, or ending when it drops this node or stops. A
 * pending agent stays pending until a generation lists it (then joined = 1). */
void cddp__membership_refresh(cddp__membership_t *ms);
/* This node's workers all succeeded (mark = 1), or the members changed (mark = 0): when every
 * current member's workers succeeded, posts the round's "done". */
void cddp__membership_done(cddp__membership_t *ms, int mark);
