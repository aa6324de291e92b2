/* rdzv.c - round-based rendezvous: join order by add(), closing by compare_set, rounds by restart. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/check.h"
#include "common/clock.h"
#include "launcher/rdzv.h"

#define K(buf, ...) snprintf(buf, sizeof buf, __VA_ARGS__)

static int64_t parse_int(const void *v, int64_t dflt) {
  char *end;
  long long x = v ? strtoll((const char *)v, &end, 10) : 0;
  return v && end != (const char *)v ? x : dflt;
}

static cddp_result_t get_int(cddp_store_t *s, const char *key, int timeout_ms, int64_t *out) {
  void *v = NULL;
  size_t len;
  CDDP_CHECK(cddp_store_get(s, key, &v, &len, timeout_ms));
  *out = parse_int(v, -1);
  free(v);
  if (*out < 0) return cddp__fail(CDDP_REMOTE, "store key %s holds '%.*s', not a count", key, (int)len, "");
  return CDDP_OK;
}

static cddp_result_t publish(cddp_store_t *s, int round, int slot, const cddp__rdzv_cfg_t *cfg) {
  char key[96], val[256];
  const cddp__rdzv_node_t *n = &cfg->self;
  K(key, "rdzv/%d/node/%d", round, slot);
  int len = K(val, "%s %s %d %d %d %d %d", n->host, n->addr, n->nproc, n->master_port, n->id, cfg->min_nodes,
              cfg->max_nodes);
  return cddp_store_set(s, key, val, (size_t)len);
}

/* "MIN" or "MIN:MAX", as --nnodes takes it. */
static const char *range(int lo, int hi, char *buf, size_t size) {
  if (lo == hi) snprintf(buf, size, "%d", lo);
  else snprintf(buf, size, "%d:%d", lo, hi);
  return buf;
}

/* The line every node prints when two disagree on --nnodes. */
static cddp_result_t disagree(const char *host_a, int lo_a, int hi_a, const char *host_b, int lo_b, int hi_b) {
  char a[32], b[32];
  return cddp__fail(CDDP_INVALID_ARG, "the nodes disagree on --nnodes: node %s was started with %s, node %s with %s; every "
                    "node of a job must be given the same --nnodes (and --rdzv-id)", host_a, range(lo_a, hi_a, a, sizeof a),
                    host_b, range(lo_b, hi_b, b, sizeof b));
}

/* A node that found the disagreement left its line in rdzv/mismatch: the same line here. */
static cddp_result_t mismatch_here(cddp_store_t *s) {
  void *v = NULL;
  size_t len = 0;
  if (cddp_store_get(s, "rdzv/mismatch", &v, &len, 5000) != CDDP_OK)
    return cddp__fail(CDDP_INVALID_ARG, "the nodes disagree on --nnodes (another node said so)");
  cddp_result_t r = cddp__fail(CDDP_INVALID_ARG, "%.*s", (int)CDDP_MIN(len, 400), (char *)v);
  free(v);
  return r;
}

/* A round's node count ("closed"); "mismatch" there means a node found the nodes disagree. */
static cddp_result_t get_closed(cddp_store_t *s, const char *key, int timeout_ms, int64_t *out) {
  void *v = NULL;
  size_t len = 0;
  CDDP_CHECK(cddp_store_get(s, key, &v, &len, timeout_ms));
  int mismatch = len == 8 && !memcmp(v, "mismatch", 8);
  *out = parse_int(v, -1);
  free(v);
  if (mismatch) return mismatch_here(s);
  if (*out < 0) return cddp__fail(CDDP_REMOTE, "store key %s does not hold a count", key);
  return CDDP_OK;
}

/* The first node's --nnodes is the job's (rdzv/settings); a node whose own differs fails at once
 * and wakes the others: its line in rdzv/mismatch, the round's "closed" key set to "mismatch"
 * (c10d nodes wait on it), its node record published (static nodes wait on the records). */
