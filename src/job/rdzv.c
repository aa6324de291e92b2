/* rdzv.c - round-based rendezvous: join order by add(), closing by compare_set, rounds by restart. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/check.h"
#include "common/clock.h"
#include "common/log.h"
#include "job/rdzv.h"
#include "job/elastic.h"
#include "store/store_internal.h"

#define KEY(kind, a, b) cddp__job_key(CDDP__JK_##kind, a, b).s

/* The node's record in its slot; taken (not NULL): only into an empty slot, *taken = 1 when
 * another record was there first. */
static cddp_result_t publish(cddp_store_t *s, int round, int slot, const cddp__rdzv_cfg_t *cfg, int *taken) {
  char val[256];
  cddp__job_node_rec_t rec = {.node = cfg->self, .min_nodes = cfg->min_nodes, .max_nodes = cfg->max_nodes};
  size_t len = cddp__job_node_format(&rec, val, sizeof val);
  if (!taken) return cddp_store_set(s, KEY(RDZV_NODE, round, slot), val, len);
  void *cur = NULL;
  size_t cl = 0;
  CDDP_CHECK(cddp_store_compare_set(s, KEY(RDZV_NODE, round, slot), NULL, 0, val, len, &cur, &cl));
  *taken = !(cl == len && !memcmp(cur, val, len));
  free(cur);
  return CDDP_OK;
}

/* compare_set from absent: the value of a key unless one is there */
static cddp_result_t put_absent(cddp_store_t *s, const char *key, const char *val, size_t len) {
  void *was = NULL;
  size_t wl = 0;
  cddp_result_t r = cddp_store_compare_set(s, key, NULL, 0, val, len, &was, &wl);
  free(was);
  return r;
}

/* compare_set from absent to the mismatch word (a node that disagrees wakes the waiting ones) */
static void set_mismatch(cddp_store_t *s, const char *key) {
  char val[32];
  cddp__job_closed_t m = {.mismatch = 1};
  (void)put_absent(s, key, val, cddp__job_closed_format(&m, val, sizeof val));
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
  if (cddp_store_get(s, KEY(RDZV_MISMATCH, 0, 0), &v, &len, 5000) != CDDP_OK)
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
  cddp__job_closed_t c;
  int bad = cddp__job_closed_parse(v, len, &c);
  free(v);
  if (!bad && c.mismatch) return mismatch_here(s);
  *out = bad ? -1 : c.nnodes;
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
  cddp__job_settings_t me = {.min_nodes = cfg->min_nodes, .max_nodes = cfg->max_nodes}, first;
  snprintf(me.host, sizeof me.host, "%s", cfg->self.host);
  size_t n = cddp__job_settings_format(&me, mine, sizeof mine);
  CDDP_CHECK(cddp_store_compare_set(s, KEY(RDZV_SETTINGS, 0, 0), NULL, 0, mine, n, &cur, &len));
  int bad = cddp__job_settings_parse(cur, len, &first);
  free(cur);
  int lo = first.min_nodes, hi = first.max_nodes;
  if (bad || (lo == cfg->min_nodes && hi == cfg->max_nodes)) return CDDP_OK;
  cddp_result_t r = disagree(first.host, lo, hi, cfg->self.host, cfg->min_nodes, cfg->max_nodes);
  char line[512];
  snprintf(line, sizeof line, "%s", cddp_last_error());
  /* static: the first node waits for records 0..its MAX-1 */
  cddp__rdzv_mismatch(s, round, cfg->node_rank >= 0 ? hi : 0, line);
  cddp__fail(r, "%s", line);
  return r;
}

void cddp__rdzv_mismatch(cddp_store_t *s, int round, int node_records, const char *line) {
  void *was = NULL;
  size_t wlen;
  (void)cddp_store_compare_set(s, KEY(RDZV_MISMATCH, 0, 0), NULL, 0, line, strlen(line), &was, &wlen);
  free(was);
  set_mismatch(s, KEY(RDZV_CLOSED, round, 0));
  for (int i = 0; i < node_records; i++) set_mismatch(s, KEY(RDZV_NODE, round, i)); /* the missing ones */
  set_mismatch(s, KEY(RDZV_MEMBERS, round, 0));
}

