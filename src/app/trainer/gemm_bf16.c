/* gemm_bf16.c - the bf16 product (row-major C = alpha op(A) op(B) + beta C, inputs rounded to
 * bfloat16, fp32 accumulation): which kernel this CPU runs (VDPBF16PS where it has AVX512-BF16,
 * else fp32 FMA at the widest width it has, SSE2 at least), and the threads a large product is
 * split over, by rows or by columns of C. Every kernel keeps gemm_bf16_kern.h's contract, so the
 * path and the split change the time, never the bits. */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/check.h"
#include "common/cpu.h"
#include "common/knobs.h"
#include "trainer/gemm.h"
#include "trainer/gemm_bf16_kern.h"

/* fastest first; the last runs on any x86-64 */
static const cddp__bf16_kernel_t *const kernels[] = {&cddp__bf16_dp, &cddp__bf16_fma_avx512,
                                                     &cddp__bf16_fma_avx2, &cddp__bf16_fma_sse2};
enum { NKERNELS = sizeof kernels / sizeof kernels[0] };

static const cddp__bf16_kernel_t *kernel; /* chosen by the first product or cddp__gemm_bf16_use */

void *cddp__bf16_grow(void **buf, size_t *cap, size_t n, size_t size) {
  if (n > *cap) {
    free(*buf);
    *buf = aligned_alloc(64, (n * size + 63) & ~(size_t)63);
    *cap = *buf ? n : 0;
  }
  return *buf;
}

const char *cddp__gemm_bf16_path(const char *want) {
  if (!want || strcmp(want, "auto") == 0) want = cddp__knob_str(CDDP_KNOB_CPU_BF16);
  for (int i = 0; i < NKERNELS; i++)
    if ((strcmp(want, "auto") == 0 || strcmp(want, kernels[i]->name) == 0) &&
        cddp__cpu_has(kernels[i]->cpu))
      return kernels[i]->name;
  return NULL;
}

cddp_result_t cddp__gemm_bf16_use(const char *want) {
  const char *name = cddp__gemm_bf16_path(want);
  if (!name) {
    const char *asked = want && strcmp(want, "auto") != 0 ? want : cddp__knob_str(CDDP_KNOB_CPU_BF16);
    for (int i = 0; i < NKERNELS; i++)
      if (strcmp(asked, kernels[i]->name) == 0)
        return cddp__fail(CDDP_INVALID_ARG,
                          "train.precision bf16: CDDP_CPU_BF16=%s needs a CPU feature this one "
                          "lacks; use auto",
                          asked);
    return cddp__fail(CDDP_INVALID_ARG,
                      "CDDP_CPU_BF16=%s: not a bf16 path (auto, avx512_bf16, avx512, avx2, sse2)",
                      asked);
  }
  for (int i = 0; i < NKERNELS; i++)
    if (strcmp(name, kernels[i]->name) == 0) kernel = kernels[i];
  return CDDP_OK;
}

/* ---- threads: a fork and a join per product, each thread computing one region of C ---- */

enum { MAX_THREADS = 64 };
/* Products smaller than this many multiply-adds stay on the calling thread: a wake-up costs
 * microseconds, and 2^24 of them take ~190 us on one Zen 4 core (~90 GMAC/s). */
#define PARALLEL_MACS (1.0 * (1 << 24))

typedef struct region_call {
  const cddp__bf16_kernel_t *kernel;
  int M, N, K, parts, split_m; /* split_m: parts are row ranges (mc multiples), else columns */
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
  int step = c->split_m ? c->kernel->mc : c->kernel->nr, len = c->split_m ? c->M : c->N;
  int units = (len + step - 1) / step, u0 = units * p / c->parts, u1 = units * (p + 1) / c->parts;
  int lo = u0 * step, hi = u1 * step < len ? u1 * step : len;
  if (lo >= hi) return;
  if (c->split_m)
    c->kernel->region(lo, hi, 0, c->N, c->K, c->alpha, c->A, c->a_m, c->a_k, c->B, c->b_k, c->b_n,
                      c->beta, c->C, c->ldc);
  else
    c->kernel->region(0, c->M, lo, hi, c->K, c->alpha, c->A, c->a_m, c->a_k, c->B, c->b_k, c->b_n,
                      c->beta, c->C, c->ldc);
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

void cddp__gemm_bf16(int trans_a, int trans_b, int M, int N, int K, float alpha, const float *A,
                     int lda, const float *B, int ldb, float beta, float *C, int ldc) {
  if (M <= 0 || N <= 0) return;
  if (K <= 0) { /* C = beta C */
    for (int i = 0; i < M; i++)
      for (int j = 0; j < N; j++) C[(size_t)i * ldc + j] = beta == 0.0f ? 0.0f : beta * C[(size_t)i * ldc + j];
    return;
  }
  if (!kernel && cddp__gemm_bf16_use("auto") != CDDP_OK) cddp__gemm_bf16_use("sse2");
  /* element (m, k) of op(A) at A[m * a_m + k * a_k], (k, n) of op(B) at B[k * b_k + n * b_n] */
  long a_m = trans_a ? 1 : lda, a_k = trans_a ? lda : 1;
  long b_k = trans_b ? 1 : ldb, b_n = trans_b ? ldb : 1;
  int threads = pool_threads;
  if (threads <= 1 || (double)M * N * K < PARALLEL_MACS) {
    kernel->region(0, M, 0, N, K, alpha, A, a_m, a_k, B, b_k, b_n, beta, C, ldc);
    return;
  }
  /* rows when there are enough blocks of them to share evenly, else columns (each thread then
   * packs all of A, which is small when M is) */
  int m_blocks = (M + kernel->mc - 1) / kernel->mc, panels = (N + kernel->nr - 1) / kernel->nr;
  int split_m = m_blocks >= 4 * threads || m_blocks >= panels;
  int parts = split_m ? (m_blocks < threads ? m_blocks : threads) : (panels < threads ? panels : threads);
  region_call_t c = {kernel, M, N, K, parts, split_m, alpha, beta, A, B, a_m, a_k, b_k, b_n, C, ldc};
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
