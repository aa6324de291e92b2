/* reduce.h - element-wise reduction kernels shared by every transport. */
#ifndef CDDP_COMM_REDUCE_H
#define CDDP_COMM_REDUCE_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "cddp/comm.h"

/* bfloat16 <-> float: the top half of the float, rounded to nearest, ties to even. */
static inline float cddp__bf16_to_f32(uint16_t h) {
  uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

static inline uint16_t cddp__f32_to_bf16(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40); /* quiet NaN */
  u += 0x7fffu + ((u >> 16) & 1u); /* round to nearest, ties to even */
  return (uint16_t)(u >> 16);
}

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
