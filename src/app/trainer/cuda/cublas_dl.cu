// cublas_dl.cu - cuBLAS through dlopen (so cddp starts where libcublas is absent) and the
// row-major GEMMs the layers use, on the device layer's stream. Row-major C = op(A) op(B) is
// column-major C^T = op(B)^T op(A)^T: the operands swap, the transposes stay.
#include <cublas_v2.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "trainer/cuda/cuda_ops.h"
#include "trainer/cuda/cuda_util.h"
extern "C" {
#include "trainer/gemm.h"
}

#ifndef CDDP_CUDA_LIBDIR
#define CDDP_CUDA_LIBDIR "/usr/local/cuda/lib64"
#endif

static struct {
  decltype(&cublasCreate_v2) create;
  decltype(&cublasSetStream_v2) set_stream;
  decltype(&cublasSgemm_v2) sgemm;
  decltype(&cublasSgemmStridedBatched) sgemm_batched;
  cublasStatus_t (*gemm_ex)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const void *,
                            const void *, cudaDataType, int, const void *, cudaDataType, int, const void *, void *,
                            cudaDataType, int, cublasComputeType_t, cublasGemmAlgo_t); // overloaded in C++
  cublasStatus_t (*gemm_batched_ex)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int,
                                    const void *, const void *, cudaDataType, int, long long, const void *,
                                    cudaDataType, int, long long, const void *, void *, cudaDataType, int, long long,
                                    int, cublasComputeType_t, cublasGemmAlgo_t); // overloaded in C++
  decltype(&cublasGetStatusString) status_string;
  cublasHandle_t handle;
  char error[256];
} cb;
static pthread_once_t cb_once = PTHREAD_ONCE_INIT;

static void load(void) {
  void *lib = dlopen("libcublas.so.13", RTLD_NOW | RTLD_LOCAL);
  if (!lib) lib = dlopen(CDDP_CUDA_LIBDIR "/libcublas.so.13", RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    snprintf(cb.error, sizeof cb.error, "cuBLAS: cannot load libcublas.so.13 (nor from %s): %s", CDDP_CUDA_LIBDIR,
             dlerror());
    return;
  }
#define SYM(field, name)                                                                       \
  if (!(*(void **)&cb.field = dlsym(lib, name))) {                                             \
    snprintf(cb.error, sizeof cb.error, "cuBLAS: libcublas.so.13 lacks %s", name);             \
    return;                                                                                    \
  }
  SYM(create, "cublasCreate_v2");
  SYM(set_stream, "cublasSetStream_v2");
  SYM(sgemm, "cublasSgemm_v2");
  SYM(sgemm_batched, "cublasSgemmStridedBatched");
  SYM(gemm_ex, "cublasGemmEx");
  SYM(gemm_batched_ex, "cublasGemmStridedBatchedEx");
  SYM(status_string, "cublasGetStatusString");
#undef SYM
  cublasStatus_t s = cb.create(&cb.handle);
  if (s != CUBLAS_STATUS_SUCCESS) {
    snprintf(cb.error, sizeof cb.error, "cuBLAS: cublasCreate failed: %s", cb.status_string(s));
    cb.handle = NULL;
  }
}

int cddp__cublas_try_load(char *err, size_t cap) {
  pthread_once(&cb_once, load);
  if (cb.handle) return 0;
  snprintf(err, cap, "%s", cb.error);
  return -1;
}

static cublasHandle_t handle(void) {
  char err[256];
  if (cddp__cublas_try_load(err, sizeof err) != 0) {
    fprintf(stderr, "cddp: %s\n", err);
    abort();
  }
  cb.set_stream(cb.handle, cddp__cuda_stream()); // cheap; follows a re-bind
  return cb.handle;
}

static void check(cublasStatus_t s, const char *what) {
  if (s == CUBLAS_STATUS_SUCCESS) return;
  fprintf(stderr, "cddp: cuBLAS %s failed: %s\n", what, cb.status_string(s));
  abort();
}

static cublasOperation_t op(int t) { return t ? CUBLAS_OP_T : CUBLAS_OP_N; }

