/* elastic.c - the generation protocol of in-place replacement: bump, wait, and a store view that
 * abandons a communicator's bootstrap as soon as a later generation exists. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/check.h"
#include "common/clock.h"
#include "common/log.h"
#include "run/elastic.h"
#include "store/store_internal.h"

#define SLICE_MS 50 /* how often a blocked bootstrap looks for a later generation */

cddp_result_t cddp__gen_bump(cddp_store_t *s, const char *what, int64_t *gen) {
  char key[64];
  CDDP_CHECK(cddp_store_add(s, "elastic/gen", 1, gen));
  snprintf(key, sizeof key, "elastic/gen/%lld", (long long)*gen);
  return cddp_store_set(s, key, what, strlen(what));
}

cddp_result_t cddp__gen_latest(cddp_store_t *s, int64_t *gen) { return cddp_store_add(s, "elastic/gen", 0, gen); }

static void announce_key(int64_t gen, char *buf, size_t size) {
  snprintf(buf, size, "elastic/gen/%lld", (long long)gen);
}

cddp_result_t cddp__gen_wait_past(cddp_store_t *s, int64_t gen, int timeout_ms) {
  char key[64];
  announce_key(gen + 1, key, sizeof key);
  const char *k = key;
  cddp_result_t r = cddp_store_wait(s, &k, 1, timeout_ms);
  if (r == CDDP_TIMEOUT)
    return cddp__fail(CDDP_TIMEOUT, "no generation after %lld was announced within %.1f s (%s absent)", (long long)gen,
                      timeout_ms / 1e3, key);
  return r;
}

typedef struct gen_view {
  cddp_store_t base;
  cddp_store_t *outer, *inner; /* the job's view; "elastic/g<G>/" over it */
  int64_t gen;
  uint64_t deadline;
  int armed;
  char next_key[64]; /* elastic/gen/<G+1> */
} gen_view_t;

#define V(s) ((gen_view_t *)(s))

/* OK while this generation is current; ABORTED once a later one exists; TIMEOUT at deadline. */
static cddp_result_t fence(gen_view_t *v) {
  const char *k = v->next_key;
  cddp_result_t r = cddp_store_wait(v->outer, &k, 1, 0);
  if (r == CDDP_OK)
    return cddp__fail(CDDP_ABORTED, "generation %lld was announced while generation %lld formed", (long long)v->gen + 1,
                      (long long)v->gen);
  if (r != CDDP_TIMEOUT) return r;
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

static const cddp_store_ops_t gen_ops = {
    .name = "generation", .set = g_set, .get = g_get, .add = g_add, .compare_set = g_cas,
    .wait = g_wait, .del = g_del, .num_keys = g_num_keys, .set_timeout = g_set_timeout,
    .close = g_close,
};

cddp_result_t cddp__gen_view(cddp_store_t **out, cddp_store_t *s, int64_t gen, uint64_t deadline) {
  *out = NULL;
  gen_view_t *v = calloc(1, sizeof *v);
  if (!v) return cddp__fail(CDDP_SYSTEM, "generation view: out of memory");
  char prefix[64];
  snprintf(prefix, sizeof prefix, "elastic/g%lld/", (long long)gen);
  cddp_result_t r = cddp_store_prefix_create(&v->inner, s, prefix, 0);
  if (r != CDDP_OK) {
    free(v);
    return r;
  }
  cddp__store_init(&v->base, &gen_ops);
  v->base.timeout_ms = s->timeout_ms;
  v->outer = s, v->gen = gen, v->deadline = deadline, v->armed = 1;
  announce_key(gen + 1, v->next_key, sizeof v->next_key);
  *out = &v->base;
  return CDDP_OK;
}

void cddp__gen_view_disarm(cddp_store_t *view) {
  if (view) V(view)->armed = 0;
}

cddp_result_t cddp__gen_form(cddp_store_t *s, int rank, int world, int round, const cddp_comm_config_t *cfg,
                             int64_t min_gen, uint64_t deadline, cddp_comm_t **comm, cddp_store_t **view, int64_t *gen) {
  *comm = NULL, *view = NULL;
  for (;;) {
    int64_t g;
    CDDP_CHECK(cddp__gen_latest(s, &g));
    if (g < min_gen) g = min_gen;
    cddp_store_t *v;
    CDDP_CHECK(cddp__gen_view(&v, s, g, deadline));
    cddp_comm_t *c = NULL;
    cddp_result_t r = cddp_comm_init(&c, v, rank, world, round, cfg);
    if (r == CDDP_OK) {
      cddp__gen_view_disarm(v);
      *comm = c, *view = v, *gen = g;
      CDDP_INFO(CDDP_SUB_ENV, "rank %d: communicator of generation %lld formed", rank, (long long)g);
      return CDDP_OK;
    }
    char why[512];
    snprintf(why, sizeof why, "%s", cddp_last_error());
    cddp_store_close(v);
    int64_t now = g;
    if (cddp__gen_latest(s, &now) == CDDP_OK && now > g && cddp__ms_left(deadline) > 0) {
      CDDP_INFO(CDDP_SUB_ENV, "rank %d: generation %lld abandoned for %lld: %s", rank, (long long)g, (long long)now, why);
      continue;
    }
    return cddp__fail(r, "communicator of generation %lld: %s", (long long)g, why);
  }
}
