// cuda_ops.h - inside the CUDA table: cuBLAS (dlopened) GEMMs in the layers' row-major
// convention, the per-purpose scratch buffers, and the kernels' entry points that
// ops_cuda.cu puts in the table. (C++ only: included from .cu files.)
#ifndef CDDP_TRAINER_CUDA_OPS_H
#define CDDP_TRAINER_CUDA_OPS_H

#include <stddef.h>
#include <stdint.h>

#include "trainer/optim.h"

// Loads libcublas.so.13 once (the loader's path, then CDDP_CUDA_LIBDIR); on failure says why
// and aborts: the CUDA table is only used after cddp__cuda_bind succeeded.
void cddp__cublas_gemm(int ta, int tb, int m, int n, int k, float alpha, const float *A, const float *B,
                       float beta, float *C);
// the same with explicit leading dimensions (a panel of a larger matrix)
void cddp__cublas_gemm_ld(int ta, int tb, int m, int n, int k, float alpha, const float *A, int lda, const float *B,
                          int ldb, float beta, float *C, int ldc);
void cddp__cublas_gemm_bf16(int ta, int tb, int m, int n, int k, float alpha, const uint16_t *A,
                            const uint16_t *B, float beta, float *C);
// batch GEMMs, the i-th on A + i sA, B + i sB, C + i sC (elements)
void cddp__cublas_gemm_batched(int ta, int tb, int m, int n, int k, float alpha, const float *A, long long sA,
                               const float *B, long long sB, float beta, float *C, long long sC, int batch);
// 0 when cuBLAS loads, else -1 with the reason in err (for the device tests' report)
int cddp__cublas_try_load(char *err, size_t cap);

// A device buffer of at least bytes for one purpose (slot), kept and grown: the attention's
// permuted q, k, v, the per-row losses. Valid until the next call with the same slot.
enum { CU_SCRATCH_ATTN = 0, CU_SCRATCH_ATTN_BWD, CU_SCRATCH_ROWS, CU_SCRATCH_NORM, CU_SCRATCH_COLS, CU_SCRATCH_FLASH_D,
       CU_SCRATCH_COUNT };
void *cddp__cu_scratch(int slot, size_t bytes);

// kernels (k_layers.cu, k_attn.cu, k_optim.cu): the CPU functions' meaning, device pointers
void cu_linear_forward(float *y, const float *x, const float *w, const float *b, int n, int in, int out, int relu);
void cu_linear_backward_params(float *dw, float *db, const float *dy, const float *x, int n, int in, int out,
                               int accumulate);
void cu_linear_backward_weight_rows(float *dw, const float *dy, const float *x, int n, int in, int out, int r0,
                                   int r1, int accumulate);
void cu_bias_rows(float *y, const float *b, const float *res, int n, int c);
void cu_linear_xwt(float *y, const float *x, const float *w, const float *bias, const float *res, int n, int in,
                   int out);
void cu_linear_backward_input(float *dx, const float *dy, const float *w, const float *x, int n, int in,
                              int out, int relu_in);
double cu_xent_forward(float *prob, const float *logits, const uint8_t *y, int n, int k, int *n_correct);
void cu_xent_backward(float *dlogits, const float *prob, const uint8_t *y, int n, int k, float scale);
void cu_layernorm_forward(float *y, float *mean, float *rstd, const float *x, const float *w, const float *b,
                          int n, int c);
void cu_layernorm_backward(float *dx, float *dw, float *db, const float *dy, const float *x, const float *w,
                           const float *mean, const float *rstd, int n, int c, int accumulate);
void cu_colsum(float *acc, const float *x, int n, int c, int accumulate);
void cu_bias_gelu_forward(float *y, float *x, const float *b, int n, int c);
void cu_gelu_backward(float *d, const float *x, size_t count);
void cu_attn_forward(float *y, float *att, const float *qkv, int B, int T, int C, int n_head);
void cu_attn_backward(float *dqkv, const float *dy, const float *qkv, const float *att, float *scratch, int B,
                      int T, int C, int n_head);
void cu_attn_flash_forward(float *y, float *lse, const float *qkv, int B, int T, int C, int n_head);
void cu_attn_flash_forward_bf16(float *y, float *lse, const uint16_t *qkv, int B, int T, int C, int n_head);
void cu_attn_flash_backward(float *dqkv, const float *dy, const float *qkv, const float *y, const float *lse, int B,
                            int T, int C, int n_head);
// the tensor cores' bf16 forms (k_flash_tc.cu; layers_gpt.h: cddp__attn_flash_forward_tc and
// cddp__attn_flash_backward_bf16)
void cu_attn_flash_forward_tc(float *y, float *lse, const float *qkv, int B, int T, int C, int n_head);
void cu_attn_flash_backward_bf16(float *dqkv, const float *dy, const float *qkv, const float *y, const float *lse,
                                 int B, int T, int C, int n_head);
void cu_embed_forward(float *x, const uint8_t *tok, const float *wte, const float *wpe, int B, int T, int C);
void cu_embed_backward(float *dwte, float *dwpe, const float *dx, const uint8_t *tok, int B, int T, int C,
                       int accumulate);
void cu_head_forward(float *logits, const float *h, const float *wte, int n, int C, int V);
void cu_head_backward(float *dh, float *dwte, const float *dlogits, const float *h, const float *wte, int n,
                      int C, int V, int accumulate);
double cu_softmax_xent(float *prob, const float *z, const uint8_t *y, int n, int V);
double cu_optim_step(cddp_optim_t *o, float *params, float *grads, float lr);
double cu_sumsq(const float *x, size_t n);
void cu_add_into(float *dst, const float *src, size_t n);
void cu_scale(float *x, float a, size_t n);
void cu_to_f16(uint16_t *dst, const float *src, size_t n);
void cu_to_bf16(uint16_t *dst, const float *src, size_t n);
void cu_from_bf16(float *dst, const uint16_t *src, size_t n);

#endif
