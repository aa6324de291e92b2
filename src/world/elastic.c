/* elastic.c - the generation protocol of in-place replacement: bump, wait, and a store view that
 * abandons a communicator's bootstrap as soon as a later generation exists. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/check.h"
#include "common/clock.h"
#include "common/knobs.h"
#include "common/log.h"
#include "world/elastic.h"
#include "store/store_internal.h"

#define SLICE_MS 50 /* how often a blocked bootstrap looks for a later generation */

#define KEY(kind, a) cddp__job_key(CDDP__JK_##kind, a, 0).s

/* elastic/gen/<gen>: set once generation gen is announced */
static cddp__jobkey_t announce_key(int64_t gen) { return cddp__job_key(CDDP__JK_GEN_ANNOUNCE, gen, 0); }

int cddp__members_world(const cddp__members_t *m) {
  int w = 0;
  for (int i = 0; i < m->n; i++) w += m->m[i].nproc;
  return w;
}

int cddp__members_find(const cddp__members_t *m, int agent_id, int *rank_base, int *world) {
  int base = 0, at = -1;
  for (int i = 0; i < m->n; i++) {
    if (m->m[i].id == agent_id && at < 0) at = i;
    if (at < 0) base += m->m[i].nproc;
  }
  if (rank_base) *rank_base = at < 0 ? -1 : base;
  if (world) *world = cddp__members_world(m);
  return at;
}

int cddp__members_next(const cddp__members_t *cur, cddp__members_t *next, void *ctx) {
  cddp__change_t *c = ctx;
  c->what[0] = c->refused[0] = '\0';
  c->added = c->proposed_stop = c->proposed_wait = c->ended_wait = 0, c->refused_id = -1;
  if (cddp__members_find(cur, c->self, NULL, NULL) < 0) return 1; /* not ours to change */
  if (c->expired) { /* the wait is over: nobody (enough) came */
    if (cur->wait_ms <= 0) return 1; /* nodes came in time (or no wait): nothing to stop */
    memset(next, 0, sizeof *next);
    next->stop = 1, c->proposed_stop = 1;
    snprintf(next->line, sizeof next->line, "job stopped: %d of at least %d nodes left after losing %.200s; no node "
             "joined within %.1f s (--rdzv-timeout)", cur->n, c->min_nodes, cur->line, cur->wait_ms / 1e3);
    snprintf(c->what, sizeof c->what, "stop: no node joined within %.1f s", cur->wait_ms / 1e3);
    return 0;
  }
  int at = c->lost >= 0 ? cddp__members_find(cur, c->lost, NULL, NULL) : -1;
  memset(next, 0, sizeof *next);
  for (int i = 0; i < cur->n; i++)
    if (i != at) next->m[next->n++] = cur->m[i];
  size_t o = 0;
  if (at >= 0)
    o = (size_t)snprintf(c->what, sizeof c->what, "node %s (agent %d, %s)", cur->m[at].host, c->lost, c->why);
  for (int k = 0; k < c->ncand && next->n < CDDP__MAX_MEMBERS; k++) {
    const cddp__member_t *p = &c->cand[k];
    if (cddp__members_find(next, p->id, NULL, NULL) >= 0 || p->id == c->lost) continue;
    if (next->n >= c->max_nodes) {
      if (c->refused_id < 0)
        c->refused_id = p->id, snprintf(c->refused, sizeof c->refused, "the job has its --nnodes maximum of %d nodes",
                                        c->max_nodes);
      continue;
    }
    int w = cddp__members_world(next) + p->nproc;
    if (!cddp__job_worlds_allow(c->worlds, w)) {
      if (c->refused_id < 0)
        c->refused_id = p->id, snprintf(c->refused, sizeof c->refused, "a world of %d ranks cannot split the global "
                                        "batch (world sizes that work: %s)", w, c->worlds);
      continue;
    }
    next->m[next->n++] = *p;
    if (o < sizeof c->what)
      o += (size_t)snprintf(c->what + o, sizeof c->what - o, "%s%s node %s (agent %d)",
                            at >= 0 ? (c->added ? "," : "; spare") : (c->added ? "," : "join"), "", p->host, p->id);
    c->added++;
  }
  if (at >= 0 && c->added && o < sizeof c->what)
    snprintf(c->what + o, sizeof c->what - o, " takes its place");
  if (at < 0 && !c->added) return 1;
  if (next->n < c->min_nodes && at < 0) { /* waiting below MIN: too few pending yet */
    c->refused_id = -1;
    return 1;
  }
  if (next->n < c->min_nodes && c->wait_ms > 0) { /* wait for pending nodes (none took the place) */
    if (c->added) { /* too few: they stay pending */
      next->n = 0;
      for (int i = 0; i < cur->n; i++)
        if (i != at) next->m[next->n++] = cur->m[i];
      c->added = 0;
    }
    next->wait_ms = c->wait_ms, c->proposed_wait = 1;
    snprintf(next->line, sizeof next->line, "%s (agent %d, %s)", cur->m[at].host, c->lost, c->why);
    snprintf(c->what, sizeof c->what, "node %s (agent %d, %s); below MIN, waiting up to %.1f s for a node to join",
             cur->m[at].host, c->lost, c->why, c->wait_ms / 1e3);
  } else if (next->n < c->min_nodes) {
    memset(next, 0, sizeof *next);
    next->stop = 1, c->proposed_stop = 1;
    snprintf(next->line, sizeof next->line, "job stopped: %d of at least %d nodes left after losing %s (agent %d, %s)",
             cur->n - 1, c->min_nodes, cur->m[at].host, c->lost, c->why);
  } else if (cur->wait_ms > 0 && at < 0) { /* the wait ends: the lost node's loss, then the joiners */
    c->ended_wait = 1;
    char joined[400];
    const char *who = NULL;
    cddp__job_what_is_join(c->what, strlen(c->what), &who);
    snprintf(joined, sizeof joined, "%s", who ? who : c->what);
    snprintf(c->what, sizeof c->what, "node %.200s; %.170s joined in time", cur->line, joined);
  }
  return 0;
}

