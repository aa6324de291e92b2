/* store_mem.c - the in-process store: a kv table under a mutex; get/wait sleep on a condvar. */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/check.h"
#include "common/clock.h"
#include "store/store_internal.h"

typedef struct mem_store {
  cddp_store_t base;
  pthread_mutex_t mu;
  pthread_cond_t cv; /* broadcast whenever a key is created */
  cddp__kv_t kv;
} mem_store_t;

#define M(s) ((mem_store_t *)(s))

/* Sleeps on the condvar until deadline (CLOCK_MONOTONIC ns). Returns 0 when woken. */
static int sleep_until(mem_store_t *m, uint64_t deadline) {
  struct timespec ts = {.tv_sec = (time_t)(deadline / 1000000000ull),
                        .tv_nsec = (long)(deadline % 1000000000ull)};
  return pthread_cond_timedwait(&m->cv, &m->mu, &ts) == ETIMEDOUT;
}

static void created_key(mem_store_t *m, int created) {
  if (created) pthread_cond_broadcast(&m->cv);
}

static cddp_result_t m_set(cddp_store_t *s, const char *key, const void *val, size_t len) {
  int created = 0;
  pthread_mutex_lock(&M(s)->mu);
  cddp_result_t r = cddp__kv_set(&M(s)->kv, key, strlen(key), val, len, &created);
  created_key(M(s), created);
  pthread_mutex_unlock(&M(s)->mu);
  return r;
}

static cddp_result_t m_get(cddp_store_t *s, const char *key, void **val, size_t *len, int t) {
  uint64_t deadline = cddp__deadline_ms(t);
  size_t kl = strlen(key);
  cddp_result_t r = CDDP_OK;
  pthread_mutex_lock(&M(s)->mu);
  cddp__kv_entry_t *e;
  while (!(e = cddp__kv_find(&M(s)->kv, key, kl))) {
    if (cddp__now_ns() >= deadline || sleep_until(M(s), deadline)) {
      if ((e = cddp__kv_find(&M(s)->kv, key, kl))) break;
      r = cddp__fail(CDDP_TIMEOUT, "store get: key %s absent after %d ms", key, t);
      break;
    }
  }
  if (e) {
    if (!(*val = cddp__memdup_nul(e->val, e->vlen)))
      r = cddp__fail(CDDP_SYSTEM, "store get %s: out of memory", key);
    else
      *len = e->vlen;
  }
  pthread_mutex_unlock(&M(s)->mu);
  return r;
}

static cddp_result_t m_add(cddp_store_t *s, const char *key, int64_t d, int64_t *res) {
  int created = 0;
  pthread_mutex_lock(&M(s)->mu);
  cddp_result_t r = cddp__kv_add(&M(s)->kv, key, strlen(key), d, res, &created);
  created_key(M(s), created);
  pthread_mutex_unlock(&M(s)->mu);
  return r;
}

static cddp_result_t m_cas(cddp_store_t *s, const char *key, const void *e, size_t el,
                           const void *d, size_t dl, void **cur, size_t *cl) {
  int created = 0;
  cddp__kv_entry_t *c = NULL;
  pthread_mutex_lock(&M(s)->mu);
  cddp_result_t r =
      cddp__kv_compare_set(&M(s)->kv, key, strlen(key), e, el, e != NULL, d, dl, &c, &created);
  created_key(M(s), created);
  if (r == CDDP_OK && c) {
    if (!(*cur = cddp__memdup_nul(c->val, c->vlen)))
      r = cddp__fail(CDDP_SYSTEM, "store compare_set %s: out of memory", key);
    else
      *cl = c->vlen;
  }
  pthread_mutex_unlock(&M(s)->mu);
  return r;
}

static cddp_result_t m_wait(cddp_store_t *s, const char *const *keys, size_t n, int t) {
  uint64_t deadline = cddp__deadline_ms(t);
  cddp_result_t r = CDDP_OK;
  pthread_mutex_lock(&M(s)->mu);
  for (size_t i = 0; i < n; i++) {
    size_t kl = strlen(keys[i]);
    while (!cddp__kv_find(&M(s)->kv, keys[i], kl)) {
      if (cddp__now_ns() >= deadline || sleep_until(M(s), deadline)) {
        if (cddp__kv_find(&M(s)->kv, keys[i], kl)) break;
        r = cddp__fail(CDDP_TIMEOUT, "store wait: key %s absent after %d ms", keys[i], t);
        goto out;
      }
    }
  }
out:
  pthread_mutex_unlock(&M(s)->mu);
  return r;
}

static cddp_result_t m_del(cddp_store_t *s, const char *key, int *existed) {
  pthread_mutex_lock(&M(s)->mu);
  *existed = cddp__kv_del(&M(s)->kv, key, strlen(key));
  pthread_mutex_unlock(&M(s)->mu);
  return CDDP_OK;
}

static cddp_result_t m_num_keys(cddp_store_t *s, int64_t *n) {
  pthread_mutex_lock(&M(s)->mu);
  *n = (int64_t)M(s)->kv.n;
  pthread_mutex_unlock(&M(s)->mu);
  return CDDP_OK;
}

static void m_close(cddp_store_t *s) {
  cddp__kv_free(&M(s)->kv);
  pthread_cond_destroy(&M(s)->cv);
  pthread_mutex_destroy(&M(s)->mu);
  free(s);
}

static const cddp_store_ops_t mem_ops = {
    .name = "mem", .set = m_set, .get = m_get, .add = m_add, .compare_set = m_cas,
    .wait = m_wait, .del = m_del, .num_keys = m_num_keys, .close = m_close,
};

cddp_result_t cddp_store_mem_create(cddp_store_t **out) {
  if (!out) return cddp__fail(CDDP_INVALID_ARG, "store mem: NULL output");
  mem_store_t *m = calloc(1, sizeof *m);
  if (!m) return cddp__fail(CDDP_SYSTEM, "store mem: out of memory");
  cddp__store_init(&m->base, &mem_ops);
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&m->cv, &ca);
  pthread_condattr_destroy(&ca);
  pthread_mutex_init(&m->mu, NULL);
  cddp__kv_init(&m->kv);
  *out = &m->base;
  return CDDP_OK;
}
