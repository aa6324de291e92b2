/* rdzv_watch.c - during the first rendezvous, a thread that finds nodes waiting at the same store
 * under another --rdzv-id, and clients the store refused for their token (see rdzv_watch.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/check.h"
#include "common/clock.h"
#include "common/knobs.h"
#include "common/log.h"
#include "job/rdzv.h"
#include "job/rdzv_watch.h"
#include "job/jobkeys.h"

#define WATCH_MS 300    /* how often it looks, up to 128 nodes; then longer, so that the looks of */
#define WATCH_MAX_MS 2000 /* the whole job reach the store at about 400 a second, up to this */
#define GRACE_MS 2000   /* a lone node is normal for this long (the others are starting) */
#define FRESH_MS 2000   /* a waiter whose record is older than this is gone */
#define STATIC_COUNT_MAX 64 /* a static job of more nodes says its waits without counting them */
#define WARN_SAYS 3     /* after this many "waiting" lines (30 s by default) they are warnings */

static uint64_t wall_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

int cddp__rdzv_waiter_format(const cddp__rdzv_waiter_t *w, char *buf, size_t size) {
  int n = snprintf(buf, size, "%llu %d %d %s %s", (unsigned long long)w->wall_ms, w->waiting, w->node_records,
                   w->run_id, w->host[0] ? w->host : "?");
  return n > 0 && (size_t)n < size ? n : -1;
}

int cddp__rdzv_waiter_parse(const char *text, size_t len, cddp__rdzv_waiter_t *out) {
  char buf[300];
  unsigned long long t;
  if (len >= sizeof buf) return -1;
  memcpy(buf, text, len);
  buf[len] = '\0';
  memset(out, 0, sizeof *out);
  if (sscanf(buf, "%llu %d %d %127s %63s", &t, &out->waiting, &out->node_records, out->run_id, out->host) != 5)
    return -1;
  out->wall_ms = t;
  return 0;
}

void cddp__rdzv_id_line(const cddp__rdzv_waiter_t *a, const cddp__rdzv_waiter_t *b, char *buf, size_t size) {
  if (strcmp(a->run_id, b->run_id) > 0) {
    const cddp__rdzv_waiter_t *t = a;
    a = b, b = t;
  }
  snprintf(buf, size, "the nodes disagree on --rdzv-id: node %s was started with %s, node %s with %s, at the same "
           "store; every node of a job must be given the same --rdzv-id", a->host, a->run_id, b->host, b->run_id);
}

/* Ends the round-0 join of the job run_id (a view of base under "<run_id>/") with line. */
static void end_job(cddp_store_t *base, const char *run_id, int node_records, const char *line) {
  char prefix[160];
  cddp_store_t *v;
  snprintf(prefix, sizeof prefix, "%s/", run_id);
  if (cddp_store_prefix_create(&v, base, prefix, 0) != CDDP_OK) return;
  cddp__rdzv_mismatch(v, 0, node_records, line);
  cddp_store_close(v);
}

/* The refused count in the store's key (0: none). */
static long long refused(cddp_store_t *base, char *addr, size_t size) {
  void *v = NULL;
  size_t len = 0;
  long long n = 0;
  if (cddp_store_get(base, CDDP_STORE_REFUSED_KEY, &v, &len, 0) == CDDP_OK && v) {
    char text[200];
    int off = 0;
    snprintf(text, sizeof text, "%.*s", (int)CDDP_MIN(len, sizeof text - 1), (char *)v);
    if (sscanf(text, "%lld %n", &n, &off) == 1 && off > 0) snprintf(addr, size, "%s", text + off);
  }
  free(v);
  return n;
}

/* One look at the shared record, refreshing it when it is absent, stale, not waiting, or of this run
 * id and half stale (the job's waiters take turns: O(1) requests a look, not one per waiter). 1 when
 * a waiter of another run id holds it fresh and this node is past its grace (both jobs are ended). */
