/* gemm_bf16.c - row-major C = alpha op(A) op(B) + beta C with bfloat16 inputs and fp32
 * accumulation on AVX512-BF16 (VDPBF16PS). Debian's OpenBLAS 0.3.21 declares cblas_sbgemm but
 * is built without it, hence this kernel. Goto/BLIS blocking: for each block of KC values of k,
 * op(B) is packed (rounded to bf16) in panels of NR columns, op(A) in panels of MR rows for
 * each MC rows (or, when A's k is contiguous, rounded row by row and read in place); a MR x NR
 * tile of C lives in 24 zmm registers while k runs. A packed element
 * is a pair of bf16 (k even in the low half, k + 1 in the high), the unit VDPBF16PS consumes.
 * A large product is split over the threads cddp__gemm_bf16_set_threads gives (ddp.threads),
 * by rows or by columns of C; a small one runs on the calling thread. */
#include <immintrin.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "trainer/gemm.h"
#include "trainer/zmm16.h"

#define MR 12          /* rows of a C tile */
#define NRV 2          /* zmm vectors (16 floats) across a C tile */
#define NR (16 * NRV)  /* columns of a C tile */
#ifndef KC
#define KC 256 /* most k per packed block: a B panel of NR x KC bf16 (16 KiB) stays in L1 */
#endif
#ifndef MC
#define MC 96 /* rows of A packed at once (a multiple of MR) */
#endif

#define BF16_ATTR __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))

/* Per-thread packing buffers, grown on demand and kept (the trainer calls with few shapes). */
static __thread uint32_t *pack_a, *pack_b;
static __thread size_t cap_a, cap_b;

static uint32_t *grow(uint32_t **buf, size_t *cap, size_t n) {
  if (n > *cap) {
    free(*buf);
    *buf = aligned_alloc(64, (n * sizeof(uint32_t) + 63) & ~(size_t)63);
    *cap = *buf ? n : 0;
  }
  return *buf;
}

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

/* k per block: K in the fewest blocks of at most KC, of equal even size (the last may be
 * shorter). A short last block costs a pass over the C tiles for few k: K = 256 in blocks of
 * 192 + 64 ran the GPT's forward products at 130 GFLOP/s, in one block of 256 at 170. */
static int block_k(int K) {
  int blocks = (K + KC - 1) / KC, kc = (K + blocks - 1) / blocks;
  return kc + (kc & 1);
}

/* The product restricted to C[m_lo:m_hi, n_lo:n_hi], all of K, with this thread's packing
 * buffers. Each element's sum runs over the same KC blocks and pairs wherever the region's
 * edges fall, so any split of C gives the bits of the whole. */