cddp_result_t cddp__members_read(cddp_store_t *s, int64_t gen, cddp__members_t *out) {
  cddp__jobkey_t k = cddp__job_key(CDDP__JK_GEN_MEMBERS, gen, 0);
  const char *key = k.s;
  void *v = NULL;
  size_t len = 0;
  cddp_result_t r = cddp_store_get(s, key, &v, &len, 0);
  if (r == CDDP_TIMEOUT) return cddp__fail(CDDP_NOT_FOUND, "no member record %s", key);
  CDDP_CHECK(r);
  int bad = cddp__members_parse(v, len, out);
  free(v);
  if (bad) return cddp__fail(CDDP_REMOTE, "member record %s is malformed", key);
  return CDDP_OK;
}

cddp_result_t cddp__members_write(cddp_store_t *s, int64_t gen, const cddp__members_t *m) {
  static __thread char buf[CDDP__MAX_MEMBERS * 96 + 512];
  size_t len = cddp__members_format(m, buf, sizeof buf);
  if (!len) return cddp__fail(CDDP_INTERNAL, "member record of generation %lld too long", (long long)gen);
  void *cur = NULL;
  size_t cl = 0;
  cddp_result_t r = cddp_store_compare_set(s, KEY(GEN_MEMBERS, gen), NULL, 0, buf, len, &cur, &cl);
  free(cur);
  return r;
}

cddp_result_t cddp__gen_latest(cddp_store_t *s, int64_t *gen) {
  CDDP_CHECK(cddp_store_add(s, KEY(GEN, 0), 0, gen));
  /* the announcement precedes the counter's bump: count the ones already announced */
  for (;;) {
    cddp__jobkey_t key = announce_key(*gen + 1);
    const char *k = key.s;
    cddp_result_t r = cddp_store_wait(s, &k, 1, 0);
    if (r == CDDP_TIMEOUT) break;
    CDDP_CHECK(r);
    ++*gen;
  }
  cddp__clear_error();
  return CDDP_OK;
}