static cddp_result_t check_settings(cddp_store_t *s, const cddp__rdzv_cfg_t *cfg, int round) {
  char mine[128];
  void *cur = NULL;
  size_t len = 0;
  int n = K(mine, "%d %d %.63s", cfg->min_nodes, cfg->max_nodes, cfg->self.host);
  CDDP_CHECK(cddp_store_compare_set(s, "rdzv/settings", NULL, 0, mine, (size_t)n, &cur, &len));
  char text[160], host[64];
  int lo, hi;
  snprintf(text, sizeof text, "%.*s", (int)CDDP_MIN(len, sizeof text - 1), cur ? (char *)cur : "");
  free(cur);
  if (sscanf(text, "%d %d %63s", &lo, &hi, host) != 3 || (lo == cfg->min_nodes && hi == cfg->max_nodes))
    return CDDP_OK;
  cddp_result_t r = disagree(host, lo, hi, cfg->self.host, cfg->min_nodes, cfg->max_nodes);
  char line[512];
  K(line, "%s", cddp_last_error());
  /* static: the first node waits for records 0..its MAX-1 */
  cddp__rdzv_mismatch(s, round, cfg->node_rank >= 0 ? hi : 0, line);
  cddp__fail(r, "%s", line);
  return r;
}

void cddp__rdzv_mismatch(cddp_store_t *s, int round, int node_records, const char *line) {
  char key[64];
  void *was = NULL;
  size_t wlen;
  (void)cddp_store_compare_set(s, "rdzv/mismatch", NULL, 0, line, strlen(line), &was, &wlen);
  free(was);
  was = NULL;
  K(key, "rdzv/%d/closed", round);
  (void)cddp_store_compare_set(s, key, NULL, 0, "mismatch", 8, &was, &wlen);
  free(was);
  for (int i = 0; i < node_records; i++) { /* the missing ones get the same word */
    was = NULL;
    K(key, "rdzv/%d/node/%d", round, i);
    (void)cddp_store_compare_set(s, key, NULL, 0, "mismatch", 8, &was, &wlen);
    free(was);
  }
}

/* Waits for node records 0..n-1 of round, then reads them into out->nodes. */
static cddp_result_t collect(cddp_store_t *s, const cddp__rdzv_cfg_t *cfg, int round, int n, uint64_t deadline,
                             int timeout_ms, cddp__rdzv_t *out) {
  cddp_result_t ret = CDDP_OK;
  char (*keys)[96] = calloc((size_t)n, sizeof *keys);
  const char **kp = calloc((size_t)n, sizeof *kp);
  out->nodes = calloc((size_t)n, sizeof *out->nodes);
  if (!keys || !kp || !out->nodes) {
    ret = cddp__fail(CDDP_SYSTEM, "out of memory in rendezvous");
    goto done;
  }
  for (int i = 0; i < n; i++) {
    K(keys[i], "rdzv/%d/node/%d", round, i);
    kp[i] = keys[i];
  }
  for (int i = 0; i < n && ret == CDDP_OK; i += 64) /* in chunks the store's wait accepts */
    ret = cddp_store_wait(s, kp + i, (size_t)CDDP_MIN(64, n - i), cddp__ms_left(deadline));
  if (ret == CDDP_TIMEOUT) {
    int have = 0, first_missing = -1;
    for (int i = 0; i < n; i++) {
      if (cddp_store_wait(s, &kp[i], 1, 0) == CDDP_OK) have++;
      else if (first_missing < 0) first_missing = i;
    }
    ret = cddp__fail(CDDP_TIMEOUT, "rendezvous round %d: %d of %d nodes joined within %.1f s (node %d missing)", round,
                     have, n, timeout_ms / 1e3, first_missing);
    goto done;
  }
  if (ret != CDDP_OK) goto done;
  out->world_size = 0;
  for (int i = 0; i < n; i++) {
    void *v = NULL;
    size_t len;
    CDDP_CHECK_GOTO(cddp_store_get(s, keys[i], &v, &len, 0), ret, done);
    if (len == 8 && !memcmp(v, "mismatch", 8)) { /* a node that disagrees filled the slot */
      free(v);
      ret = mismatch_here(s);
      goto done;
    }
    cddp__rdzv_node_t *nd = &out->nodes[i];
    nd->id = -1;
    int lo = cfg->min_nodes, hi = cfg->max_nodes;
    int got = sscanf((char *)v, "%63s %63s %d %d %d %d %d", nd->host, nd->addr, &nd->nproc, &nd->master_port, &nd->id,
                     &lo, &hi);
    free(v);
    if (got < 4 || nd->nproc < 1) {
      ret = cddp__fail(CDDP_REMOTE, "rendezvous round %d: node record %s is malformed", round, keys[i]);
      goto done;
    }
    if (lo != cfg->min_nodes || hi != cfg->max_nodes) {
      ret = disagree(nd->host, lo, hi, cfg->self.host, cfg->min_nodes, cfg->max_nodes);
      goto done;
    }
    if (i < out->node_rank) out->rank_base += nd->nproc;
    out->world_size += nd->nproc;
  }
  out->nnodes = n;
done:
  free(keys);
  free(kp);
  if (ret != CDDP_OK) {
    free(out->nodes);
    out->nodes = NULL;
  }
  return ret;
}