static int look(cddp__rdzv_watch_t *w, cddp_store_t *base, int judge) {
  const char *key = cddp__job_key(CDDP__JK_RDZV_WATCH, 0, 0).s;
  void *v = NULL, *was = NULL;
  size_t len = 0, wl = 0;
  cddp__rdzv_waiter_t other;
  uint64_t now = wall_ms();
  if (cddp_store_get(base, key, &v, &len, 0) != CDDP_OK) v = NULL, len = 0;
  int ok = v && cddp__rdzv_waiter_parse(v, len, &other) == 0;
  int fresh = ok && other.waiting && other.wall_ms + FRESH_MS >= now;
  int mine = ok && !strcmp(other.run_id, w->me.run_id);
  if (fresh && !mine && judge) {
    free(v);
    char line[600]; /* two hosts and two run ids at their longest */
    cddp__rdzv_id_line(&w->me, &other, line, sizeof line);
    end_job(base, other.run_id, other.node_records, line);
    end_job(base, w->me.run_id, w->me.node_records, line);
    return 1;
  }
  if (!fresh || (mine && other.wall_ms + FRESH_MS / 2 < now)) {
    char val[300];
    w->me.wall_ms = now;
    int vl = cddp__rdzv_waiter_format(&w->me, val, sizeof val);
    if (vl > 0) (void)cddp_store_compare_set(base, key, v, len, val, (size_t)vl, &was, &wl); /* v NULL: absent */
    free(was);
  }
  free(v);
  return 0;
}

/* The rendezvous returned: the record, when it is this job's, says so (no wait for it to go stale). */
static void leave(cddp__rdzv_watch_t *w, cddp_store_t *base) {
  const char *key = cddp__job_key(CDDP__JK_RDZV_WATCH, 0, 0).s;
  void *v = NULL, *was = NULL;
  size_t len = 0, wl = 0;
  cddp__rdzv_waiter_t other;
  char val[300];
  if (cddp_store_get(base, key, &v, &len, 0) == CDDP_OK && v && cddp__rdzv_waiter_parse(v, len, &other) == 0 &&
      !strcmp(other.run_id, w->me.run_id)) {
    w->me.waiting = 0, w->me.wall_ms = wall_ms();
    int vl = cddp__rdzv_waiter_format(&w->me, val, sizeof val);
    if (vl > 0) (void)cddp_store_compare_set(base, key, v, len, val, (size_t)vl, &was, &wl);
  }
  free(v);
  free(was);
}

/* The nodes in round 0 of this job so far: c10d its join count, static its node records. */
static int joined_nodes(cddp__rdzv_watch_t *w, cddp_store_t *base) {
  char prefix[160];
  cddp_store_t *v;
  int64_t n = 0;
  snprintf(prefix, sizeof prefix, "%s/", w->me.run_id);
  if (cddp_store_prefix_create(&v, base, prefix, 0) != CDDP_OK) return -1;
  if (w->me.node_records <= 0) {
    if (cddp_store_add(v, cddp__job_key(CDDP__JK_RDZV_JOINED, 0, 0).s, 0, &n) != CDDP_OK) n = -1;
  } else if (w->me.node_records > STATIC_COUNT_MAX) {
    n = -2; /* one get per node from every waiting node would grow as N^2 at the store */
  } else {
    for (int i = 0; i < w->me.node_records; i++) {
      void *val = NULL;
      size_t len = 0;
      n += cddp_store_get(v, cddp__job_key(CDDP__JK_RDZV_NODE, 0, i).s, &val, &len, 0) == CDDP_OK;
      free(val);
    }
  }
  cddp_store_close(v);
  return (int)CDDP_MIN(n, 1 << 20); /* the store's count is another process's word */
}