#define CLAIM_WAIT_MS 10000 /* a claimer that never announces: give up after this */

cddp_result_t cddp__gen_change(cddp_store_t *s, const char *what, int self_id,
                               int (*edit)(const cddp__members_t *cur, cddp__members_t *next, void *ctx),
                               void *ctx, int64_t *gen) {
  cddp__members_t *cur = malloc(sizeof *cur), *next = malloc(sizeof *next);
  cddp_result_t r = CDDP_OK;
  *gen = 0;
  if (!cur || !next) {
    r = cddp__fail(CDDP_SYSTEM, "out of memory");
    goto out;
  }
  for (;;) {
    int64_t g;
    CDDP_CHECK_GOTO(cddp__gen_latest(s, &g), r, out);
    r = cddp__members_read(s, g, cur);
    int have = r == CDDP_OK;
    if (r != CDDP_OK && r != CDDP_NOT_FOUND) goto out;
    cddp__clear_error();
    r = CDDP_OK;
    if (have && cur->stop) { /* the job is stopping: no more changes */
      r = cddp__fail(CDDP_ABORTED, "%s", cur->line);
      goto out;
    }
    if (edit) {
      if (!have) {
        r = cddp__fail(CDDP_NOT_FOUND, "generation %lld has no member record to change", (long long)g);
        goto out;
      }
      if (edit(cur, next, ctx)) goto out; /* nothing to do any more */
    } else {
      *next = *cur;
    }
    char me[160];
    size_t ml = cddp__job_claim_format(self_id, what, me, sizeof me); /* unique: what names a pid or node */
    void *won = NULL;
    size_t wl = 0;
    CDDP_CHECK_GOTO(cddp_store_compare_set(s, KEY(GEN_CLAIM, g + 1), NULL, 0, me, ml, &won, &wl), r, out);
    int mine = wl == ml && !memcmp(won, me, wl);
    free(won);
    if (!mine) { /* another agent makes generation g+1: build on it */
      r = cddp__gen_wait_past(s, g, CLAIM_WAIT_MS);
      if (r != CDDP_OK) goto out;
      continue;
    }
    if (have || edit) CDDP_CHECK_GOTO(cddp__members_write(s, g + 1, next), r, out);
    CDDP_CHECK_GOTO(cddp_store_set(s, announce_key(g + 1).s, what, strlen(what)), r, out);
    int64_t counter;
    CDDP_CHECK_GOTO(cddp_store_add(s, KEY(GEN, 0), 1, &counter), r, out);
    *gen = g + 1;
    break;
  }
out:
  free(cur), free(next);
  return r;
}

cddp_result_t cddp__gen_bump(cddp_store_t *s, const char *what, int64_t *gen) {
  return cddp__gen_change(s, what, -1, NULL, NULL, gen);
}

size_t cddp__gen_what(cddp_store_t *s, int64_t g, char *buf, size_t size, int *is_join) {
  void *v = NULL;
  size_t len = 0;
  *is_join = 0;
  if (size) buf[0] = '\0';
  if (cddp_store_get(s, announce_key(g).s, &v, &len, 0) != CDDP_OK) {
    cddp__clear_error();
    return 0;
  }
  *is_join = cddp__job_what_is_join(v, len, NULL);
  int n = snprintf(buf, size, "%.*s", (int)len, (char *)v);
  free(v);
  return n < 0 ? 0 : CDDP_MIN((size_t)n, size ? size - 1 : 0);
}

cddp_result_t cddp__job_worlds_publish(cddp_store_t *s, const int *sizes, int n) {
  char buf[1024];
  size_t len = cddp__job_worlds_format(sizes, n, buf, sizeof buf);
  return len ? cddp_store_set(s, KEY(WORLDS, 0), buf, len) : CDDP_OK;
}

cddp_result_t cddp__job_stop(cddp_store_t *s, const char *line) {
  return cddp_store_set(s, KEY(STOP, 0), line, strlen(line));
}

