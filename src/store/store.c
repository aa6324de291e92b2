/* store.c - the public store API: argument checks, dispatch through the vtable, prefix views, token. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/check.h"
#include "common/knobs.h"
#include "store/store_internal.h"

void cddp__store_init(cddp_store_t *s, const cddp_store_ops_t *ops) {
  s->ops = ops;
  int64_t t = cddp__knob_int(CDDP_KNOB_STORE_TIMEOUT_MS);
  s->timeout_ms = t < 0 ? 0 : t > 0x3fffffff ? 0x3fffffff : (int)t;
}

static cddp_result_t check_store(cddp_store_t *s, const char *what) {
  if (!s || !s->ops) return cddp__fail(CDDP_INVALID_ARG, "store %s: NULL store", what);
  return CDDP_OK;
}

static cddp_result_t check_key(const char *key, const char *what) {
  if (!key) return cddp__fail(CDDP_INVALID_ARG, "store %s: NULL key", what);
  size_t n = strnlen(key, CDDP_STORE_MAX_KEY + 1);
  if (n == 0) return cddp__fail(CDDP_INVALID_ARG, "store %s: empty key", what);
  if (n > CDDP_STORE_MAX_KEY)
    return cddp__fail(CDDP_INVALID_ARG, "store %s: key %.40s... longer than %d bytes", what, key,
                      CDDP_STORE_MAX_KEY);
  return CDDP_OK;
}

static cddp_result_t check_val(const void *v, size_t len, const char *key, const char *what) {
  if (len > CDDP_STORE_MAX_VALUE)
    return cddp__fail(CDDP_INVALID_ARG, "store %s: value of key %s is %zu bytes (max %u)", what,
                      key, len, CDDP_STORE_MAX_VALUE);
  if (len && !v) return cddp__fail(CDDP_INVALID_ARG, "store %s: NULL value for key %s", what, key);
  return CDDP_OK;
}

static int eff_timeout(const cddp_store_t *s, int timeout_ms) {
  return timeout_ms < 0 ? s->timeout_ms : timeout_ms;
}

void cddp_store_close(cddp_store_t *s) {
  if (s && s->ops) s->ops->close(s);
}

void cddp_store_set_timeout(cddp_store_t *s, int timeout_ms) {
  if (!s) return;
  s->timeout_ms = timeout_ms < 0 ? 0 : timeout_ms;
  if (s->ops && s->ops->set_timeout) s->ops->set_timeout(s, s->timeout_ms);
}

cddp_result_t cddp_store_set(cddp_store_t *s, const char *key, const void *val, size_t len) {
  CDDP_CHECK(check_store(s, "set"));
  CDDP_CHECK(check_key(key, "set"));
  CDDP_CHECK(check_val(val, len, key, "set"));
  return s->ops->set(s, key, val, len);
}

cddp_result_t cddp_store_get(cddp_store_t *s, const char *key, void **val, size_t *len,
                             int timeout_ms) {
  CDDP_CHECK(check_store(s, "get"));
  CDDP_CHECK(check_key(key, "get"));
  if (!val) return cddp__fail(CDDP_INVALID_ARG, "store get %s: NULL output", key);
  *val = NULL;
  if (len) *len = 0;
  size_t dummy;
  return s->ops->get(s, key, val, len ? len : &dummy, eff_timeout(s, timeout_ms));
}

cddp_result_t cddp_store_add(cddp_store_t *s, const char *key, int64_t delta, int64_t *result) {
  CDDP_CHECK(check_store(s, "add"));
  CDDP_CHECK(check_key(key, "add"));
  int64_t dummy;
  return s->ops->add(s, key, delta, result ? result : &dummy);
}

cddp_result_t cddp_store_compare_set(cddp_store_t *s, const char *key, const void *expected,
                                     size_t expected_len, const void *desired, size_t desired_len,
                                     void **current, size_t *current_len) {
  CDDP_CHECK(check_store(s, "compare_set"));
  CDDP_CHECK(check_key(key, "compare_set"));
  if (expected) CDDP_CHECK(check_val(expected, expected_len, key, "compare_set"));
  CDDP_CHECK(check_val(desired, desired_len, key, "compare_set"));
  void *cur = NULL;
  size_t curlen = 0;
  cddp_result_t r = s->ops->compare_set(s, key, expected, expected ? expected_len : 0,
                                        desired ? desired : "", desired_len, &cur, &curlen);
  if (current) *current = cur;
  else free(cur);
  if (current_len) *current_len = curlen;
  return r;
}

cddp_result_t cddp_store_wait(cddp_store_t *s, const char *const *keys, size_t nkeys,
                              int timeout_ms) {
  CDDP_CHECK(check_store(s, "wait"));
  if (nkeys && !keys) return cddp__fail(CDDP_INVALID_ARG, "store wait: NULL key list");
  if (nkeys > CDDP__STORE_MAX_WAIT_KEYS)
    return cddp__fail(CDDP_INVALID_ARG, "store wait: %zu keys (max %d)", nkeys,
                      CDDP__STORE_MAX_WAIT_KEYS);
  for (size_t i = 0; i < nkeys; i++) CDDP_CHECK(check_key(keys[i], "wait"));
  if (nkeys == 0) return CDDP_OK;
  return s->ops->wait(s, keys, nkeys, eff_timeout(s, timeout_ms));
}

cddp_result_t cddp_store_delete(cddp_store_t *s, const char *key, int *existed) {
  CDDP_CHECK(check_store(s, "delete"));
  CDDP_CHECK(check_key(key, "delete"));
  int dummy;
  return s->ops->del(s, key, existed ? existed : &dummy);
}

cddp_result_t cddp__store_fence(cddp_store_t *s) {
  return s && s->ops->fence ? s->ops->fence(s) : CDDP_OK;
}

cddp_result_t cddp_store_num_keys(cddp_store_t *s, int64_t *n) {
  CDDP_CHECK(check_store(s, "num_keys"));
  if (!n) return cddp__fail(CDDP_INVALID_ARG, "store num_keys: NULL output");
  return s->ops->num_keys(s, n);
}

/* ---- the token ---- */

