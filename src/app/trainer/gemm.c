/* gemm.c - the models' one entry to matrix products: OpenBLAS's sgemm, the bf16 product of
 * gemm_bf16.c when train.precision is bf16, or sgemm over operands rounded to fp16 (fp16: the
 * products of two halves are exact in fp32, so only the sums' order differs from cuBLAS's). */
#include "trainer/gemm.h"

#include <stdlib.h>

#include "common/check.h"
#include "comm/reduce.h"
#include "common/log.h"

static cddp_precision_t precision = CDDP_PRECISION_FP32;

cddp_result_t cddp__gemm_set_precision(cddp_precision_t p) {
  if (p == CDDP_PRECISION_BF16) {
    CDDP_CHECK(cddp__gemm_bf16_use("auto"));
    CDDP_INFO(CDDP_SUB_TRAIN, "train.precision bf16: the %s path", cddp__gemm_bf16_path("auto"));
  }
  precision = p;
  return CDDP_OK;
}

cddp_precision_t cddp__gemm_precision(void) { return precision; }

/* Floats from an operand's first element to its last: op(X) is [r, c], X stored with rows of ld. */
static size_t stored(int trans, int r, int c, int ld) {
  size_t rows = (size_t)(trans ? c : r), cols = (size_t)(trans ? r : c);
  return rows && cols ? (rows - 1) * (size_t)ld + cols : 0;
}

/* The stored rows of an operand (rows x ld floats), rounded to fp16 and back (round to
 * nearest even; past 65504, inf), into a scratch of the calling thread's. */
static const float *fp16_rounded(const float *x, size_t n, int which) {
  static _Thread_local float *buf[2];
  static _Thread_local size_t cap[2];
  if (cap[which] < n) {
    free(buf[which]);
    cap[which] = n + n / 4;
    if (!(buf[which] = malloc(cap[which] * sizeof(float)))) abort(); /* as sgemm would: no way to fail */
  }
  /* the library's converter (test_reduce_f16: _Float16's bits), not _Float16: not every compiler has it */
  for (size_t i = 0; i < n; i++) buf[which][i] = cddp__f16_to_f32(cddp__f32_to_f16(x[i]));
  return buf[which];
}

void cddp__gemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int M, int N, int K, float alpha,
                const float *A, int lda, const float *B, int ldb, float beta, float *C, int ldc) {
  if (precision == CDDP_PRECISION_BF16)
    cddp__gemm_bf16(ta == CblasTrans, tb == CblasTrans, M, N, K, alpha, A, lda, B, ldb, beta, C,
                    ldc);
  else if (precision == CDDP_PRECISION_FP16)
    cblas_sgemm(CblasRowMajor, ta, tb, M, N, K, alpha, fp16_rounded(A, stored(ta == CblasTrans, M, K, lda), 0), lda,
                fp16_rounded(B, stored(tb == CblasTrans, K, N, ldb), 1), ldb, beta, C, ldc);
  else
    cblas_sgemm(CblasRowMajor, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}
