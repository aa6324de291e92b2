/* store_prefix.c - a view of a store that prefixes every key (per job, per round). */
#include <stdlib.h>
#include <string.h>

#include "common/check.h"
#include "store/store_internal.h"

typedef struct prefix_store {
  cddp_store_t base;
  cddp_store_t *inner;
  char *prefix;
  size_t plen;
  int own_base;
} prefix_store_t;

#define P(s) ((prefix_store_t *)(s))

/* prefix + key, malloc'd; the inner store checks the combined length. */
static char *join(cddp_store_t *s, const char *key) {
  size_t kl = strlen(key);
  char *k = malloc(P(s)->plen + kl + 1);
  if (!k) return NULL;
  memcpy(k, P(s)->prefix, P(s)->plen);
  memcpy(k + P(s)->plen, key, kl + 1);
  return k;
}

#define JOIN_OR_FAIL(k, s, key)                                                          \
  char *k = join(s, key);                                                                \
  if (!k) return cddp__fail(CDDP_SYSTEM, "store prefix %s: out of memory", P(s)->prefix)

static cddp_result_t p_set(cddp_store_t *s, const char *key, const void *val, size_t len) {
  JOIN_OR_FAIL(k, s, key);
  cddp_result_t r = cddp_store_set(P(s)->inner, k, val, len);
  free(k);
  return r;
}

static cddp_result_t p_get(cddp_store_t *s, const char *key, void **val, size_t *len, int t) {
  JOIN_OR_FAIL(k, s, key);
  cddp_result_t r = cddp_store_get(P(s)->inner, k, val, len, t);
  free(k);
  return r;
}

static cddp_result_t p_add(cddp_store_t *s, const char *key, int64_t d, int64_t *res) {
  JOIN_OR_FAIL(k, s, key);
  cddp_result_t r = cddp_store_add(P(s)->inner, k, d, res);
  free(k);
  return r;
}

static cddp_result_t p_cas(cddp_store_t *s, const char *key, const void *e, size_t el,
                           const void *d, size_t dl, void **cur, size_t *cl) {
  JOIN_OR_FAIL(k, s, key);
  cddp_result_t r = cddp_store_compare_set(P(s)->inner, k, e, el, d, dl, cur, cl);
  free(k);
  return r;
}

static cddp_result_t p_wait(cddp_store_t *s, const char *const *keys, size_t n, int t) {
  char **ks = calloc(n, sizeof *ks);
  cddp_result_t r = CDDP_OK;
  if (!ks) return cddp__fail(CDDP_SYSTEM, "store prefix %s: out of memory", P(s)->prefix);
  for (size_t i = 0; i < n && r == CDDP_OK; i++)
    if (!(ks[i] = join(s, keys[i])))
      r = cddp__fail(CDDP_SYSTEM, "store prefix %s: out of memory", P(s)->prefix);
  if (r == CDDP_OK) r = cddp_store_wait(P(s)->inner, (const char *const *)ks, n, t);
  for (size_t i = 0; i < n; i++) free(ks[i]);
  free(ks);
  return r;
}

static cddp_result_t p_del(cddp_store_t *s, const char *key, int *existed) {
  JOIN_OR_FAIL(k, s, key);
  cddp_result_t r = cddp_store_delete(P(s)->inner, k, existed);
  free(k);
  return r;
}

static cddp_result_t p_num_keys(cddp_store_t *s, int64_t *n) {
  return cddp_store_num_keys(P(s)->inner, n);
}

/* The bound applies to the connection underneath, so it is forwarded. */
static void p_set_timeout(cddp_store_t *s, int t) { cddp_store_set_timeout(P(s)->inner, t); }

static void p_close(cddp_store_t *s) {
  if (P(s)->own_base) cddp_store_close(P(s)->inner);
  free(P(s)->prefix);
  free(s);
}

static cddp_result_t p_fence(cddp_store_t *s) { return cddp__store_fence(P(s)->inner); }

static const cddp_store_ops_t prefix_ops;

cddp_store_t *cddp__store_prefix_inner(cddp_store_t *s) {
  return s && s->ops == &prefix_ops ? P(s)->inner : s;
}

static const cddp_store_ops_t prefix_ops = {
    .name = "prefix", .set = p_set, .get = p_get, .add = p_add, .compare_set = p_cas,
    .wait = p_wait, .del = p_del, .num_keys = p_num_keys, .set_timeout = p_set_timeout,
    .close = p_close, .fence = p_fence,
};

cddp_result_t cddp_store_prefix_create(cddp_store_t **out, cddp_store_t *base, const char *prefix,
                                       int own_base) {
  if (!out || !base || !prefix)
    return cddp__fail(CDDP_INVALID_ARG, "store prefix: NULL argument");
  *out = NULL;
  size_t pl = strlen(prefix);
  if (pl >= CDDP_STORE_MAX_KEY)
    return cddp__fail(CDDP_INVALID_ARG, "store prefix %.40s...: longer than %d bytes", prefix,
                      CDDP_STORE_MAX_KEY - 1);
  prefix_store_t *p = calloc(1, sizeof *p);
  if (!p || !(p->prefix = strdup(prefix))) {
    free(p);
    return cddp__fail(CDDP_SYSTEM, "store prefix %s: out of memory", prefix);
  }
  cddp__store_init(&p->base, &prefix_ops);
  p->base.timeout_ms = base->timeout_ms;
  p->inner = base;
  p->plen = pl;
  p->own_base = own_base;
  *out = &p->base;
  return CDDP_OK;
}
