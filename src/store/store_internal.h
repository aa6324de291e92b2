/* store_internal.h - the store vtable every implementation fills, and the shared key-value table. */
#ifndef CDDP_STORE_INTERNAL_H
#define CDDP_STORE_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "cddp/store.h"

/* Most keys one wait() may name (bounds the WAIT frame on the wire). */
#define CDDP__STORE_MAX_WAIT_KEYS 4096

/* One table of functions per implementation (mem, file, tcp, prefix). The public
 * cddp_store_* functions validate arguments (key length, value size, NULLs) before
 * calling these, so implementations may assume well-formed input. Keys arrive
 * NUL-terminated. timeout_ms is >= 0 here (the public layer maps < 0 to the store's
 * default bound). Members that may block: get, wait (up to timeout_ms) and, for tcp,
 * every member (bounded by the store's call timeout). */
typedef struct cddp_store_ops {
  const char *name;
  cddp_result_t (*set)(cddp_store_t *s, const char *key, const void *val, size_t len);
  cddp_result_t (*get)(cddp_store_t *s, const char *key, void **val, size_t *len, int timeout_ms);
  cddp_result_t (*add)(cddp_store_t *s, const char *key, int64_t delta, int64_t *result);
  /* expected == NULL: "key absent". *current NULL (len 0) when the key is absent after. */
  cddp_result_t (*compare_set)(cddp_store_t *s, const char *key, const void *expected,
                               size_t expected_len, const void *desired, size_t desired_len,
                               void **current, size_t *current_len);
  /* On TIMEOUT, records a detail naming the first missing key. */
  cddp_result_t (*wait)(cddp_store_t *s, const char *const *keys, size_t nkeys, int timeout_ms);
  cddp_result_t (*del)(cddp_store_t *s, const char *key, int *existed);
  cddp_result_t (*num_keys)(cddp_store_t *s, int64_t *n);
  /* Optional (NULL: the base field is enough). */
  void (*set_timeout)(cddp_store_t *s, int timeout_ms);
  void (*close)(cddp_store_t *s);
  /* Optional: OK while what this view stands for is current (a generation being formed);
   * an error once it is not, for waits that are not store calls (sockets being accepted). */
  cddp_result_t (*fence)(cddp_store_t *s);
} cddp_store_ops_t;

/* Every implementation embeds this as its first member. */
struct cddp_store {
  const cddp_store_ops_t *ops;
  int timeout_ms; /* default bound on a call (CDDP_STORE_TIMEOUT_MS unless overridden) */
};

/* ops->fence where the store has one, else OK: a loop that waits on something other than
 * the store calls this now and then, as the store's own waits do. */
cddp_result_t cddp__store_fence(cddp_store_t *s);

/* Fills the common header: ops, and timeout from CDDP_STORE_TIMEOUT_MS. */
void cddp__store_init(cddp_store_t *s, const cddp_store_ops_t *ops);

/* Test and benchmark hooks on a TCP client: a WAIT split into sending the request and
 * collecting its answer, so one thread can park many connections. Make no other call on
 * s between the two. */
cddp_result_t cddp__store_tcp_wait_begin(cddp_store_t *s, const char *const *keys, size_t n,
                                         int timeout_ms);
cddp_result_t cddp__store_tcp_wait_end(cddp_store_t *s, const char *const *keys, size_t n,
                                       int timeout_ms);

/* The connection's will (MQTT's "last will"): when this TCP client's connection ends without
 * a goodbye (the process died, the host reset it), the server sets key = val. Closing the
 * client with cddp_store_close says goodbye and drops the will. A later call replaces it.
 * The key is the server's full key (no prefix view applies). INVALID_ARG on a store that is
 * not a TCP client. */
cddp_result_t cddp__store_tcp_will(cddp_store_t *s, const char *key, const void *val, size_t len);
/* A client of this one server, whatever peers list it publishes: it neither follows a list to
 * another server nor fails over (the store's failover talks to each standby itself). */