// train.precision bf16 or fp16 (cddp__gemm_precision, as on the CPU): each product's float32
// operands are rounded to 16 bits into this scratch (round to nearest even, as the CPU rounds
// them; fp16 past 65504 is inf, which the loss scale's check then finds) and multiplied by
// cuBLAS with float32 accumulation; C, the weights and the optimizer stay float32. One stream:
// the next product reuses the scratch after this one.
static uint16_t *half_scratch;
static size_t half_cap;
static uint16_t *half_operands(const float *A, size_t na, const float *B, size_t nb) {
  if (na + nb > half_cap) {
    if (half_scratch) CUDA_CHECK(cudaFree(half_scratch)); // waits for the products using it
    half_cap = (na + nb) + (na + nb) / 4;
    CUDA_CHECK(cudaMalloc((void **)&half_scratch, half_cap * sizeof(uint16_t)));
  }
  void (*cast)(uint16_t *, const float *, size_t) = cddp__gemm_precision() == CDDP_PRECISION_FP16 ? cu_to_f16 : cu_to_bf16;
  cast(half_scratch, A, na);
  cast(half_scratch + na, B, nb);
  return half_scratch;
}
static int half_mode(void) { return cddp__gemm_precision() != CDDP_PRECISION_FP32; }
// the 16-bit operands' type in the precision's products
static cudaDataType half_type(void) { return cddp__gemm_precision() == CDDP_PRECISION_FP16 ? CUDA_R_16F : CUDA_R_16BF; }
// floats from an operand's first element to its last: op(X) is [r, c], X stored with rows of ld
static size_t stored(int trans, int r, int c, int ld) {
  size_t rows = (size_t)(trans ? c : r), cols = (size_t)(trans ? r : c);
  return rows && cols ? (rows - 1) * (size_t)ld + cols : 0;
}

void cddp__cublas_gemm_ld(int ta, int tb, int m, int n, int k, float alpha, const float *A, int lda, const float *B,
                          int ldb, float beta, float *C, int ldc) {
  cublasHandle_t h = handle();
  if (!half_mode()) {
    check(cb.sgemm(h, op(tb), op(ta), n, m, k, &alpha, B, ldb, A, lda, &beta, C, ldc), "sgemm");
    return;
  }
  size_t na = stored(ta, m, k, lda), nb = stored(tb, k, n, ldb);
  uint16_t *a = half_operands(A, na, B, nb), *b = a + na;
  check(cb.gemm_ex(h, op(tb), op(ta), n, m, k, &alpha, b, half_type(), ldb, a, half_type(), lda, &beta, C,
                   CUDA_R_32F, ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
        "GemmEx (train.precision bf16/fp16)");
}

void cddp__cublas_gemm(int ta, int tb, int m, int n, int k, float alpha, const float *A, const float *B,
                       float beta, float *C) {
  cddp__cublas_gemm_ld(ta, tb, m, n, k, alpha, A, ta ? m : k, B, tb ? k : n, beta, C, n);
}

void cddp__cublas_gemm_bf16(int ta, int tb, int m, int n, int k, float alpha, const uint16_t *A,
                            const uint16_t *B, float beta, float *C) {
  cublasHandle_t h = handle();
  check(cb.gemm_ex(h, op(tb), op(ta), n, m, k, &alpha, B, CUDA_R_16BF, tb ? k : n, A, CUDA_R_16BF, ta ? m : k,
                   &beta, C, CUDA_R_32F, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
        "GemmEx (bf16)");
}

void cddp__cublas_gemm_batched(int ta, int tb, int m, int n, int k, float alpha, const float *A, long long sA,
                               const float *B, long long sB, float beta, float *C, long long sC, int batch) {
  cublasHandle_t h = handle();
  if (!half_mode()) {
    check(cb.sgemm_batched(h, op(tb), op(ta), n, m, k, &alpha, B, tb ? k : n, sB, A, ta ? m : k, sA, &beta, C, n,
                           sC, batch),
          "SgemmStridedBatched");
    return;
  }
  size_t na = (size_t)(batch - 1) * sA + (size_t)m * k, nb = (size_t)(batch - 1) * sB + (size_t)k * n;
  uint16_t *a = half_operands(A, na, B, nb), *b = a + na;
  check(cb.gemm_batched_ex(h, op(tb), op(ta), n, m, k, &alpha, b, half_type(), tb ? k : n, sB, a, half_type(),
                           ta ? m : k, sA, &beta, C, CUDA_R_32F, n, sC, batch, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
        "GemmStridedBatchedEx (train.precision bf16/fp16)");
}