BF16_ATTR static void gemm_region(int m_lo, int m_hi, int n_lo, int n_hi, int K, float alpha,
                                  const float *A, long a_m, long a_k, const float *B, long b_k,
                                  long b_n, float beta, float *C, int ldc) {
  int N = n_hi - n_lo, n_panels = (N + NR - 1) / NR;
  int kc_max = block_k(K), kp_max = (kc_max + 1) / 2;
  uint32_t *bp = grow(&pack_b, &cap_b, (size_t)n_panels * NR * kp_max);
  uint32_t *ap = grow(&pack_a, &cap_a, (size_t)MC * kp_max);
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

/* ---- threads: a fork and a join per product, each thread computing one region of C ---- */

enum { MAX_THREADS = 64 };
/* Products smaller than this many multiply-adds stay on the calling thread: a wake-up costs
 * microseconds, and 2^24 of them take ~190 us on one Zen 4 core (~90 GMAC/s). */
#define PARALLEL_MACS (1.0 * (1 << 24))

typedef struct region_call {
  int M, N, K, parts, split_m; /* split_m: parts are row ranges (MC multiples), else columns */
  float alpha, beta;
  const float *A, *B;
  long a_m, a_k, b_k, b_n;
  float *C;
  int ldc;
} region_call_t;

static pthread_mutex_t pool_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t pool_go = PTHREAD_COND_INITIALIZER, pool_done = PTHREAD_COND_INITIALIZER;
static int pool_threads = 1, pool_started, pool_pending;
static unsigned pool_gen, pool_start_gen[MAX_THREADS];
static region_call_t pool_call;

/* Part p of `parts` of the call (p < parts), [lo, hi) of its split dimension. */
static void run_part(const region_call_t *c, int p) {
  if (c->split_m) {
    int blocks = (c->M + MC - 1) / MC, b0 = blocks * p / c->parts, b1 = blocks * (p + 1) / c->parts;
    int lo = b0 * MC, hi = b1 * MC < c->M ? b1 * MC : c->M;
    if (lo < hi)
      gemm_region(lo, hi, 0, c->N, c->K, c->alpha, c->A, c->a_m, c->a_k, c->B, c->b_k, c->b_n,
                  c->beta, c->C, c->ldc);
  } else {
    int panels = (c->N + NR - 1) / NR, j0 = panels * p / c->parts, j1 = panels * (p + 1) / c->parts;
    int lo = j0 * NR, hi = j1 * NR < c->N ? j1 * NR : c->N;
    if (lo < hi)
      gemm_region(0, c->M, lo, hi, c->K, c->alpha, c->A, c->a_m, c->a_k, c->B, c->b_k, c->b_n,
                  c->beta, c->C, c->ldc);
  }
}

static void *pool_worker(void *arg) {
  int me = (int)(intptr_t)arg; /* part me; the caller runs part 0 */
  unsigned seen = pool_start_gen[me]; /* written before this thread was created */
  for (;;) {
    pthread_mutex_lock(&pool_mu);
    while (pool_gen == seen) pthread_cond_wait(&pool_go, &pool_mu);
    seen = pool_gen;
    region_call_t c = pool_call;
    pthread_mutex_unlock(&pool_mu);
    if (me < c.parts) run_part(&c, me);
    pthread_mutex_lock(&pool_mu);
    if (--pool_pending == 0) pthread_cond_signal(&pool_done);
    pthread_mutex_unlock(&pool_mu);
  }
  return NULL;
}

void cddp__gemm_bf16_set_threads(int threads) {
  if (threads < 1) threads = 1;
  if (threads > MAX_THREADS) threads = MAX_THREADS;
  pthread_mutex_lock(&pool_mu);
  for (; pool_started < threads - 1; pool_started++) { /* workers stay for the process */
    pthread_t th;
    pool_start_gen[pool_started + 1] = pool_gen;
    if (pthread_create(&th, NULL, pool_worker, (void *)(intptr_t)(pool_started + 1)) != 0) break;
    pthread_detach(th);
  }
  pool_threads = pool_started + 1 < threads ? pool_started + 1 : threads;
  pthread_mutex_unlock(&pool_mu);
}

int cddp__gemm_bf16_threads(void) { return pool_threads; }

BF16_ATTR void cddp__gemm_bf16(int trans_a, int trans_b, int M, int N, int K, float alpha,
                               const float *A, int lda, const float *B, int ldb, float beta,
                               float *C, int ldc) {
  if (M <= 0 || N <= 0) return;
  if (K <= 0) { /* C = beta C */
    for (int i = 0; i < M; i++)
      for (int j = 0; j < N; j++) C[(size_t)i * ldc + j] = beta == 0.0f ? 0.0f : beta * C[(size_t)i * ldc + j];
    return;
  }
  /* element (m, k) of op(A) at A[m * a_m + k * a_k], (k, n) of op(B) at B[k * b_k + n * b_n] */
  long a_m = trans_a ? 1 : lda, a_k = trans_a ? lda : 1;
  long b_k = trans_b ? 1 : ldb, b_n = trans_b ? ldb : 1;
  int threads = pool_threads;
  if (threads <= 1 || (double)M * N * K < PARALLEL_MACS) {
    gemm_region(0, M, 0, N, K, alpha, A, a_m, a_k, B, b_k, b_n, beta, C, ldc);
    return;
  }
  /* rows when there are enough blocks of them to share evenly, else columns (each thread then
   * packs all of A, which is small when M is) */
  int m_blocks = (M + MC - 1) / MC, panels = (N + NR - 1) / NR;
  int split_m = m_blocks >= 4 * threads || m_blocks >= panels;
  int parts = split_m ? (m_blocks < threads ? m_blocks : threads) : (panels < threads ? panels : threads);
  region_call_t c = {M, N, K, parts, split_m, alpha, beta, A, B, a_m, a_k, b_k, b_n, C, ldc};
  pthread_mutex_lock(&pool_mu);
  pool_call = c;
  pool_pending = pool_started; /* every worker wakes; those past `parts` do nothing */
  pool_gen++;
  pthread_cond_broadcast(&pool_go);
  pthread_mutex_unlock(&pool_mu);
  run_part(&c, 0);
  pthread_mutex_lock(&pool_mu);
  while (pool_pending > 0) pthread_cond_wait(&pool_done, &pool_mu);
  pthread_mutex_unlock(&pool_mu);
}
