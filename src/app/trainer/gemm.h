/* gemm.h - the models' matrix products: row-major C = alpha op(A) op(B) + beta C, computed by
 * OpenBLAS's sgemm (fp32) or, under train.precision bf16, by gemm_bf16.c (inputs rounded to
 * bfloat16, products accumulated in fp32; C, the weights and the optimizer stay fp32) on any
 * x86-64: VDPBF16PS where the CPU has AVX512-BF16, fp32 FMA elsewhere, the same bits on each. */
#ifndef CDDP_TRAINER_GEMM_H
#define CDDP_TRAINER_GEMM_H

#include <cblas.h>

#include "cddp/cddp.h"

/* train.precision's choices, in the schema's order. fp16 (a device's: the CPU trainer refuses it)
 * rounds each product's inputs to IEEE half precision (an overflow is inf), the products summed
 * in fp32: what cuBLAS's fp16 GEMM computes, so the emulated device rounds where the GPU does. */
typedef enum cddp_precision { CDDP_PRECISION_FP32 = 0, CDDP_PRECISION_BF16 = 1, CDDP_PRECISION_FP16 = 2 } cddp_precision_t;

/* cblas_sgemm(CblasRowMajor, ...) in the process's precision. */
void cddp__gemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int M, int N, int K, float alpha,
                const float *A, int lda, const float *B, int ldb, float beta, float *C, int ldc);

/* Sets the precision of every later cddp__gemm in this process (one model per process; call
 * it before any model work, from one thread). bf16 takes the path CDDP_CPU_BF16 names (auto:
 * the fastest this CPU has); a path the CPU lacks, or an unknown name, fails with one line. */
cddp_result_t cddp__gemm_set_precision(cddp_precision_t p);
cddp_precision_t cddp__gemm_precision(void);

/* The bf16 path `want` names ("avx512_bf16", "avx512", "avx2", "sse2"; "auto" or NULL:
 * CDDP_CPU_BF16's, whose auto is the fastest this CPU has), as that name, or NULL when this
 * CPU lacks it or the name is unknown. Starts nothing. */
const char *cddp__gemm_bf16_path(const char *want);
/* Makes `want` (as above) the path of every later bf16 product; INVALID_ARG with one line when
 * cddp__gemm_bf16_path gives NULL. Call it from one thread, with no product running. */
cddp_result_t cddp__gemm_bf16_use(const char *want);

/* The bf16 product itself (gemm_bf16.c), on any CPU (the first call takes CDDP_CPU_BF16's path,
 * or SSE2 where that is refused). trans_a/trans_b are 0 or 1. Call it from one thread at a
 * time: a large product uses the threads below. */
void cddp__gemm_bf16(int trans_a, int trans_b, int M, int N, int K, float alpha, const float *A,
                     int lda, const float *B, int ldb, float beta, float *C, int ldc);

/* Threads for the bf16 product, the caller included (ddp.threads, as OpenBLAS gets): workers
 * are started once and kept. Any split gives the bits of one thread. */
void cddp__gemm_bf16_set_threads(int threads);
int cddp__gemm_bf16_threads(void);

#endif /* CDDP_TRAINER_GEMM_H */
