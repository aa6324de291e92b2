/* check.h - the one function shape: CDDP_CHECK*, SYSCHECK, and error detail recording. */
#ifndef CDDP_COMMON_CHECK_H
#define CDDP_COMMON_CHECK_H

#include <errno.h>
#include <string.h>

#include "cddp/cddp.h"
#include "common/log.h"

/* Records a one-line detail for cddp_last_error() on this thread, logs it at TRACE of
 * subsystem ERR (WARN would be too loud: callers decide whether a failure is fatal),
 * and evaluates to code. Use as: return cddp__fail(CDDP_TIMEOUT, "wait for %s", key); */
cddp_result_t cddp__fail(cddp_result_t code, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Same, appending ": strerror(errno)". */
cddp_result_t cddp__fail_errno(cddp_result_t code, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Puts context in front of the detail a callee recorded: "<fmt>: <last error>", e.g.
 * cddp__fail_ctx(CDDP_SYSTEM, "store server") over "bind 0.0.0.0:80: Permission denied". */
cddp_result_t cddp__fail_ctx(cddp_result_t code, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Clears this thread's last error. */
void cddp__clear_error(void);
/* Copies msg as this thread's last error (used to carry a peer thread's error). */
void cddp__set_error_text(const char *msg);

/* Propagate a failure; the callee already recorded the detail. */
#define CDDP_CHECK(call)                          \
  do {                                            \
    cddp_result_t cddp__r = (call);               \
    if (cddp__r != CDDP_OK) return cddp__r;       \
  } while (0)

#define CDDP_CHECK_GOTO(call, ret, label)         \
  do {                                            \
    (ret) = (call);                               \
    if ((ret) != CDDP_OK) goto label;             \
  } while (0)

/* Retries on EINTR; on failure records "what: strerror" and jumps. */
#define CDDP_SYSCHECK_GOTO(expr, what, ret, label)                      \
  do {                                                                 \
    int cddp__s;                                                       \
    do { cddp__s = (int)(expr); } while (cddp__s == -1 && errno == EINTR); \
    if (cddp__s == -1) {                                               \
      (ret) = cddp__fail_errno(CDDP_SYSTEM, "%s", what);               \
      goto label;                                                      \
    }                                                                  \
  } while (0)

#define CDDP_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))
#define CDDP_MIN(a, b) ((a) < (b) ? (a) : (b))
#define CDDP_MAX(a, b) ((a) > (b) ? (a) : (b))

#endif /* CDDP_COMMON_CHECK_H */
