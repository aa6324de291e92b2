/* envp.h - reading an environment given as "K=V" strings (environ, or a test's own). */
#ifndef CDDP_COMMON_ENVP_H
#define CDDP_COMMON_ENVP_H

#include "cddp/cddp.h"

/* "K=V" lookup in envp; NULL when absent. */
const char *cddp__envp_get(char **envp, const char *name);
/* Integer variable of envp: absent or empty -> dflt; malformed or outside [lo, hi] ->
 * INVALID_ARG naming it. */
cddp_result_t cddp__envp_int(char **envp, const char *name, int dflt, long lo, long hi, int *out);

/* The one reading of a HOST:PORT variable (CDDP_STORE, MASTER_ADDR:MASTER_PORT forms): an optional
 * "tcp://", then HOST:PORT or [V6]:PORT with a port in 1..65535. name is for the error line.
 * Error: INVALID_ARG "NAME=VALUE is not HOST:PORT" (a file: or mem: store among them). */
cddp_result_t cddp__envp_hostport(const char *name, const char *v, char *host, size_t hsize, int *port);

#endif /* CDDP_COMMON_ENVP_H */