cddp_result_t cddp__gen_wait_past(cddp_store_t *s, int64_t gen, int timeout_ms) {
  cddp__jobkey_t key = announce_key(gen + 1);
  const char *k = key.s;
  cddp_result_t r = cddp_store_wait(s, &k, 1, timeout_ms);
  if (r == CDDP_TIMEOUT)
    return cddp__fail(CDDP_TIMEOUT, "no generation after %lld was announced within %.1f s (%s absent)", (long long)gen,
                      timeout_ms / 1e3, key.s);
  return r;
}

typedef struct gen_view {
  cddp_store_t base;
  cddp_store_t *outer, *inner; /* the job's view; "elastic/g<G>/" over it */
  int64_t gen;
  uint64_t deadline;
  int armed;
  cddp__jobkey_t next_key; /* elastic/gen/<G+1> */
} gen_view_t;

#define V(s) ((gen_view_t *)(s))

/* OK while this generation is current; ABORTED once a later one exists; TIMEOUT at deadline. */
static cddp_result_t fence(gen_view_t *v) {
  const char *k = v->next_key.s;
  cddp_result_t r = cddp_store_wait(v->outer, &k, 1, 0);
  if (r == CDDP_OK)
    return cddp__fail(CDDP_ABORTED, "generation %lld was announced while generation %lld formed", (long long)v->gen + 1,
                      (long long)v->gen);
  if (r != CDDP_TIMEOUT) return r;
  cddp__jobkey_t ck = cddp__job_key(CDDP__JK_COMPLETE, 0, 0);
  k = ck.s;
  if (cddp_store_wait(v->outer, &k, 1, 0) == CDDP_OK)
    return cddp__fail(CDDP_ABORTED, "the job finished while generation %lld formed", (long long)v->gen);
  cddp__clear_error();
  if (cddp__now_ns() >= v->deadline)
    return cddp__fail(CDDP_TIMEOUT, "generation %lld did not form in time (a rank never joined)", (long long)v->gen);
  return CDDP_OK;
}

static cddp_result_t g_get(cddp_store_t *s, const char *key, void **val, size_t *len, int t) {
  gen_view_t *v = V(s);
  if (!v->armed) return cddp_store_get(v->inner, key, val, len, t);
  uint64_t end = cddp__deadline_ms(t);
  for (;;) {
    int slice = CDDP_MIN(cddp__ms_left(end), SLICE_MS);
    cddp_result_t r = cddp_store_get(v->inner, key, val, len, slice);
    if (r != CDDP_TIMEOUT || cddp__ms_left(end) == 0) return r;
    CDDP_CHECK(fence(v));
  }
}

static cddp_result_t g_wait(cddp_store_t *s, const char *const *keys, size_t n, int t) {
  gen_view_t *v = V(s);
  if (!v->armed) return cddp_store_wait(v->inner, keys, n, t);
  uint64_t end = cddp__deadline_ms(t);
  for (;;) {
    int slice = CDDP_MIN(cddp__ms_left(end), SLICE_MS);
    cddp_result_t r = cddp_store_wait(v->inner, keys, n, slice);
    if (r != CDDP_TIMEOUT || cddp__ms_left(end) == 0) return r;
    CDDP_CHECK(fence(v));
  }
}

static cddp_result_t g_set(cddp_store_t *s, const char *k, const void *val, size_t len) {
  return cddp_store_set(V(s)->inner, k, val, len);
}
static cddp_result_t g_add(cddp_store_t *s, const char *k, int64_t d, int64_t *res) {
  return cddp_store_add(V(s)->inner, k, d, res);
}
static cddp_result_t g_cas(cddp_store_t *s, const char *k, const void *e, size_t el, const void *d, size_t dl,
                           void **cur, size_t *cl) {
  return cddp_store_compare_set(V(s)->inner, k, e, el, d, dl, cur, cl);
}
static cddp_result_t g_del(cddp_store_t *s, const char *k, int *existed) {
  return cddp_store_delete(V(s)->inner, k, existed);
}
static cddp_result_t g_num_keys(cddp_store_t *s, int64_t *n) { return cddp_store_num_keys(V(s)->inner, n); }
static void g_set_timeout(cddp_store_t *s, int t) { cddp_store_set_timeout(V(s)->inner, t); }
static void g_close(cddp_store_t *s) {
  cddp_store_close(V(s)->inner);
  free(s);
}