cddp_result_t cddp_token_from_env(char *buf, size_t size) {
  if (!buf || size == 0) return cddp__fail(CDDP_INVALID_ARG, "token: empty output buffer");
  buf[0] = '\0';
  const char *tok = getenv(cddp__knob_var(CDDP_KNOB_TOKEN));
  if (tok && *tok) {
    snprintf(buf, size, "%s", tok);
    return CDDP_OK;
  }
  const char *path = getenv(cddp__knob_var(CDDP_KNOB_TOKEN_FILE));
  if (!path || !*path) return CDDP_OK;
  /* O_NONBLOCK and a regular file only: a FIFO (or a device) named here would block for ever */
  int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
  if (fd < 0) return cddp__fail_errno(CDDP_INVALID_ARG, "token file %s (CDDP_TOKEN_FILE)", path);
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    return cddp__fail(CDDP_INVALID_ARG, "token file %s (CDDP_TOKEN_FILE) is not a regular file", path);
  }
  size_t n = 0;
  ssize_t got = 1;
  while (n < size && (got = read(fd, buf + n, size - n)) > 0) n += (size_t)got;
  close(fd);
  if (got < 0) return cddp__fail_errno(CDDP_INVALID_ARG, "token file %s: read error", path);
  if (n == size) { /* a cut token would still match a peer cut alike: say it instead */
    buf[0] = '\0';
    return cddp__fail(CDDP_INVALID_ARG, "token file %s: longer than %zu bytes", path, size - 1);
  }
  buf[n] = '\0';
  while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == '\r')) buf[--n] = '\0';
  if (n == 0) /* an empty token turns authentication off: never silently */
    return cddp__fail(CDDP_INVALID_ARG, "token file %s (CDDP_TOKEN_FILE) is empty: write a secret into it, "
                      "or unset CDDP_TOKEN_FILE to run without a token", path);
  if (strlen(buf) != n)
    return cddp__fail(CDDP_INVALID_ARG, "token file %s: contains a NUL byte", path);
  return CDDP_OK;
}