cddp_result_t cddp__store_tcp_connect_here(cddp_store_t **out, const char *host, int port, const char *token,
                                           int timeout_ms);
/* The store under a prefix view (a will goes on the connection itself); s for any other. */
cddp_store_t *cddp__store_prefix_inner(cddp_store_t *s);
/* Test hook: frees the client without a goodbye, as a crash would (the will fires). */
void cddp__store_tcp_abandon(cddp_store_t *s);

/* A store server that also serves torch's TCPStore protocol (1.x and 2.x, store/torch_proto.h)
 * on the same listener: each connection's first bytes say which it speaks. torch's clients do
 * not authenticate, so their keys are kept apart from the job's. ROUND_KEY (a full key of the
 * cddp clients', or NULL) names the torch keys' round: a torch client that comes after its value
 * changed starts the new round with no torch keys, and the earlier round's clients are closed. */
cddp_result_t cddp__store_server_start_torch(cddp_store_server_t **out, const char *host, int port,
                                             const char *token, const char *round_key);

/* Test hook: how long a server lets a client take to authenticate (default 10 s). */
void cddp__store_server_set_handshake_ms(cddp_store_server_t *srv, int ms);

/* ---- key-value table shared by the mem, file and server implementations ----
 * A chained hash table. Keys are byte strings (klen bytes, no NUL inside); values are
 * kept with one extra NUL byte after them so add() can parse them as text. Not
 * thread-safe: callers lock. */
typedef struct cddp__kv_entry {
  struct cddp__kv_entry *next;
  uint64_t hash;
  uint32_t klen;
  size_t vlen;
  uint8_t *val; /* vlen + 1 bytes, NUL-terminated */
  char key[];   /* klen + 1 bytes, NUL-terminated */
} cddp__kv_entry_t;

typedef struct cddp__kv {
  cddp__kv_entry_t **buckets;
  size_t nbuckets; /* power of two, or 0 before the first insert */
  size_t n;
} cddp__kv_t;

void cddp__kv_init(cddp__kv_t *kv);
void cddp__kv_free(cddp__kv_t *kv);
/* NULL when absent. */
cddp__kv_entry_t *cddp__kv_find(const cddp__kv_t *kv, const char *key, size_t klen);
/* The table's hash of a key (FNV-1a): the server indexes parked waits by it too. */
uint64_t cddp__kv_hash(const char *key, size_t klen);
/* Copies val. *created (may be NULL) says whether the key is new. SYSTEM on OOM. */
cddp_result_t cddp__kv_set(cddp__kv_t *kv, const char *key, size_t klen, const void *val,
                           size_t vlen, int *created);
/* Adds delta to the decimal integer at key (missing = 0). INVALID_ARG when the current
 * value is not an integer or the sum overflows (names the key). */
cddp_result_t cddp__kv_add(cddp__kv_t *kv, const char *key, size_t klen, int64_t delta,
                           int64_t *result, int *created);
/* The swap of compare_set; afterwards *cur is the entry (NULL when absent). */
cddp_result_t cddp__kv_compare_set(cddp__kv_t *kv, const char *key, size_t klen,
                                   const void *expected, size_t elen, int has_expected,
                                   const void *desired, size_t dlen, cddp__kv_entry_t **cur,
                                   int *created);
/* 1 when the key existed (and is now gone), else 0. */
int cddp__kv_del(cddp__kv_t *kv, const char *key, size_t klen);
/* Calls fn for every entry (order unspecified); stops early when fn returns non-zero. */
int cddp__kv_each(const cddp__kv_t *kv, int (*fn)(const cddp__kv_entry_t *e, void *arg), void *arg);

/* malloc'd copy of len bytes plus a NUL; NULL on OOM. */
void *cddp__memdup_nul(const void *p, size_t len);

#endif /* CDDP_STORE_INTERNAL_H */