/* Node record i (text) into out->nodes[i], checked against this node's --nnodes. */
static cddp_result_t take(cddp_store_t *s, const cddp__rdzv_cfg_t *cfg, int round, int i, const void *v, size_t len,
                          cddp__rdzv_t *out) {
  cddp__job_node_rec_t rec = {.min_nodes = cfg->min_nodes, .max_nodes = cfg->max_nodes};
  int bad = cddp__job_node_parse(v, len, &rec);
  if (!bad && rec.mismatch) return mismatch_here(s); /* a node that disagrees filled the slot */
  if (bad) return cddp__fail(CDDP_REMOTE, "rendezvous round %d: node record %s is malformed", round, KEY(RDZV_NODE, round, i));
  if (rec.min_nodes != cfg->min_nodes || rec.max_nodes != cfg->max_nodes)
    return disagree(rec.node.host, rec.min_nodes, rec.max_nodes, cfg->self.host, cfg->min_nodes, cfg->max_nodes);
  out->nodes[i] = rec.node;
  if (i < out->node_rank) out->rank_base += rec.node.nproc;
  out->world_size += rec.node.nproc;
  return CDDP_OK;
}

/* Waits for node records 0..n-1 of round, then reads them into out->nodes: n requests, so one
 * node of the round does it (assemble) and the others read the list it leaves. */
