/* gemm_bf16_kern.h - inside the bf16 product: what gemm_bf16.c (the choice of path, the K
 * blocking, the threads) asks of each kernel. Every kernel keeps one contract, so that every
 * path, every split over threads and both layouts of A give the same bits:
 *   - each input is rounded to bfloat16, to nearest even (VCVTNEPS2BF16);
 *   - K is cut into the blocks cddp__bf16_block_k gives; in each block an element's sum starts
 *     at 0 and takes its k in pairs (2p, 2p + 1), the product of 2p + 1 first, then that of 2p,
 *     each added in fp32 (VDPBF16PS's order; a product of two bf16 is exact in fp32, so an FMA
 *     and a multiply-then-add agree);
 *   - C = alpha * sum + beta * C after the first block (one FMA of beta * C onto the rounded
 *     alpha * sum; beta 0 reads no C), C = alpha * sum + C after each later one.
 * VDPBF16PS also flushes denormal inputs and results to zero; the FMA kernels do not, so the
 * paths can differ only where a value falls below 2^-126. */
#ifndef CDDP_TRAINER_GEMM_BF16_KERN_H
#define CDDP_TRAINER_GEMM_BF16_KERN_H

/* The product restricted to C[m_lo:m_hi, n_lo:n_hi], all of K, on the calling thread. Element
 * (m, k) of op(A) is A[m * a_m + k * a_k], (k, n) of op(B) is B[k * b_k + n * b_n]. */
typedef void cddp__bf16_region_fn(int m_lo, int m_hi, int n_lo, int n_hi, int K, float alpha,
                                  const float *A, long a_m, long a_k, const float *B, long b_k,
                                  long b_n, float beta, float *C, int ldc);

typedef struct cddp__bf16_kernel {
  const char *name; /* as CDDP_CPU_BF16 names it */
  unsigned cpu;     /* the CDDP_CPU_* features it needs */
  int mc, nr;       /* threads split C's rows in multiples of mc, its columns in multiples of nr */
  cddp__bf16_region_fn *region;
} cddp__bf16_kernel_t;

/* gemm_bf16_dp.c: VDPBF16PS (AVX512-BF16). gemm_bf16_fma.c: fp32 FMA at three widths. */
extern const cddp__bf16_kernel_t cddp__bf16_dp, cddp__bf16_fma_avx512, cddp__bf16_fma_avx2,
    cddp__bf16_fma_sse2;

/* k per block: K in the fewest blocks of at most 256, of equal even size (the last may be
 * shorter). A short last block costs a pass over the C tiles for few k: K = 256 in blocks of
 * 192 + 64 ran the GPT's forward products at 130 GFLOP/s on VDPBF16PS, in one block at 170. */
static inline int cddp__bf16_block_k(int K) {
  int blocks = (K + 255) / 256, kc = (K + blocks - 1) / blocks;
  return kc + (kc & 1);
}

/* Per-thread packing buffers, grown on demand and kept (the trainer calls with few shapes):
 * *buf holds at least n elements of `size` bytes, 64-byte aligned, or is NULL. */
void *cddp__bf16_grow(void **buf, size_t *cap, size_t n, size_t size);

#endif /* CDDP_TRAINER_GEMM_BF16_KERN_H */
