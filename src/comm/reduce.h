/* reduce.h - element-wise reduction kernels shared by every transport. */
#ifndef CDDP_COMM_REDUCE_H
#define CDDP_COMM_REDUCE_H

#include <stddef.h>

#include "cddp/comm.h"

/* dst[i] = srcs[0][i] op srcs[1][i] op ... op srcs[nsrc-1][i], for n elements.
 * The srcs are combined in the order given, so every rank that passes them in the
 * same order gets bit-identical results. dst may alias any src. For CDDP_AVG the sum
 * is multiplied by scale (pass 1/world on the last step, 1.0 on partial steps). bf16
 * is accumulated in f32 and rounded to nearest even once. nsrc >= 1. */
void cddp__reduce_n(void *dst, const void *const *srcs, int nsrc, size_t n, cddp_dtype_t dt,
                    cddp_redop_t op, double scale);

/* dst[i] = a[i] op b[i]; the two-input case of cddp__reduce_n. */
void cddp__reduce2(void *dst, const void *a, const void *b, size_t n, cddp_dtype_t dt,
                   cddp_redop_t op, double scale);

/* buf[i] *= scale (AVG's final division when it could not be fused). Integers truncate. */
void cddp__scale(void *buf, size_t n, cddp_dtype_t dt, double scale);

#endif /* CDDP_COMM_REDUCE_H */
