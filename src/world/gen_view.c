/* gen_view.c - the store view a generation's communicator is built on: its blocking calls give
 * up (ABORTED) as soon as a later generation is announced or the job finished. */
#include <stdlib.h>

#include "common/check.h"
#include "common/clock.h"
#include "job/elastic.h"
#include "store/store_internal.h"

#define SLICE_MS 50 /* how often a blocked bootstrap looks for a later generation */

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
static cddp_result_t check_current(gen_view_t *v) {
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
    CDDP_CHECK(check_current(v));
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
    CDDP_CHECK(check_current(v));
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

/* the store's fence (store_internal.h): may a loop waiting on something else go on? */
static cddp_result_t g_fence(cddp_store_t *s) { return V(s)->armed ? check_current(V(s)) : CDDP_OK; }

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
