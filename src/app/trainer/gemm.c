/* gemm.c - the models' one entry to matrix products: OpenBLAS's sgemm, or the bf16 kernel of
 * gemm_bf16.c when train.precision is bf16 and the CPU has AVX512-BF16. */
#include "trainer/gemm.h"

#include <string.h>

#include "common/check.h"
#include "common/cpu.h"
#include "common/knobs.h"

static cddp_precision_t precision = CDDP_PRECISION_FP32;

int cddp__cpu_has_bf16(void) {
  if (strcmp(cddp__knob_str(CDDP_KNOB_CPU_BF16), "0") == 0) return 0;
  return cddp__cpu_has(CDDP_CPU_AVX512BF16 | CDDP_CPU_AVX512BW | CDDP_CPU_AVX512VL);
}

cddp_result_t cddp__gemm_set_precision(cddp_precision_t p) {
  if (p == CDDP_PRECISION_BF16 && !cddp__cpu_has_bf16())
    return cddp__fail(CDDP_INVALID_ARG,
                      "train.precision: bf16 needs a CPU with AVX512-BF16 (avx512_bf16 in "
                      "/proc/cpuinfo), which this one lacks; use fp32");
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
