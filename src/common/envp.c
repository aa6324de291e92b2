/* envp.c - "K=V" environment lookups shared by every reader of launcher variables. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/check.h"
#include "common/envp.h"

const char *cddp__envp_get(char **envp, const char *name) {
  size_t n = strlen(name);
  for (char **e = envp; e && *e; e++)
    if (!strncmp(*e, name, n) && (*e)[n] == '=') return *e + n + 1;
  return NULL;
}

cddp_result_t cddp__envp_int(char **envp, const char *name, int dflt, long lo, long hi, int *out) {
  const char *v = cddp__envp_get(envp, name);
  if (!v || !*v) {
    *out = dflt;
    return CDDP_OK;
  }
  char *end;
  errno = 0;
  long x = strtol(v, &end, 10);
  if (*end || errno || x < lo || x > hi)
    return cddp__fail(CDDP_INVALID_ARG, "%s=%s is not an integer in [%ld, %ld]", name, v, lo, hi);
  *out = (int)x;
  return CDDP_OK;
}

