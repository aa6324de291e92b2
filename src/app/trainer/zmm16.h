/* zmm16.h - 16 lanes of 32 bits in zmm registers (AVX-512F), as the packing of gemm_bf16_dp.c and
 * the transposed form's epilogue of linear_form.c use them: the mask of the first n lanes, and
 * a 16 x 16 square transposed in registers. Callers of the transpose must themselves be
 * compiled for avx512f (the attribute below) and run only where the CPU has it. */
#ifndef CDDP_TRAINER_ZMM16_H
#define CDDP_TRAINER_ZMM16_H

#include <immintrin.h>

#define AVX512_ATTR __attribute__((target("avx512f")))

/* The mask of lanes [0, n): all 16 from 16 up, none at 0 or below. */
static inline __mmask16 cddp__lanes16(int n) {
  return n >= 16 ? (__mmask16)0xffff : n <= 0 ? 0 : (__mmask16)((1u << n) - 1);
}

/* r[i] lane j becomes r[j] lane i (16 x 16 dwords): 32-bit, 64-bit, then 128-bit lane swaps. */
AVX512_ATTR static inline void cddp__transpose16(__m512i r[16]) {
  __m512i t[16];
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_epi32(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_epi32(r[i], r[i + 1]);
  }
  for (int i = 0; i < 16; i += 4) {
    r[i] = _mm512_unpacklo_epi64(t[i], t[i + 2]);
    r[i + 1] = _mm512_unpackhi_epi64(t[i], t[i + 2]);
    r[i + 2] = _mm512_unpacklo_epi64(t[i + 1], t[i + 3]);
    r[i + 3] = _mm512_unpackhi_epi64(t[i + 1], t[i + 3]);
  }
  /* r[4a + b], 128-bit lane L, holds rows 4a..4a+3 of column 4L + b */
  for (int b = 0; b < 4; b++) {
    t[b] = _mm512_shuffle_i32x4(r[b], r[4 + b], 0x88);       /* L0 L2 of r[b], L0 L2 of r[4+b] */
    t[4 + b] = _mm512_shuffle_i32x4(r[b], r[4 + b], 0xdd);   /* L1 L3 ... */
    t[8 + b] = _mm512_shuffle_i32x4(r[8 + b], r[12 + b], 0x88);
    t[12 + b] = _mm512_shuffle_i32x4(r[8 + b], r[12 + b], 0xdd);
  }
  for (int b = 0; b < 4; b++) {
    r[b] = _mm512_shuffle_i32x4(t[b], t[8 + b], 0x88);         /* column b */
    r[8 + b] = _mm512_shuffle_i32x4(t[b], t[8 + b], 0xdd);     /* column 8 + b */
    r[4 + b] = _mm512_shuffle_i32x4(t[4 + b], t[12 + b], 0x88); /* column 4 + b */
    r[12 + b] = _mm512_shuffle_i32x4(t[4 + b], t[12 + b], 0xdd);
  }
}

#endif /* CDDP_TRAINER_ZMM16_H */
