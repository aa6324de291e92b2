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
  uint32_t nan = (u >> 16) | 0x40;                       /* quiet NaN */
  uint32_t rne = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16; /* round to nearest, ties to even */
  return (uint16_t)((u & 0x7fffffffu) > 0x7f800000u ? nan : rne); /* a select, no branch */
}

/* IEEE half <-> float, portable and exact: every half widens exactly; floats round to
 * nearest, ties to even, into normals or subnormals; anything from 65520 up becomes inf;
 * NaN stays NaN both ways (quieted, sign and top payload bits kept, as F16C does). */
static inline float cddp__f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu, u;
  if (e == 0x1f) u = sign | 0x7f800000u | (m << 13) | (m ? 0x400000u : 0); /* inf; NaN, quieted */
  else if (e) u = sign | ((e + 112) << 23) | (m << 13);
  else { /* zero or subnormal: m * 2^-24, exact in float */
    float f = (float)m * 0x1p-24f;
    return sign ? -f : f;
  }
  float f;
  memcpy(&f, &u, 4);
  return f;
}

static inline uint16_t cddp__f32_to_f16(float f) {
  uint32_t x;
  memcpy(&x, &f, 4);
  uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
  x &= 0x7fffffffu;
  if (x > 0x7f800000u) return (uint16_t)(sign | 0x7e00u | ((x >> 13) & 0x3ffu)); /* quiet NaN */
  if (x >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* >= 65520 (and inf): inf */
  if (x >= 0x38800000u) { /* >= 2^-14: a normal half; rebias, round the 13 dropped bits */
    x -= 0x38000000u;
    x += 0xfffu + ((x >> 13) & 1u);
    return (uint16_t)(sign | (x >> 13));
  }
  if (x <= 0x33000000u) return sign; /* <= 2^-25: zero (2^-25 itself ties to even 0) */
  /* subnormal half: units of 2^-24; mantissa with its implicit bit, shifted 14..24 places */
  uint32_t m = (x & 0x7fffffu) | 0x800000u, sh = 126u - (x >> 23);
  uint32_t q = m >> sh, rem = m & ((1u << sh) - 1), half = 1u << (sh - 1);
  q += rem > half || (rem == half && (q & 1u));
  return (uint16_t)(sign | q);
}

/* The same conversions over n elements (F16C instructions where the CPU has them; the same
 * bits as the scalar ones above). */
void cddp__f16_to_f32_n(float *dst, const uint16_t *src, size_t n);
void cddp__f32_to_f16_n(uint16_t *dst, const float *src, size_t n);
/* Whether the _n conversions use F16C on this CPU (tests compare both paths). */
int cddp__f16_hw(void);

/* The bf16 conversions over n elements (AVX-512F or AVX2 where the CPU has them; the same
 * bits as the scalar ones above). */
void cddp__bf16_to_f32_n(float *dst, const uint16_t *src, size_t n);
void cddp__f32_to_bf16_n(uint16_t *dst, const float *src, size_t n);
/* The bf16 path in use: 2 AVX-512F, 1 AVX2, 0 portable. cap >= 0 first limits it to at most
 * cap (tests compare every path on one CPU; not thread-safe, set it before any reduction). */
int cddp__bf16_isa(int cap);

/* dst[i] = srcs[0][i] op srcs[1][i] op ... op srcs[nsrc-1][i], for n elements.
 * The srcs are combined in the order given, so every rank that passes them in the
 * same order gets bit-identical results. dst may alias any src. For CDDP_AVG the sum
 * is multiplied by scale (pass 1/world on the last step, 1.0 on partial steps). bf16
 * and f16 are accumulated in f32 and rounded to nearest even once. nsrc >= 1. */
void cddp__reduce_n(void *dst, const void *const *srcs, int nsrc, size_t n, cddp_dtype_t dt,
                    cddp_redop_t op, double scale);

/* dst[i] = a[i] op b[i]; the two-input case of cddp__reduce_n. */
void cddp__reduce2(void *dst, const void *a, const void *b, size_t n, cddp_dtype_t dt,
                   cddp_redop_t op, double scale);

/* buf[i] *= scale (AVG's final division when it could not be fused). Integers truncate. */
void cddp__scale(void *buf, size_t n, cddp_dtype_t dt, double scale);

#endif /* CDDP_COMM_REDUCE_H */
