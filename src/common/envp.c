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


cddp_result_t cddp__envp_hostport(const char *name, const char *v, char *host, size_t hsize, int *port) {
  const char *s = v ? v : "";
  if (!strncmp(s, "tcp://", 6)) s += 6;
  const char *colon = strrchr(s, ':');
  const char *h = s;
  size_t hlen = colon ? (size_t)(colon - s) : 0;
  if (s[0] == '[' && colon && colon > s + 1 && colon[-1] == ']') {
    h = s + 1;
    hlen -= 2;
  }
  char *end = NULL;
  errno = 0;
  long p = colon ? strtol(colon + 1, &end, 10) : 0;
  if (!colon || hlen == 0 || hlen >= hsize || !colon[1] || *end || errno || p < 1 || p > 65535 || memchr(h, '/', hlen))
    return cddp__fail(CDDP_INVALID_ARG, "%s=%s is not HOST:PORT", name, v ? v : "");
  memcpy(host, h, hlen);
  host[hlen] = '\0';
  *port = (int)p;
  return CDDP_OK;
}
