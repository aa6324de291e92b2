/* gemm.c - the models' one entry to matrix products: OpenBLAS's sgemm, or the bf16 product of
 * gemm_bf16.c when train.precision is bf16. */
#include "trainer/gemm.h"

#include "common/check.h"
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

void cddp__gemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int M, int N, int K, float alpha,
                const float *A, int lda, const float *B, int ldb, float beta, float *C, int ldc) {
  if (precision == CDDP_PRECISION_BF16)
    cddp__gemm_bf16(ta == CblasTrans, tb == CblasTrans, M, N, K, alpha, A, lda, B, ldb, beta, C,
                    ldc);
  else
    cblas_sgemm(CblasRowMajor, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}