/* Closes round at n nodes unless someone already did; returns the node count that won. */
static cddp_result_t close_round(cddp_store_t *s, int round, int n, int *closed_n, int *closed_here) {
  char key[64], val[32];
  void *cur = NULL;
  size_t len;
  K(key, "rdzv/%d/closed", round);
  int vlen = K(val, "%d", n);
  CDDP_CHECK(cddp_store_compare_set(s, key, NULL, 0, val, (size_t)vlen, &cur, &len));
  *closed_n = (int)parse_int(cur, -1);
  *closed_here = len == (size_t)vlen && !memcmp(cur, val, len);
  free(cur);
  return CDDP_OK;
}

/* The round closed without this node: its nodes, then this one appended. */
static cddp_result_t join_late(cddp_store_t *s, const cddp__rdzv_cfg_t *cfg, int round, uint64_t deadline,
                               cddp__rdzv_t *out) {
  char key[64];
  int64_t n;
  K(key, "rdzv/%d/closed", round);
  cddp_result_t r = get_closed(s, key, cddp__ms_left(deadline), &n);
  if (r == CDDP_TIMEOUT)
    return cddp__fail(CDDP_TIMEOUT, "rendezvous round %d did not close within %.1f s", round, cfg->timeout_ms / 1e3);
  CDDP_CHECK(r);
  out->node_rank = 0, out->rank_base = 0;
  CDDP_CHECK(collect(s, cfg, round, (int)n, deadline, cfg->timeout_ms, out));
  cddp__rdzv_node_t *nodes = realloc(out->nodes, (size_t)(n + 1) * sizeof *nodes);
  if (!nodes) return cddp__fail(CDDP_SYSTEM, "out of memory in rendezvous");
  out->nodes = nodes;
  nodes[n] = cfg->self;
  out->node_rank = (int)n, out->nnodes = (int)n + 1;
  out->rank_base = out->world_size;
  out->world_size += cfg->self.nproc;
  out->late = 1;
  return CDDP_OK;
}