static cddp_result_t g_fence(cddp_store_t *s) { return V(s)->armed ? fence(V(s)) : CDDP_OK; }

static const cddp_store_ops_t gen_ops = {
    .name = "generation", .set = g_set, .get = g_get, .add = g_add, .compare_set = g_cas,
    .wait = g_wait, .del = g_del, .num_keys = g_num_keys, .set_timeout = g_set_timeout,
    .close = g_close, .fence = g_fence,
};

cddp_result_t cddp__gen_view(cddp_store_t **out, cddp_store_t *s, int64_t gen, uint64_t deadline) {
  *out = NULL;
  gen_view_t *v = calloc(1, sizeof *v);
  if (!v) return cddp__fail(CDDP_SYSTEM, "generation view: out of memory");
  cddp_result_t r = cddp_store_prefix_create(&v->inner, s, cddp__job_key(CDDP__JK_GEN_COMM, gen, 0).s, 0);
  if (r != CDDP_OK) {
    free(v);
    return r;
  }
  cddp__store_init(&v->base, &gen_ops);
  v->base.timeout_ms = s->timeout_ms;
  v->outer = s, v->gen = gen, v->deadline = deadline, v->armed = 1;
  v->next_key = cddp__job_key(CDDP__JK_GEN_ANNOUNCE, gen + 1, 0);
  *out = &v->base;
  return CDDP_OK;
}

void cddp__gen_view_disarm(cddp_store_t *view) {
  if (view) V(view)->armed = 0;
}

/* The place of this worker in generation g by its member record: OK, or NOT_FOUND with
 * place->gone set (dropped or stopped); no record: the given rank and world stand. *wait_ms > 0:
 * the record waits below MIN (this generation never forms; the next one decides). */
static cddp_result_t find_place(cddp_store_t *s, int64_t g, cddp__gen_place_t *p, int *rank, int *world,
                                int *wait_ms) {
  *wait_ms = 0;
  if (!p || p->agent_id < 0) return CDDP_OK;
  cddp__members_t *m = malloc(sizeof *m);
  if (!m) return cddp__fail(CDDP_SYSTEM, "out of memory");
  cddp_result_t r = cddp__members_read(s, g, m);
  if (r == CDDP_NOT_FOUND) {
    cddp__clear_error();
    free(m);
    return CDDP_OK;
  }
  if (r == CDDP_OK && m->stop) {
    p->gone = 2;
    r = cddp__fail(CDDP_NOT_FOUND, "%s", m->line);
  } else if (r == CDDP_OK) {
    int base, w;
    *wait_ms = m->wait_ms;
    if (cddp__members_find(m, p->agent_id, &base, &w) < 0) {
      p->gone = 1;
      r = cddp__fail(CDDP_NOT_FOUND, "dropped from the job: generation %lld goes on without agent %d (its node was "
                     "declared lost)", (long long)g, p->agent_id);
    } else {
      *rank = base + p->local_rank, *world = w;
    }
  }
  free(m);
  return r;
}

/* Waits for the generation after the wait generation g in slices, giving up (ABORTED) when
 * the agents end the round meanwhile (a signal: "fail ..." in rdzv/<round>/event). */
static cddp_result_t wait_below_min(cddp_store_t *s, int64_t g, int round, int timeout_ms) {
  uint64_t end = cddp__deadline_ms(timeout_ms);
  cddp__jobkey_t ev = cddp__job_key(CDDP__JK_RDZV_EVENT, round, 0);
  for (;;) {
    cddp_result_t r = cddp__gen_wait_past(s, g, CDDP_MIN(cddp__ms_left(end), 250));
    if (r != CDDP_TIMEOUT || cddp__ms_left(end) == 0) return r;
    void *v = NULL;
    size_t len = 0;
    if (cddp_store_get(s, ev.s, &v, &len, 0) == CDDP_OK) {
      r = cddp__fail(CDDP_ABORTED, "the job ended while it waited below MIN: %.*s", (int)CDDP_MIN(len, 300), (char *)v);
      free(v);
      return r;
    }
    cddp__clear_error();
  }
}

