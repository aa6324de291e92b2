/* torchrun_flags.h - torch 2.x torchrun's flags that `cddp run` refuses, and why (docs/launcher.md). */
#ifndef CDDP_RUN_TORCHRUN_FLAGS_H
#define CDDP_RUN_TORCHRUN_FLAGS_H

#include <stddef.h>

/* Why cddp refuses torchrun's flag name (len bytes, without the dashes, '-' or '_' spelling), or
 * NULL when name is none of those. */
const char *cddp__torchrun_refused(const char *name, size_t len);
/* The i-th refused flag's dash spelling (its environment form is PET_<NAME>), NULL past the end. */
const char *cddp__torchrun_refused_name(int i);

#endif /* CDDP_RUN_TORCHRUN_FLAGS_H */