cddp_result_t cddp__rdzv_join(cddp_store_t *s, const cddp__rdzv_cfg_t *cfg, int min_round, cddp__rdzv_t *out) {
  uint64_t deadline = cddp__deadline_ms(cfg->timeout_ms);
  int64_t cur;
  int round = min_round;
  char key[96];
  memset(out, 0, sizeof *out);
  if (get_int(s, "rdzv/round", 0, &cur) == CDDP_OK && cur > round)
    round = (int)cur;
  cddp__clear_error();
  for (;;) {
    int64_t restarts = 0;
    if (round > 0) {
      K(key, "rdzv/%d/open", round);
      cddp_result_t r = get_int(s, key, cddp__ms_left(deadline), &restarts);
      if (r == CDDP_TIMEOUT)
        return cddp__fail(CDDP_TIMEOUT, "rendezvous: round %d did not open within %.1f s (the job runs without this "
                          "node; it would join at the next restart)", round, cfg->timeout_ms / 1e3);
      CDDP_CHECK(r);
    }
    out->round = round;
    out->restart_count = (int)restarts;
    if (cfg->node_rank >= 0) { /* static: ranks are given */
      out->node_rank = cfg->node_rank;
      CDDP_CHECK(check_settings(s, cfg, round));
      CDDP_CHECK(publish(s, round, cfg->node_rank, cfg));
      return collect(s, cfg, round, cfg->max_nodes, deadline, cfg->timeout_ms, out);
    }
    int64_t slot1;
    K(key, "rdzv/%d/joined", round);
    CDDP_CHECK(cddp_store_add(s, key, 1, &slot1));
    int slot = (int)slot1 - 1, n = -1;
    if (slot >= cfg->max_nodes && cfg->late_ok) return join_late(s, cfg, round, deadline, out);
    if (slot >= cfg->max_nodes) { /* full: wait for the next round */
      round++;
      continue;
    }
    CDDP_CHECK(check_settings(s, cfg, round));
    CDDP_CHECK(publish(s, round, slot, cfg));
    K(key, "rdzv/%d/closed", round);
    const char *ck = key;
    if (slot + 1 == cfg->max_nodes) {
      CDDP_CHECK(close_round(s, round, cfg->max_nodes, &n, &out->closed_here));
    } else if (slot + 1 >= cfg->min_nodes) {
      int wait_ms = CDDP_MIN(cfg->last_call_ms, cddp__ms_left(deadline));
      cddp_result_t r = cddp_store_wait(s, &ck, 1, wait_ms);
      if (r == CDDP_TIMEOUT) {
        char jk[64];
        int64_t joined;
        K(jk, "rdzv/%d/joined", round);
        CDDP_CHECK(cddp_store_add(s, jk, 0, &joined));
        CDDP_CHECK(close_round(s, round, (int)CDDP_MIN(joined, cfg->max_nodes), &n, &out->closed_here));
      } else {
        CDDP_CHECK(r);
      }
    }
    if (n < 0) {
      int64_t closed;
      cddp_result_t r = get_closed(s, key, cddp__ms_left(deadline), &closed);
      if (r == CDDP_TIMEOUT) {
        int64_t joined = 0;
        char jk[64];
        K(jk, "rdzv/%d/joined", round);
        cddp_store_add(s, jk, 0, &joined);
        return cddp__fail(CDDP_TIMEOUT, "rendezvous round %d: %d of at least %d nodes joined within %.1f s", round,
                          (int)joined, cfg->min_nodes, cfg->timeout_ms / 1e3);
      }
      CDDP_CHECK(r);
      n = (int)closed;
    }
    if (slot >= n && cfg->late_ok) {
      out->closed_here = 0;
      return join_late(s, cfg, round, deadline, out);
    }
    if (slot >= n) { /* joined after the close: next round */
      out->closed_here = 0;
      round++;
      continue;
    }
    out->node_rank = slot;
    return collect(s, cfg, round, n, deadline, cfg->timeout_ms, out);
  }
}

void cddp__rdzv_release(cddp__rdzv_t *r) {
  free(r->nodes);
  r->nodes = NULL;
}

void cddp__rdzv_event_key(int round, char *buf, size_t size) { snprintf(buf, size, "rdzv/%d/event", round); }

cddp_result_t cddp__rdzv_post(cddp_store_t *s, int round, const char *value, char **now) {
  char key[64];
  void *cur = NULL;
  size_t len;
  cddp__rdzv_event_key(round, key, sizeof key);
  CDDP_CHECK(cddp_store_compare_set(s, key, NULL, 0, value, strlen(value), &cur, &len));
  if (now) *now = cur;
  else free(cur);
  return CDDP_OK;
}

static void failure_key(int round, int node, char *buf, size_t size) {
  snprintf(buf, size, "rdzv/%d/failure/%d", round, node);
}

cddp_result_t cddp__rdzv_failure_post(cddp_store_t *s, int round, int node_rank, uint64_t wall_ns, int code,
                                      const char *line) {
  char key[64], val[640];
  failure_key(round, node_rank, key, sizeof key);
  int len = K(val, "%llu %d %.600s", (unsigned long long)wall_ns, code, line);
  return cddp_store_set(s, key, val, (size_t)CDDP_MIN(len, (int)sizeof val - 1));
}

