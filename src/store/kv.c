/* kv.c - the chained hash table behind the mem, file and server stores (one semantics for all). */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/check.h"
#include "store/store_internal.h"

void *cddp__memdup_nul(const void *p, size_t len) {
  uint8_t *d = malloc(len + 1);
  if (!d) return NULL;
  if (len) memcpy(d, p, len);
  d[len] = 0;
  return d;
}

static uint64_t hash_bytes(const char *p, size_t n) { /* FNV-1a */
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; i++) h = (h ^ (uint8_t)p[i]) * 1099511628211ull;
  return h;
}

uint64_t cddp__kv_hash(const char *key, size_t klen) { return hash_bytes(key, klen); }

void cddp__kv_init(cddp__kv_t *kv) { memset(kv, 0, sizeof *kv); }

void cddp__kv_free(cddp__kv_t *kv) {
  for (size_t b = 0; b < kv->nbuckets; b++) {
    cddp__kv_entry_t *e = kv->buckets[b];
    while (e) {
      cddp__kv_entry_t *next = e->next;
      free(e->val);
      free(e);
      e = next;
    }
  }
  free(kv->buckets);
  memset(kv, 0, sizeof *kv);
}

cddp__kv_entry_t *cddp__kv_find(const cddp__kv_t *kv, const char *key, size_t klen) {
  if (!kv->nbuckets) return NULL;
  uint64_t h = hash_bytes(key, klen);
  for (cddp__kv_entry_t *e = kv->buckets[h & (kv->nbuckets - 1)]; e; e = e->next)
    if (e->hash == h && e->klen == klen && !memcmp(e->key, key, klen)) return e;
  return NULL;
}

static int grow(cddp__kv_t *kv) {
  size_t nb = kv->nbuckets ? kv->nbuckets * 2 : 64;
  cddp__kv_entry_t **b = calloc(nb, sizeof *b);
  if (!b) return -1;
  for (size_t i = 0; i < kv->nbuckets; i++) {
    cddp__kv_entry_t *e = kv->buckets[i];
    while (e) {
      cddp__kv_entry_t *next = e->next;
      e->next = b[e->hash & (nb - 1)];
      b[e->hash & (nb - 1)] = e;
      e = next;
    }
  }
  free(kv->buckets);
  kv->buckets = b;
  kv->nbuckets = nb;
  return 0;
}

/* Finds or inserts key (with an empty value). NULL on OOM. */
static cddp__kv_entry_t *find_or_insert(cddp__kv_t *kv, const char *key, size_t klen, int *created) {
  cddp__kv_entry_t *e = cddp__kv_find(kv, key, klen);
  if (created) *created = 0;
  if (e) return e;
  if (kv->n >= kv->nbuckets && grow(kv) != 0) return NULL;
  e = malloc(sizeof *e + klen + 1);
  uint8_t *v = cddp__memdup_nul("", 0);
  if (!e || !v) {
    free(e);
    free(v);
    return NULL;
  }
  e->hash = hash_bytes(key, klen);
  e->klen = (uint32_t)klen;
  memcpy(e->key, key, klen);
  e->key[klen] = 0;
  e->val = v;
  e->vlen = 0;
  e->next = kv->buckets[e->hash & (kv->nbuckets - 1)];
  kv->buckets[e->hash & (kv->nbuckets - 1)] = e;
  kv->n++;
  if (created) *created = 1;
  return e;
}

static cddp_result_t put(cddp__kv_entry_t *e, const void *val, size_t vlen) {
  uint8_t *v = cddp__memdup_nul(val, vlen);
  if (!v) return cddp__fail(CDDP_SYSTEM, "store: out of memory for a %zu-byte value", vlen);
  free(e->val);
  e->val = v;
  e->vlen = vlen;
  return CDDP_OK;
}

cddp_result_t cddp__kv_set(cddp__kv_t *kv, const char *key, size_t klen, const void *val,
                           size_t vlen, int *created) {
  cddp__kv_entry_t *e = find_or_insert(kv, key, klen, created);
  if (!e) return cddp__fail(CDDP_SYSTEM, "store: out of memory for key %.*s", (int)klen, key);
  return put(e, val, vlen);
}

cddp_result_t cddp__kv_add(cddp__kv_t *kv, const char *key, size_t klen, int64_t delta,
                           int64_t *result, int *created) {
  cddp__kv_entry_t *e = cddp__kv_find(kv, key, klen);
  int64_t cur = 0, sum;
  if (e) {
    char *end;
    errno = 0;
    long long x = strtoll((const char *)e->val, &end, 10);
    if (errno || e->vlen == 0 || end != (const char *)e->val + e->vlen)
      return cddp__fail(CDDP_INVALID_ARG, "store add: value of key %.*s is not an integer",
                        (int)klen, key);
    cur = x;
  }
  if (__builtin_add_overflow(cur, delta, &sum))
    return cddp__fail(CDDP_INVALID_ARG, "store add: key %.*s overflows int64", (int)klen, key);
  char text[32];
  int n = snprintf(text, sizeof text, "%" PRId64, sum);
  if (!e) e = find_or_insert(kv, key, klen, created);
  else if (created) *created = 0;
  if (!e) return cddp__fail(CDDP_SYSTEM, "store: out of memory for key %.*s", (int)klen, key);
  CDDP_CHECK(put(e, text, (size_t)n));
  if (result) *result = sum;
  return CDDP_OK;
}

cddp_result_t cddp__kv_compare_set(cddp__kv_t *kv, const char *key, size_t klen,
                                   const void *expected, size_t elen, int has_expected,
                                   const void *desired, size_t dlen, cddp__kv_entry_t **cur,
                                   int *created) {
  cddp__kv_entry_t *e = cddp__kv_find(kv, key, klen);
  int match = e ? (has_expected && e->vlen == elen && (elen == 0 || !memcmp(e->val, expected, elen)))
                : !has_expected;
  if (created) *created = 0;
  if (match) {
    if (!e) e = find_or_insert(kv, key, klen, created);
    if (!e) return cddp__fail(CDDP_SYSTEM, "store: out of memory for key %.*s", (int)klen, key);
    CDDP_CHECK(put(e, desired, dlen));
  }
  *cur = e;
  return CDDP_OK;
}

int cddp__kv_del(cddp__kv_t *kv, const char *key, size_t klen) {
  if (!kv->nbuckets) return 0;
  uint64_t h = hash_bytes(key, klen);
  for (cddp__kv_entry_t **pp = &kv->buckets[h & (kv->nbuckets - 1)]; *pp; pp = &(*pp)->next) {
    cddp__kv_entry_t *e = *pp;
    if (e->hash == h && e->klen == klen && !memcmp(e->key, key, klen)) {
      *pp = e->next;
      free(e->val);
      free(e);
      kv->n--;
      return 1;
    }
  }
  return 0;
}

int cddp__kv_each(const cddp__kv_t *kv, int (*fn)(const cddp__kv_entry_t *, void *), void *arg) {
  for (size_t b = 0; b < kv->nbuckets; b++)
    for (cddp__kv_entry_t *e = kv->buckets[b]; e; e = e->next) {
      int r = fn(e, arg);
      if (r) return r;
    }
  return 0;
}
