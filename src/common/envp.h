/* envp.h - reading an environment given as "K=V" strings (environ, or a test's own). */
#ifndef CDDP_COMMON_ENVP_H
#define CDDP_COMMON_ENVP_H

#include "cddp/cddp.h"

/* "K=V" lookup in envp; NULL when absent. */
const char *cddp__envp_get(char **envp, const char *name);
/* Integer variable of envp: absent or empty -> dflt; malformed or outside [lo, hi] ->
 * INVALID_ARG naming it. */
cddp_result_t cddp__envp_int(char **envp, const char *name, int dflt, long lo, long hi, int *out);

#endif /* CDDP_COMMON_ENVP_H */