cddp_result_t cddp__gen_form(cddp_store_t *s, int rank, int world, int round, const cddp_comm_config_t *cfg,
                             int64_t min_gen, uint64_t deadline, cddp__gen_place_t *place, cddp_comm_t **comm,
                             cddp_store_t **view, int64_t *gen) {
  *comm = NULL, *view = NULL;
  for (;;) {
    int64_t g;
    CDDP_CHECK(cddp__gen_latest(s, &g));
    if (g < min_gen) g = min_gen;
    int rk = rank, wd = world;
    int wait_ms;
    CDDP_CHECK(find_place(s, g, place, &rk, &wd, &wait_ms));
    if (wait_ms > 0) { /* below MIN: wait for the generation that takes nodes in, or stops */
      int recover_ms = (int)cddp__knob_int(CDDP_KNOB_RECOVER_TIMEOUT_MS);
      CDDP_INFO(CDDP_SUB_ENV, "rank %d: generation %lld waits below MIN for up to %.1f s", rk, (long long)g,
                wait_ms / 1e3);
      cddp_result_t r = wait_below_min(s, g, round, wait_ms + recover_ms);
      if (r == CDDP_ABORTED) return r;
      if (r != CDDP_OK)
        return cddp__fail(r, "the job waited below MIN in generation %lld and nothing followed within %.1f s "
                          "(--rdzv-timeout + CDDP_RECOVER_TIMEOUT_MS): its agents are gone", (long long)g,
                          (wait_ms + recover_ms) / 1e3);
      deadline = CDDP_MAX(deadline, cddp__deadline_ms(recover_ms)); /* the wait does not eat the forming time */
      min_gen = g + 1;
      continue;
    }
    cddp_store_t *v;
    CDDP_CHECK(cddp__gen_view(&v, s, g, deadline));
    cddp_comm_t *c = NULL;
    cddp_result_t r = cddp_comm_init(&c, v, rk, wd, round, cfg);
    if (r == CDDP_OK) {
      cddp__gen_view_disarm(v);
      *comm = c, *view = v, *gen = g;
      if (place) place->rank = rk, place->world = wd;
      CDDP_INFO(CDDP_SUB_ENV, "rank %d of %d: communicator of generation %lld formed", rk, wd, (long long)g);
      return CDDP_OK;
    }
    char why[512];
    snprintf(why, sizeof why, "%s", cddp_last_error());
    cddp_store_close(v);
    cddp__jobkey_t complete = cddp__job_key(CDDP__JK_COMPLETE, 0, 0);
    const char *ck = complete.s;
    if (place && cddp_store_wait(s, &ck, 1, 0) == CDDP_OK) {
      place->gone = 3;
      return cddp__fail(CDDP_NOT_FOUND, "the job finished before generation %lld formed: nothing left to train",
                        (long long)g);
    }
    int64_t now = g;
    /* a peer died while this generation formed (a replacement meeting a worker killed just now,
     * before its agent announced the next generation): wait for that announcement */
    if ((r == CDDP_REMOTE || r == CDDP_ABORTED || r == CDDP_TIMEOUT) && cddp__ms_left(deadline) > 0)
      (void)cddp__gen_wait_past(s, g, CDDP_MIN(cddp__ms_left(deadline), (int)cddp__knob_int(CDDP_KNOB_RECOVER_TIMEOUT_MS)));
    if (cddp__gen_latest(s, &now) == CDDP_OK && now > g && cddp__ms_left(deadline) > 0) {
      CDDP_INFO(CDDP_SUB_ENV, "rank %d: generation %lld abandoned for %lld: %s", rk, (long long)g, (long long)now, why);
      continue;
    }
    return cddp__fail(r, "communicator of generation %lld: %s", (long long)g, why);
  }
}
