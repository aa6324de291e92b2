/* gemm_bf16_dp.c - the bf16 product's kernel for AVX512-BF16 (VDPBF16PS), under the contract
 * of gemm_bf16_kern.h. Debian's OpenBLAS 0.3.21 declares cblas_sbgemm but is built without
 * it, hence this kernel. Goto/BLIS blocking: for each block of KC values of k,
 * op(B) is packed (rounded to bf16) in panels of NR columns, op(A) in panels of MR rows for
 * each MC rows (or, when A's k is contiguous, rounded row by row and read in place); a MR x NR
 * tile of C lives in 24 zmm registers while k runs. A packed element
 * is a pair of bf16 (k even in the low half, k + 1 in the high), the unit VDPBF16PS consumes. */
#include <immintrin.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/cpu.h"
#include "trainer/gemm_bf16_kern.h"
#include "trainer/zmm16.h"

#define MR 12          /* rows of a C tile */
#define NRV 2          /* zmm vectors (16 floats) across a C tile */
#define NR (16 * NRV)  /* columns of a C tile */
#ifndef MC
#define MC 96 /* rows of A packed at once (a multiple of MR) */
#endif

#define BF16_ATTR __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))

/* Per-thread packing buffers (cddp__bf16_grow) */
static __thread void *pack_a, *pack_b;
static __thread size_t cap_a, cap_b;

/* Packs lanes [0, w) x kc values of k into panels of W lanes: panel q at dst + q * W * kp, where
 * dst[q * W * kp + p * W + i] = (bf16 x(qW + i, 2p), bf16 x(qW + i, 2p + 1)),
 * x(i, k) = src[i * si + k * sk]; lanes past w and an odd kc's last high half are zero.
 * All panels in one pass, so that each cache line of src is read once: packed a panel at a time,
 * a matrix whose lanes are contiguous (si == 1) is read in strips of W floats down rows that are
 * often 4 KiB apart, which alias in L1 and L2 and go to memory once per panel. */
BF16_ATTR static void pack_panels(uint32_t *dst, int W, const float *src, long si, long sk, int w,
                                  int kc) {
  int kp = (kc + 1) / 2, np = (w + W - 1) / W;
  if (sk == 1) { /* k contiguous: 16 lanes x 16 pairs at a time, converted then transposed */
    for (int q = 0; q < np; q++) {
      uint32_t *pd = dst + (size_t)q * W * kp;
      for (int i0 = 0; i0 < W; i0 += 16) {
        int nl = W - i0 < 16 ? W - i0 : 16, first = q * W + i0;
        for (int p0 = 0; p0 < kp; p0 += 16) {
          int k0 = 2 * p0;
          __m512i r[16];
          for (int i = 0; i < 16; i++) {
            r[i] = _mm512_setzero_si512();
            if (i < nl && first + i < w) {
              const float *row = src + (long)(first + i) * si + k0;
              __m512 lo = _mm512_maskz_loadu_ps(cddp__lanes16(kc - k0), row);
              __m512 hi = _mm512_maskz_loadu_ps(cddp__lanes16(kc - k0 - 16), row + 16);
              r[i] = (__m512i)_mm512_cvtne2ps_pbh(hi, lo);
            }
          }
          cddp__transpose16(r);
          int npairs = kp - p0 < 16 ? kp - p0 : 16;
          for (int t = 0; t < npairs; t++)
            _mm512_mask_storeu_epi32(pd + (size_t)(p0 + t) * W + i0, cddp__lanes16(nl), r[t]);
        }
      }
    }
    return;
  }
  /* lanes contiguous: rows k and k + 1 read across every panel, interleaved into pairs */
  for (int p = 0; p < kp; p++) {
    const float *r0 = src + (long)(2 * p) * sk, *r1 = r0 + sk;
    int has1 = 2 * p + 1 < kc;
    for (int q = 0; q < np; q++) {
      uint32_t *pd = dst + (size_t)q * W * kp + (size_t)p * W;
      for (int i0 = 0; i0 < W; i0 += 16) {
        int first = q * W + i0, nl = W - i0 < 16 ? W - i0 : 16;
        __mmask16 m = cddp__lanes16(w - first) & cddp__lanes16(nl);
        __m512 lo = _mm512_maskz_loadu_ps(m, r0 + first);
        __m512 hi = has1 ? _mm512_maskz_loadu_ps(m, r1 + first) : _mm512_setzero_ps();
        __m256i b0 = (__m256i)_mm512_cvtneps_pbh(lo), b1 = (__m256i)_mm512_cvtneps_pbh(hi);
        __m512i v = _mm512_or_si512(_mm512_cvtepu16_epi32(b0),
                                    _mm512_slli_epi32(_mm512_cvtepu16_epi32(b1), 16));
        _mm512_mask_storeu_epi32(pd + i0, cddp__lanes16(nl), v);
      }
    }
  }
}