static cddp_result_t gather(cddp_store_t *s, const cddp__rdzv_cfg_t *cfg, int round, int n, uint64_t deadline,
                            int timeout_ms, cddp__rdzv_t *out) {
  cddp_result_t ret = CDDP_OK;
  cddp__jobkey_t *keys = calloc((size_t)n, sizeof *keys);
  const char **kp = calloc((size_t)n, sizeof *kp);
  out->nodes = calloc((size_t)n, sizeof *out->nodes);
  if (!keys || !kp || !out->nodes) {
    ret = cddp__fail(CDDP_SYSTEM, "out of memory in rendezvous");
    goto done;
  }
  for (int i = 0; i < n; i++) {
    keys[i] = cddp__job_key(CDDP__JK_RDZV_NODE, round, i);
    kp[i] = keys[i].s;
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
  for (int i = 0; i < n && ret == CDDP_OK; i++) {
    void *v = NULL;
    size_t len;
    CDDP_CHECK_GOTO(cddp_store_get(s, keys[i].s, &v, &len, 0), ret, done);
    ret = take(s, cfg, round, i, v, len, out);
    free(v);
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

/* The longest member list of n nodes: a record a line. */
static size_t members_max(int n) { return (size_t)n * 256 + 1; }

/* rdzv/<R>/members from n node records: one a line, in node order, deflated when long (every
 * node reads it once: N copies of N records at the store); NULL when out of memory. */
static char *members_format(const cddp__rdzv_cfg_t *cfg, const cddp__rdzv_node_t *nodes, int n, size_t *len) {
  size_t cap = members_max(n), at = 0;
  char *buf = malloc(cap);
  for (int i = 0; buf && i < n; i++) {
    cddp__job_node_rec_t rec = {.node = nodes[i], .min_nodes = cfg->min_nodes, .max_nodes = cfg->max_nodes};
    at += cddp__job_node_format(&rec, buf + at, cap - at - 1);
    buf[at++] = '\n';
  }
  *len = at;
  if (buf && cddp__job_list_pack(&buf, len) != 0) free(buf), buf = NULL;
  return buf;
}

/* The node that closed the round reads the records and leaves them as one list for the others,
 * or the line it failed with ("error <line>"), so that they do not wait out their deadline. */
static cddp_result_t assemble(cddp_store_t *s, const cddp__rdzv_cfg_t *cfg, int round, int n, uint64_t deadline,
                              cddp__rdzv_t *out) {
  cddp_result_t r = gather(s, cfg, round, n, deadline, cfg->timeout_ms, out);
  size_t len = 0;
  char *list = r == CDDP_OK ? members_format(cfg, out->nodes, n, &len) : NULL, err[600];
  if (r != CDDP_OK) len = (size_t)snprintf(err, sizeof err, "error %.580s", cddp_last_error());
  char line[600];
  snprintf(line, sizeof line, "%s", cddp_last_error());
  if (r == CDDP_OK && !list) r = cddp__fail(CDDP_SYSTEM, "out of memory in rendezvous");
  else if (put_absent(s, KEY(RDZV_MEMBERS, round, 0), list ? list : err, len) != CDDP_OK && r == CDDP_OK)
    r = CDDP_REMOTE, snprintf(line, sizeof line, "%s", cddp_last_error());
  free(list);
  if (r != CDDP_OK) {
    cddp__rdzv_release(out);
    return cddp__fail(r, "%s", line);
  }
  return CDDP_OK;
}

/* The other nodes: the list the closing node left (one request, the member list sent once). Past
 * the deadline, the records themselves say which node is missing. */
static cddp_result_t read_members(cddp_store_t *s, const cddp__rdzv_cfg_t *cfg, int round, int n, uint64_t deadline,
                                  cddp__rdzv_t *out) {
  void *v = NULL;
  size_t len = 0;
  cddp_result_t r = cddp_store_get(s, KEY(RDZV_MEMBERS, round, 0), &v, &len, cddp__ms_left(deadline));
  if (r == CDDP_TIMEOUT) return gather(s, cfg, round, n, deadline, cfg->timeout_ms, out);
  CDDP_CHECK(r);
  char *text = NULL;
  if (cddp__job_list_unpack(v, len, members_max(n), &text, &len) != 0) {
    free(v);
    return cddp__fail(CDDP_REMOTE, "rendezvous round %d: the member list is malformed (a bad deflated list)", round);
  }
  if (text) free(v), v = text;
  const char *p = v, *end = p + len;
  cddp__job_node_rec_t word;
  if (cddp__job_node_parse(p, len, &word) == 0 && word.mismatch) r = mismatch_here(s);
  else if (len > 6 && !memcmp(p, "error ", 6)) r = cddp__fail(CDDP_REMOTE, "%.*s", (int)CDDP_MIN(len - 6, 580), p + 6);
  else if (!(out->nodes = calloc((size_t)n, sizeof *out->nodes))) r = cddp__fail(CDDP_SYSTEM, "out of memory in rendezvous");
  out->world_size = 0;
  for (int i = 0; i < n && r == CDDP_OK; i++) {
    const char *nl = p < end ? memchr(p, '\n', (size_t)(end - p)) : NULL;
    if (!nl) r = cddp__fail(CDDP_REMOTE, "rendezvous round %d: the member list holds %d of %d nodes", round, i, n);
    else r = take(s, cfg, round, i, p, (size_t)(nl - p), out), p = nl + 1;
  }
  free(v);
  out->nnodes = n;
  if (r != CDDP_OK) cddp__rdzv_release(out);
  return r;
}

/* Closes round at n nodes unless someone already did; returns the node count that won. */
static cddp_result_t close_round(cddp_store_t *s, int round, int n, int *closed_n, int *closed_here) {
  char val[32];
  void *cur = NULL;
  size_t len;
  cddp__job_closed_t mine = {.nnodes = n}, won;
  size_t vlen = cddp__job_closed_format(&mine, val, sizeof val);
  CDDP_CHECK(cddp_store_compare_set(s, KEY(RDZV_CLOSED, round, 0), NULL, 0, val, vlen, &cur, &len));
  *closed_n = cddp__job_closed_parse(cur, len, &won) || won.mismatch ? -1 : won.nnodes;
  *closed_here = len == vlen && !memcmp(cur, val, len);
  free(cur);
  return CDDP_OK;
}

/* The round closed without this node: its nodes (n of them; c10d, n < 0: as it closed), then
 * this one appended. */
static cddp_result_t join_late(cddp_store_t *s, const cddp__rdzv_cfg_t *cfg, int round, int64_t n, uint64_t deadline,
                               cddp__rdzv_t *out) {
  cddp_result_t r = n >= 0 ? CDDP_OK : get_closed(s, KEY(RDZV_CLOSED, round, 0), cddp__ms_left(deadline), &n);
  if (r == CDDP_TIMEOUT)
    return cddp__fail(CDDP_TIMEOUT, "rendezvous round %d did not close within %.1f s", round, cfg->timeout_ms / 1e3);
  CDDP_CHECK(r);
  out->node_rank = 0, out->rank_base = 0;
  CDDP_CHECK(read_members(s, cfg, round, (int)n, deadline, out));
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

/* Generation R ended the job with round R - 1: out says how (that round's event) and the
 * failure's line says it for a node no round took in. */
static cddp_result_t job_ended(cddp_store_t *s, int round, cddp__rdzv_t *out) {
  void *v = NULL;
  size_t len = 0;
  cddp__job_event_t *ev = calloc(1, sizeof *ev);
  if (!ev) return cddp__fail(CDDP_SYSTEM, "out of memory in rendezvous");
  int known = cddp_store_get(s, KEY(RDZV_EVENT, round - 1, 0), &v, &len, 0) == CDDP_OK &&
              !cddp__job_event_parse(v, len, ev) && ev->kind != CDDP__EV_RESTART;
  free(v);
  cddp__clear_error();
  out->ended = 1;
  out->end_code = !known ? 1 : ev->kind == CDDP__EV_DONE ? 0 : ev->code > 0 && ev->code < 256 ? ev->code : 1;
  const char *line = known && ev->kind == CDDP__EV_FAIL ? ev->line : "";
  if (!strncmp(line, "cddp run: ", 10)) line += 10;
  cddp_result_t r;
  if (known && ev->kind == CDDP__EV_DONE)
    r = cddp__fail(CDDP_ABORTED, "the job finished without this node: it came after round %d closed, and no round "
                   "opened after it", round - 1);
  else
    r = cddp__fail(CDDP_ABORTED, "the job ended without this node (it came after round %d closed)%s%.600s", round - 1,
                   line[0] ? ": " : "", line);
  free(ev);
  return r;
}

/* Round R > 0 opens with restart generation R: waits for its announcement. */
static cddp_result_t wait_open(cddp_store_t *s, int round, uint64_t deadline, int timeout_ms, cddp__rdzv_t *out) {
  cddp_result_t r = cddp__gen_wait_past(s, round - 1, cddp__ms_left(deadline));
  cddp__job_announce_t a;
  int what = r == CDDP_OK && cddp__gen_what(s, round, &a);
  if (what && a.kind == CDDP__GEN_END) return job_ended(s, round, out);
  if (r == CDDP_OK && (!what || a.kind != CDDP__GEN_RESTART))
    r = CDDP_TIMEOUT; /* a generation of replace mode: no round ever opens */
  if (r == CDDP_TIMEOUT)
    return cddp__fail(CDDP_TIMEOUT, "rendezvous: round %d did not open within %.1f s (the job runs without this "
                      "node; it would join at the next restart)", round, timeout_ms / 1e3);
  return r;
}

cddp_result_t cddp__rdzv_join(cddp_store_t *s, const cddp__rdzv_cfg_t *cfg, int min_round, cddp__rdzv_t *out) {
  uint64_t deadline = cddp__deadline_ms(cfg->timeout_ms);
  int64_t cur;
  int round = min_round;
  cddp__jobkey_t key;
  memset(out, 0, sizeof *out);
  CDDP_CHECK(cddp__gen_gathering(s, &cur));
  if (cur > round) round = (int)cur;
  for (;;) {
    if (round > 0) CDDP_CHECK(wait_open(s, round, deadline, cfg->timeout_ms, out));
    out->round = round;
    out->restart_count = round; /* every generation a round gathers after 0 is a restart */
    if (cfg->node_rank >= 0) { /* static: ranks are given */
      int n = cfg->static_nodes > 0 ? cfg->static_nodes : cfg->max_nodes, taken = 0;
      out->node_rank = cfg->node_rank;
      CDDP_CHECK(check_settings(s, cfg, round));
      CDDP_CHECK(publish(s, round, cfg->node_rank, cfg, cfg->late_ok ? &taken : NULL));
      if (taken) return join_late(s, cfg, round, n, deadline, out); /* its node was here before */
      if (cfg->node_rank == 0) return assemble(s, cfg, round, n, deadline, out);
      return read_members(s, cfg, round, n, deadline, out);
    }
    int64_t slot1;
    CDDP_CHECK(cddp_store_add(s, KEY(RDZV_JOINED, round, 0), 1, &slot1));
    int slot = (int)slot1 - 1, n = -1;
    if (slot >= cfg->max_nodes && cfg->late_ok) return join_late(s, cfg, round, -1, deadline, out);
    if (slot >= cfg->max_nodes) { /* full: wait for the next round */
      round++;
      continue;
    }
    CDDP_CHECK(check_settings(s, cfg, round));
    CDDP_CHECK(publish(s, round, slot, cfg, NULL));
    key = cddp__job_key(CDDP__JK_RDZV_CLOSED, round, 0);
    const char *ck = key.s;
    if (slot + 1 == cfg->max_nodes) {
      CDDP_CHECK(close_round(s, round, cfg->max_nodes, &n, &out->closed_here));
    } else if (slot + 1 >= cfg->min_nodes) {
      int wait_ms = CDDP_MIN(cfg->last_call_ms, cddp__ms_left(deadline));
      cddp_result_t r = cddp_store_wait(s, &ck, 1, wait_ms);
      if (r == CDDP_TIMEOUT) {
        int64_t joined;
        CDDP_CHECK(cddp_store_add(s, KEY(RDZV_JOINED, round, 0), 0, &joined));
        CDDP_CHECK(close_round(s, round, (int)CDDP_MIN(joined, cfg->max_nodes), &n, &out->closed_here));
      } else {
        CDDP_CHECK(r);
      }
    }
    if (n < 0) {
      int64_t closed;
      cddp_result_t r = get_closed(s, key.s, cddp__ms_left(deadline), &closed);
      if (r == CDDP_TIMEOUT) {
        int64_t joined = 0;
        cddp_store_add(s, KEY(RDZV_JOINED, round, 0), 0, &joined);
        return cddp__fail(CDDP_TIMEOUT, "rendezvous round %d: %d of at least %d nodes joined within %.1f s", round,
                          (int)joined, cfg->min_nodes, cfg->timeout_ms / 1e3);
      }
      CDDP_CHECK(r);
      n = (int)closed;
    }
    if (slot >= n && cfg->late_ok) {
      out->closed_here = 0;
      return join_late(s, cfg, round, -1, deadline, out);
    }
    if (slot >= n) { /* joined after the close: next round */
      CDDP_INFO(CDDP_SUB_RDZV, "round %d closed with %d nodes before this node joined: it waits for round %d, "
                "which opens on the job's next restart", round, n, round + 1);
      out->closed_here = 0;
      round++;
      continue;
    }
    out->node_rank = slot;
    if (out->closed_here) return assemble(s, cfg, round, n, deadline, out);
    return read_members(s, cfg, round, n, deadline, out);
  }
}

cddp_result_t cddp__rdzv_restore(cddp_store_t *s, const cddp__rdzv_cfg_t *cfg, const cddp__rdzv_t *r) {
  char val[256];
  size_t len;
  int n = r->late ? r->nnodes - 1 : r->nnodes; /* a late node's own entry was never a record */
  cddp__job_settings_t set = {.min_nodes = cfg->min_nodes, .max_nodes = cfg->max_nodes};
  snprintf(set.host, sizeof set.host, "%s", n > 0 ? r->nodes[0].host : cfg->self.host);
  len = cddp__job_settings_format(&set, val, sizeof val);
  CDDP_CHECK(put_absent(s, KEY(RDZV_SETTINGS, 0, 0), val, len));
  for (int i = 0; i < n; i++) {
    cddp__job_node_rec_t rec = {.node = r->nodes[i], .min_nodes = cfg->min_nodes, .max_nodes = cfg->max_nodes};
    len = cddp__job_node_format(&rec, val, sizeof val);
    CDDP_CHECK(put_absent(s, KEY(RDZV_NODE, r->round, i), val, len));
  }
  char *list = members_format(cfg, r->nodes, n, &len);
  cddp_result_t put = list ? put_absent(s, KEY(RDZV_MEMBERS, r->round, 0), list, len)
                           : cddp__fail(CDDP_SYSTEM, "out of memory restoring the rendezvous");
  free(list);
  CDDP_CHECK(put);
  int64_t joined;
  CDDP_CHECK(cddp_store_add(s, KEY(RDZV_JOINED, r->round, 0), 0, &joined));
  if (joined < n) CDDP_CHECK(cddp_store_add(s, KEY(RDZV_JOINED, r->round, 0), n - joined, &joined));
  cddp__job_closed_t c = {.nnodes = n};
  len = cddp__job_closed_format(&c, val, sizeof val);
  return put_absent(s, KEY(RDZV_CLOSED, r->round, 0), val, len);
}

void cddp__rdzv_release(cddp__rdzv_t *r) {
  free(r->nodes);
  r->nodes = NULL;
}

cddp_result_t cddp__rdzv_post(cddp_store_t *s, int round, const cddp__job_event_t *ev, cddp__job_event_t *now) {
  char val[700];
  void *cur = NULL;
  size_t len, vlen = cddp__job_event_format(ev, val, sizeof val);
  CDDP_CHECK(cddp_store_compare_set(s, KEY(RDZV_EVENT, round, 0), NULL, 0, val, vlen, &cur, &len));
  if (now && cddp__job_event_parse(cur, len, now)) *now = *ev;
  free(cur);
  return CDDP_OK;
}

cddp_result_t cddp__rdzv_failure_post(cddp_store_t *s, int round, int node_rank, uint64_t wall_ns, int code,
                                      const char *line) {
  char val[700];
  cddp__job_failure_t f = {.wall_ns = wall_ns, .code = code};
  snprintf(f.line, sizeof f.line, "%.599s", line);
  size_t len = cddp__job_failure_format(&f, val, sizeof val);
  return cddp_store_set(s, KEY(RDZV_FAILURE, round, node_rank), val, len);
}

int cddp__rdzv_failure_first(cddp_store_t *s, int round, int nnodes, int wait_ms, int *code, char *line, size_t size) {
  cddp__jobkey_t *keys = calloc((size_t)nnodes, sizeof *keys);
  const char **kp = calloc((size_t)nnodes, sizeof *kp);
  cddp__job_failure_t *f = malloc(sizeof *f);
  unsigned long long best = ~0ull;
  int found = 0;
  if (!keys || !kp || !f) goto exit;
  for (int i = 0; i < nnodes; i++) keys[i] = cddp__job_key(CDDP__JK_RDZV_FAILURE, round, i), kp[i] = keys[i].s;
  (void)cddp_store_wait(s, kp, nnodes, wait_ms); /* early when every node posted; a timeout is expected */
  for (int i = 0; i < nnodes; i++) {
    void *v = NULL;
    size_t len = 0;
    if (cddp_store_get(s, kp[i], &v, &len, 0) != CDDP_OK) continue;
    int bad = cddp__job_failure_parse(v, len, f);
    free(v);
    if (!bad && f->wall_ns > 0 && f->wall_ns < best) { /* 0: none */
      best = f->wall_ns, found = 1, *code = f->code;
      snprintf(line, size, "%s", f->line);
    }
  }
exit:
  free(keys);
  free(kp);
  free(f);
  return found;
}

cddp_result_t cddp__rdzv_will(cddp_store_t *view, const char *run_id, int round, const cddp__job_event_t *ev) {
  char val[700];
  size_t vlen = cddp__job_event_format(ev, val, sizeof val);
  cddp__jobkey_t key = cddp__job_key_in(run_id, CDDP__JK_RDZV_EVENT, round);
  return cddp__store_tcp_will(cddp__store_prefix_inner(view), key.s, val, vlen);
}

cddp_result_t cddp__rdzv_node_done(cddp_store_t *s, const cddp__rdzv_t *r) {
  int64_t n;
  CDDP_CHECK(cddp_store_add(s, KEY(RDZV_NDONE, r->round, 0), 1, &n));
  cddp__job_event_t done = {.kind = CDDP__EV_DONE};
  if (n == r->nnodes) return cddp__rdzv_post(s, r->round, &done, NULL);
  return CDDP_OK;
}

cddp_result_t cddp__rdzv_exit(cddp_store_t *s, const cddp__rdzv_t *r, int wait, int timeout_ms) {
  int64_t n;
  cddp__jobkey_t all = cddp__job_key(CDDP__JK_RDZV_ALLEXIT, r->round, 0);
  CDDP_CHECK(cddp_store_add(s, KEY(RDZV_NEXIT, r->round, 0), 1, &n));
  if (n >= r->nnodes) CDDP_CHECK(cddp_store_set(s, all.s, CDDP__JOB_FLAG, CDDP__JOB_FLAG_LEN));
  if (!wait || r->nnodes <= 1) return CDDP_OK;
  const char *k = all.s;
  return cddp_store_wait(s, &k, 1, timeout_ms);
}
