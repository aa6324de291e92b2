/* result.c - names and texts of result codes, and the per-thread last-error detail. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "common/check.h"

static _Thread_local char last_error[512];

const char *cddp_result_name(cddp_result_t r) {
  switch (r) {
#define CDDP_RESULT_NAME(name, val, text) \
  case CDDP_##name: return #name;
    CDDP_RESULT_MAP(CDDP_RESULT_NAME)
#undef CDDP_RESULT_NAME
    default: return "UNKNOWN";
  }
}

const char *cddp_strerror(cddp_result_t r) {
  switch (r) {
#define CDDP_RESULT_TEXT(name, val, text) \
  case CDDP_##name: return text;
    CDDP_RESULT_MAP(CDDP_RESULT_TEXT)
#undef CDDP_RESULT_TEXT
    default: return "unknown result code";
  }
}

const char *cddp_last_error(void) { return last_error; }

const char *cddp_version(void) { return CDDP_VERSION_STRING; }

void cddp__clear_error(void) { last_error[0] = '\0'; }

void cddp__set_error_text(const char *msg) {
  snprintf(last_error, sizeof last_error, "%s", msg ? msg : "");
}

static cddp_result_t record(cddp_result_t code, int with_errno, const char *fmt, va_list ap) {
  int saved = errno;
  int n = vsnprintf(last_error, sizeof last_error, fmt, ap);
  if (with_errno && n >= 0 && (size_t)n < sizeof last_error)
    snprintf(last_error + n, sizeof last_error - (size_t)n, ": %s", strerror(saved));
  CDDP_TRACE(CDDP_SUB_ERR, "%s: %s", cddp_result_name(code), last_error);
  errno = saved;
  return code;
}

cddp_result_t cddp__fail(cddp_result_t code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  record(code, 0, fmt, ap);
  va_end(ap);
  return code;
}

cddp_result_t cddp__fail_errno(cddp_result_t code, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  record(code, 1, fmt, ap);
  va_end(ap);
  return code;
}

cddp_result_t cddp__fail_ctx(cddp_result_t code, const char *fmt, ...) {
  char detail[sizeof last_error];
  snprintf(detail, sizeof detail, "%s", last_error);
  va_list ap;
  va_start(ap, fmt);
  int saved = errno;
  int n = vsnprintf(last_error, sizeof last_error, fmt, ap);
  va_end(ap);
  if (n >= 0 && (size_t)n < sizeof last_error &&
      snprintf(last_error + n, sizeof last_error - (size_t)n, ": %s", detail) < 0)
    last_error[n] = '\0';
  CDDP_TRACE(CDDP_SUB_ERR, "%s: %s", cddp_result_name(code), last_error);
  errno = saved;
  return code;
}