/* Rows [0, rows) of a matrix whose k is contiguous, x(i, k) = src[i * si + k], rounded to
 * bf16 pairs in place of the transposing pack: dst[i * kp + p] = (x(i, 2p), x(i, 2p + 1)),
 * an odd kc's last high half zero. The same pairs pack_panels makes, read row by row: on cold
 * rows 0.22 ns an element against the transposing pack's 0.6. */
BF16_ATTR static void round_rows(uint32_t *dst, const float *src, long si, int rows, int kc) {
  int kp = (kc + 1) / 2;
  for (int i = 0; i < rows; i++) {
    const float *row = src + (long)i * si;
    uint32_t *d = dst + (size_t)i * kp;
    for (int k0 = 0; k0 < kc; k0 += 32) {
      __m512 lo = _mm512_maskz_loadu_ps(cddp__lanes16(kc - k0), row + k0);
      __m512 hi = _mm512_maskz_loadu_ps(cddp__lanes16(kc - k0 - 16), row + k0 + 16);
      _mm512_mask_storeu_epi32(d + k0 / 2, cddp__lanes16(kp - k0 / 2), (__m512i)_mm512_cvtne2ps_pbh(hi, lo));
    }
  }
}

/* C[mv, nv] tile = alpha * (A . B panel) + beta * C (beta 0: C is not read). Row r's pair p
 * of A is at a_row[r][p * a_ps]: a packed panel (a_ps = MR, rows 1 apart) or rounded rows
 * (a_ps = 1, rows kp apart); always inlined, so each caller's a_ps is a constant. */
BF16_ATTR static inline __attribute__((always_inline)) void
tile_of(const uint32_t *const a_row[MR], const int a_ps, const uint32_t *b, int kp, float *c,
        int ldc, int mv, int nv, float alpha, float beta) {
  __m512 acc[MR][NRV];
  for (int r = 0; r < MR; r++)
    for (int v = 0; v < NRV; v++) acc[r][v] = _mm512_setzero_ps();
  for (int p = 0; p < kp; p++) {
    __m512bh bv[NRV];
    for (int v = 0; v < NRV; v++) bv[v] = (__m512bh)_mm512_load_si512(b + (size_t)p * NR + 16 * v);
#pragma GCC unroll 12
    for (int r = 0; r < MR; r++) {
      __m512bh av = (__m512bh)_mm512_set1_epi32((int)a_row[r][(size_t)p * a_ps]);
      for (int v = 0; v < NRV; v++) acc[r][v] = _mm512_dpbf16_ps(acc[r][v], av, bv[v]);
    }
  }
  __m512 al = _mm512_set1_ps(alpha), be = _mm512_set1_ps(beta);
  for (int r = 0; r < mv; r++)
    for (int v = 0; v < NRV; v++) {
      __mmask16 m = cddp__lanes16(nv - 16 * v);
      if (!m) break;
      float *cp = c + (size_t)r * ldc + 16 * v;
      __m512 x = _mm512_mul_ps(acc[r][v], al);
      if (beta != 0.0f) x = _mm512_fmadd_ps(be, _mm512_maskz_loadu_ps(m, cp), x);
      _mm512_mask_storeu_ps(cp, m, x);
    }
}