/* "waiting for 1 more node at HOST:PORT (1 of 2 joined, 10 s of 300)": what a silent wait waits for. */
static void say_waiting(cddp__rdzv_watch_t *w, cddp_store_t *base, uint64_t waited_ms, int warn) {
  int joined = joined_nodes(w, base), more = w->need_nodes - joined;
  if (joined == -2) { /* a large static job: not counted */
    fprintf(stderr, "cddp run: %swaiting for the other nodes at %s:%d (%llu s of %d)\n", warn ? "warning: still " : "",
            w->host, w->port, (unsigned long long)(waited_ms / 1000), w->timeout_ms / 1000);
    return;
  }
  if (joined < 0 || more <= 0) return; /* the round is closing: nothing to wait for */
  fprintf(stderr, "cddp run: %swaiting for %d more node%s at %s:%d (%d of %d joined, %llu s of %d)\n",
          warn ? "warning: still " : "", more, more == 1 ? "" : "s", w->host, w->port, joined,
          w->need_nodes, (unsigned long long)(waited_ms / 1000), w->timeout_ms / 1000);
}

static void *watch_main(void *arg) {
  cddp__rdzv_watch_t *w = arg;
  cddp_store_t *base = w->conn;
  char addr[160] = "";
  long long seen = refused(base, addr, sizeof addr);
  uint64_t start = cddp__now_ns(), grace = (uint64_t)GRACE_MS * 1000000ull;
  int64_t say_ms = cddp__knob_int(CDDP_KNOB_RDZV_SAY_MS);
  uint64_t next_say = say_ms > 0 ? (uint64_t)say_ms : UINT64_MAX, warn_ms = (uint64_t)say_ms * WARN_SAYS;
  while (!__atomic_load_n(&w->stop, __ATOMIC_ACQUIRE)) {
    long long now_refused = refused(base, addr, sizeof addr);
    if (now_refused > seen)
      fprintf(stderr, "cddp run: the store refused a node at %s: its job token differs from this node's "
              "(CDDP_TOKEN / CDDP_TOKEN_FILE must be the same on every node); still waiting for the nodes\n", addr);
    seen = now_refused;
    if (look(w, base, cddp__now_ns() - start >= grace)) break;
    uint64_t waited_ms = (cddp__now_ns() - start) / 1000000u;
    if (waited_ms >= next_say) {
      say_waiting(w, base, waited_ms, waited_ms >= warn_ms);
      next_say += (uint64_t)say_ms;
    }
    for (int i = 0; i < w->look_ms / 50 && !__atomic_load_n(&w->stop, __ATOMIC_ACQUIRE); i++) usleep(50000);
  }
  leave(w, base);
  return NULL;
}

void cddp__rdzv_watch_start(cddp__rdzv_watch_t *w, cddp_store_t *conn, const char *host, int port,
                            const cddp__rdzv_waiter_t *me, int max_nodes, int need_nodes, int timeout_ms) {
  memset(w, 0, sizeof *w);
  if (!conn) {
    CDDP_INFO(CDDP_SUB_RDZV, "no watch for another --rdzv-id or refused nodes: no connection");
    return;
  }
  w->conn = conn;
  w->look_ms = (int)CDDP_MIN(WATCH_MAX_MS, (int64_t)WATCH_MS * CDDP_MAX(max_nodes, 128) / 128);
  w->need_nodes = need_nodes;
  w->timeout_ms = timeout_ms;
  snprintf(w->host, sizeof w->host, "%s", host);
  w->port = port;
  w->me = *me;
  w->me.waiting = 1;
  w->running = pthread_create(&w->th, NULL, watch_main, w) == 0;
}

void cddp__rdzv_watch_stop(cddp__rdzv_watch_t *w) {
  if (!w->running) return;
  __atomic_store_n(&w->stop, 1, __ATOMIC_RELEASE);
  pthread_join(w->th, NULL);
  w->running = 0;
}

int cddp__rdzv_nproc_line(const struct cddp__rdzv *rz, char *buf, size_t size) {
  for (int i = 1; i < rz->nnodes; i++) {
    const cddp__rdzv_node_t *a = &rz->nodes[0], *b = &rz->nodes[i];
    if (a->nproc == b->nproc) continue;
    snprintf(buf, size, "the nodes run different numbers of workers (--nproc-per-node): node %s %d, node %s %d; "
             "allowed (ranks follow node order), but the hierarchical collectives need the same number on every "
             "node and fall back to flat TCP", a->host, a->nproc, b->host, b->nproc);
    return 1;
  }
  return 0;
}