int cddp__rdzv_failure_first(cddp_store_t *s, int round, int nnodes, int wait_ms, int *code, char *line, size_t size) {
  char (*keys)[64] = calloc((size_t)nnodes, sizeof *keys);
  const char **kp = calloc((size_t)nnodes, sizeof *kp);
  unsigned long long best = ~0ull;
  int found = 0;
  if (!keys || !kp) goto exit;
  for (int i = 0; i < nnodes; i++) failure_key(round, i, keys[i], sizeof keys[i]), kp[i] = keys[i];
  (void)cddp_store_wait(s, kp, nnodes, wait_ms); /* early when every node posted; a timeout is expected */
  for (int i = 0; i < nnodes; i++) {
    void *v = NULL;
    size_t len = 0;
    unsigned long long t;
    int c, off = 0;
    if (cddp_store_get(s, keys[i], &v, &len, 0) != CDDP_OK) continue;
    char *text = realloc(v, len + 1);
    if (!text) { free(v); continue; }
    text[len] = '\0';
    if (sscanf(text, "%llu %d %n", &t, &c, &off) == 2 && off > 0 && t > 0 && t < best) { /* 0: none */
      best = t, found = 1, *code = c;
      snprintf(line, size, "%s", text + off);
    }
    free(text);
  }
exit:
  free(keys);
  free(kp);
  return found;
}

cddp_result_t cddp__rdzv_open_next(cddp_store_t *s, int round, int restart_count) {
  char key[64], val[32], want[32];
  K(key, "rdzv/%d/open", round + 1);
  int len = K(val, "%d", restart_count);
  CDDP_CHECK(cddp_store_set(s, key, val, (size_t)len));
  int wlen = K(want, "%d", round + 1);
  for (int tries = 0; tries < 100; tries++) { /* rdzv/round = max(rdzv/round, round + 1) */
    void *cur = NULL, *now = NULL;
    size_t clen = 0, nlen;
    cddp_result_t r = cddp_store_get(s, "rdzv/round", &cur, &clen, 0);
    if (r != CDDP_OK && r != CDDP_TIMEOUT && r != CDDP_NOT_FOUND) return r;
    if (r == CDDP_OK && parse_int(cur, -1) >= round + 1) {
      free(cur);
      return CDDP_OK;
    }
    r = cddp_store_compare_set(s, "rdzv/round", r == CDDP_OK ? cur : NULL, r == CDDP_OK ? clen : 0, want, (size_t)wlen,
                               &now, &nlen);
    free(cur);
    int64_t v = parse_int(now, -1);
    free(now);
    CDDP_CHECK(r);
    if (v >= round + 1) return CDDP_OK;
  }
  return cddp__fail(CDDP_INTERNAL, "rendezvous: could not advance rdzv/round to %d", round + 1);
}

cddp_result_t cddp__rdzv_node_done(cddp_store_t *s, const cddp__rdzv_t *r) {
  char key[64];
  int64_t n;
  K(key, "rdzv/%d/ndone", r->round);
  CDDP_CHECK(cddp_store_add(s, key, 1, &n));
  if (n == r->nnodes) return cddp__rdzv_post(s, r->round, "done", NULL);
  return CDDP_OK;
}

cddp_result_t cddp__rdzv_exit(cddp_store_t *s, const cddp__rdzv_t *r, int wait, int timeout_ms) {
  char key[64], all[64];
  int64_t n;
  K(key, "rdzv/%d/nexit", r->round);
  K(all, "rdzv/%d/allexit", r->round);
  CDDP_CHECK(cddp_store_add(s, key, 1, &n));
  if (n >= r->nnodes) CDDP_CHECK(cddp_store_set(s, all, "1", 1));
  if (!wait || r->nnodes <= 1) return CDDP_OK;
  const char *k = all;
  return cddp_store_wait(s, &k, 1, timeout_ms);
}