/* A from a packed panel: pair p of row r at a[p * MR + r]. */
BF16_ATTR static void tile(const uint32_t *a, const uint32_t *b, int kp, float *c, int ldc, int mv,
                           int nv, float alpha, float beta) {
  const uint32_t *a_row[MR];
  for (int r = 0; r < MR; r++) a_row[r] = a + r;
  tile_of(a_row, MR, b, kp, c, ldc, mv, nv, alpha, beta);
}

/* A from rounded rows, kp pairs apart; rows past mv read row mv - 1 (their sums are dropped). */
BF16_ATTR static void tile_rows(const uint32_t *a, const uint32_t *b, int kp, float *c, int ldc,
                                int mv, int nv, float alpha, float beta) {
  const uint32_t *a_row[MR];
  for (int r = 0; r < MR; r++) a_row[r] = a + (size_t)(r < mv ? r : mv - 1) * kp;
  tile_of(a_row, 1, b, kp, c, ldc, mv, nv, alpha, beta);
}

/* The product restricted to C[m_lo:m_hi, n_lo:n_hi], all of K, with this thread's packing
 * buffers. Each element's sum runs over the same KC blocks and pairs wherever the region's
 * edges fall, so any split of C gives the bits of the whole. */
BF16_ATTR static void region(int m_lo, int m_hi, int n_lo, int n_hi, int K, float alpha,
                                  const float *A, long a_m, long a_k, const float *B, long b_k,
                                  long b_n, float beta, float *C, int ldc) {
  int N = n_hi - n_lo, n_panels = (N + NR - 1) / NR;
  int kc_max = cddp__bf16_block_k(K), kp_max = (kc_max + 1) / 2;
  uint32_t *bp = cddp__bf16_grow(&pack_b, &cap_b, (size_t)n_panels * NR * kp_max, sizeof *bp);
  uint32_t *ap = cddp__bf16_grow(&pack_a, &cap_a, (size_t)MC * kp_max, sizeof *ap);
  if (!bp || !ap) abort(); /* out of memory for a few hundred KiB: nothing sensible is left */
  /* A whose k is contiguous is rounded row by row, not transposed (round_rows) */
  const int rows = a_k == 1 && a_m != 1;
  for (int k0 = 0; k0 < K; k0 += kc_max) {
    int kc = K - k0 < kc_max ? K - k0 : kc_max, kp = (kc + 1) / 2;
    float be = k0 == 0 ? beta : 1.0f;
    pack_panels(bp, NR, B + k0 * b_k + n_lo * b_n, b_n, b_k, N, kc);
    for (int m0 = m_lo; m0 < m_hi; m0 += MC) {
      int mc = m_hi - m0 < MC ? m_hi - m0 : MC;
      if (rows) round_rows(ap, A + m0 * a_m + k0, a_m, mc, kc);
      else pack_panels(ap, MR, A + m0 * a_m + k0 * a_k, a_m, a_k, mc, kc);
      for (int j = 0; j < n_panels; j++) {
        int j0 = j * NR, nv = N - j0 < NR ? N - j0 : NR;
        for (int i0 = 0; i0 < mc; i0 += MR) {
          int mv = mc - i0 < MR ? mc - i0 : MR;
          float *c = C + (size_t)(m0 + i0) * ldc + n_lo + j0;
          if (rows) tile_rows(ap + (size_t)i0 * kp, bp + (size_t)j * NR * kp, kp, c, ldc, mv, nv, alpha, be);
          else tile(ap + (size_t)(i0 / MR) * MR * kp, bp + (size_t)j * NR * kp, kp, c, ldc, mv, nv, alpha, be);
        }
      }
    }
  }
}

const cddp__bf16_kernel_t cddp__bf16_dp = {
    "avx512_bf16", CDDP_CPU_AVX512BF16 | CDDP_CPU_AVX512BW | CDDP_CPU_AVX512VL, MC, NR, region};
