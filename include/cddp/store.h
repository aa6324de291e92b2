/* store.h - the rendezvous key-value store: one interface, in-memory, file and TCP implementations. */
#ifndef CDDP_STORE_H
#define CDDP_STORE_H

#include <stddef.h>
#include <stdint.h>

#include "cddp/cddp.h"

#ifdef __cplusplus
extern "C" {
#endif
/* what this header declares is libcddp's API: exported from libcddp.so, which hides the rest */
#pragma GCC visibility push(default)

/* Keys are NUL-terminated strings of at most CDDP_STORE_MAX_KEY bytes; values are
 * byte strings of at most CDDP_STORE_MAX_VALUE bytes. */
#define CDDP_STORE_MAX_KEY 1024
#define CDDP_STORE_MAX_VALUE (16u << 20)

typedef struct cddp_store cddp_store_t;

/* In-process store (thread-safe). Never blocks except in get/wait. */
cddp_result_t cddp_store_mem_create(cddp_store_t **out);

/* Store kept in one file that several processes on a host share (flock-protected).
 * The file is created when missing. */
cddp_result_t cddp_store_file_create(cddp_store_t **out, const char *path);

/* Client of a TCP store server. Blocks until connected and authenticated, at most
 * timeout_ms. token may be NULL or "" when the server runs without one. Errors:
 * TIMEOUT (endpoint unreachable, names host:port in cddp_last_error), AUTH (token
 * refused), REMOTE (peer is not a cddp store / wrong version). */
cddp_result_t cddp_store_tcp_connect(cddp_store_t **out, const char *host, int port,
                                     const char *token, int timeout_ms);

/* A view of base where every key is prefixed with prefix (e.g. "job1/r3/"). With
 * own_base = 1, closing the view closes base too; otherwise close the view before base. */
cddp_result_t cddp_store_prefix_create(cddp_store_t **out, cddp_store_t *base, const char *prefix,
                                       int own_base);

/* Releases the store (closes its connection). NULL is a no-op. */
void cddp_store_close(cddp_store_t *s);

/* Default bound, in ms, on every call of a TCP client (CDDP_STORE_TIMEOUT_MS). Each
 * call below also fails with TIMEOUT if the server does not answer within it. */
void cddp_store_set_timeout(cddp_store_t *s, int timeout_ms);

cddp_result_t cddp_store_set(cddp_store_t *s, const char *key, const void *val, size_t len);

/* Waits up to timeout_ms (0: do not wait) for key to exist, then returns a copy of its
 * value in *val (malloc'd, NUL-terminated for convenience; caller frees with free()).
 * TIMEOUT when the key is still absent. */
cddp_result_t cddp_store_get(cddp_store_t *s, const char *key, void **val, size_t *len,
                             int timeout_ms);

/* Atomically adds delta to the integer stored at key (missing = 0) and returns the
 * new value. The value is kept as decimal text, so get() reads it too. */
cddp_result_t cddp_store_add(cddp_store_t *s, const char *key, int64_t delta, int64_t *result);

/* Atomically: if the current value equals expected (expected == NULL means "key
 * absent"), set it to desired. Either way *current receives the value after the call
 * (malloc'd; caller frees), so current == desired means the swap happened. */
cddp_result_t cddp_store_compare_set(cddp_store_t *s, const char *key, const void *expected,
                                     size_t expected_len, const void *desired, size_t desired_len,
                                     void **current, size_t *current_len);

/* Blocks until every key exists, at most timeout_ms. TIMEOUT names the first missing key. */
cddp_result_t cddp_store_wait(cddp_store_t *s, const char *const *keys, size_t nkeys,
                              int timeout_ms);

/* Deletes key; *existed (may be NULL) says whether it was there. */
cddp_result_t cddp_store_delete(cddp_store_t *s, const char *key, int *existed);

/* Number of keys in the whole store (prefix views count every key too). */
cddp_result_t cddp_store_num_keys(cddp_store_t *s, int64_t *n);

/* ---- TCP server (the same one runs as `cddp store` and inside `cddp run`) ---- */

typedef struct cddp_store_server cddp_store_server_t;

/* Binds host:port (host NULL = all interfaces, port 0 = any) and serves on a background
 * thread with one epoll loop. token NULL or "" disables authentication. Fails fast with
 * SYSTEM naming the port when it is in use. */
cddp_result_t cddp_store_server_start(cddp_store_server_t **out, const char *host, int port,
                                      const char *token);

/* The key where the server counts the clients it refused for a wrong or missing token: "<count>
 * <address of the last one>" (absent: none). Any authenticated client may read it: a job waiting
 * for a node can say that node was refused rather than only that it did not come. */
#define CDDP_STORE_REFUSED_KEY "store/refused"

/* The port actually bound (useful with port 0). */
int cddp_store_server_port(const cddp_store_server_t *srv);

/* Stops the loop, closes every connection, frees the server. NULL is a no-op. */
void cddp_store_server_stop(cddp_store_server_t *srv);

/* The job token: CDDP_TOKEN, else the contents of the file named by CDDP_TOKEN_FILE
 * (trailing newline stripped), else "" (no authentication). Copies at most size-1 bytes.
 * INVALID_ARG when the token file cannot be read (names the file). */
cddp_result_t cddp_token_from_env(char *buf, size_t size);

#pragma GCC visibility pop
#ifdef __cplusplus
}
#endif

#endif /* CDDP_STORE_H */
