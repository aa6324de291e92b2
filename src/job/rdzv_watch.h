/* rdzv_watch.h - what a node waiting in the rendezvous cannot see by itself: nodes of the same
 * store waiting under another --rdzv-id (so neither job ever fills), and nodes the store refused
 * for their token. Both become one line on the nodes that wait. */
#ifndef CDDP_JOB_RDZV_WATCH_H
#define CDDP_JOB_RDZV_WATCH_H

#include <pthread.h>
#include <stdint.h>

#include "cddp/store.h"

/* One key at the top of the store (outside every job's "<run_id>/"), owned by rdzv_watch.c:
 *   rdzv-watch/latest   a waiter's record (cddp__rdzv_waiter_t): the waiters of one job take
 *                       turns refreshing it; a waiter of another run id finds it fresh there.
 * One key, not one per waiter, so a look costs O(1) requests however many nodes wait. */
typedef struct cddp__rdzv_waiter {
  uint64_t wall_ms;  /* refreshed every WATCH_MS while it waits */
  int waiting;       /* 0 once its rendezvous returned */
  int node_records;  /* static backend: the node records its nodes wait for (--nnodes MAX); c10d: 0 */
  char run_id[128];
  char host[64];
} cddp__rdzv_waiter_t;

/* "<wall_ms> <waiting> <node_records> <run_id> <host>" and back (0, or -1 when malformed). */
int cddp__rdzv_waiter_format(const cddp__rdzv_waiter_t *w, char *buf, size_t size);
int cddp__rdzv_waiter_parse(const char *text, size_t len, cddp__rdzv_waiter_t *out);

/* Two jobs' waiting nodes: the line every node of both prints (the run ids in sorted order, so
 * both sides print the same). */
void cddp__rdzv_id_line(const cddp__rdzv_waiter_t *a, const cddp__rdzv_waiter_t *b, char *buf, size_t size);

/* After the join: 1 with one line in buf when the nodes run different numbers of workers (allowed,
 * as torchrun allows it, but worth a word: the hierarchical collectives then fall back to flat
 * TCP, and a batch split by node count comes out uneven). */
struct cddp__rdzv;
int cddp__rdzv_nproc_line(const struct cddp__rdzv *rz, char *buf, size_t size);

typedef struct cddp__rdzv_watch {
  pthread_t th;
  int running, stop; /* stop: atomic */
  cddp_store_t *conn; /* lent by the agent (its watcher's, idle during the first join): not closed here */
  char host[256];
  int port;
  int look_ms; /* how often it looks: longer for a larger job, so the store sees a bounded rate */
  int need_nodes, timeout_ms; /* for the "waiting for" line: the nodes the round needs, --rdzv-timeout */
  cddp__rdzv_waiter_t me;
} cddp__rdzv_watch_t;

/* Starts watching the store at host:port on conn (an unprefixed connection the caller lends
 * and keeps open until cddp__rdzv_watch_stop; no connection of its own, one fewer per agent at
 * the store host) while this agent (me:
 * its run id, host, node_records) waits in round 0: after 2 s, a node of another run id waiting
 * there too ends both jobs' round with one line (rdzv.h's cddp__rdzv_mismatch); a client the
 * store refuses meanwhile is said in one line on stderr (the job keeps waiting: a stranger must
 * not end it). Every CDDP_RDZV_SAY_MS (10 s) it says on stderr how many of need_nodes have joined
 * round 0 (c10d: its join count; static: the node records there) and how much of timeout_ms is
 * gone, so no wait is silent; from the third line (30 s) on as a warning. No conn turns the
 * watch off. */
void cddp__rdzv_watch_start(cddp__rdzv_watch_t *w, cddp_store_t *conn, const char *host, int port,
                            const cddp__rdzv_waiter_t *me, int max_nodes, int need_nodes, int timeout_ms);
/* Stops it (the rendezvous returned) and marks this agent's record done. */
void cddp__rdzv_watch_stop(cddp__rdzv_watch_t *w);

#endif /* CDDP_JOB_RDZV_WATCH_H */
