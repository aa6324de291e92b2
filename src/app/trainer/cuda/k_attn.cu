// k_attn.cu - causal multi-head self-attention in steps: q, k, v are split out of c_attn's
// output into [B, heads, T, hs], the scores S = q k^T and the outputs P v are cuBLAS batched
// GEMMs (one per sample and head), and our kernels do the scaled causal softmax (P, kept in
// att as the CPU keeps it: zero above the diagonal) and its backward.
#include <math.h>

#include "trainer/cuda/cuda_ops.h"
#include "trainer/cuda/cuda_util.h"

#define THREADS 256

static cudaStream_t st(void) { return cddp__cuda_stream(); }

// Element i of a [B, heads, T, hs] tensor: its offset in a [B, T, C] one with the heads side
// by side (times 3 with q | k | v: qkv's row length is 3C, hence row_len).
__device__ inline size_t head_offset(size_t i, int T, int C, int nh, int row_len) {
  int hs = C / nh, d = (int)(i % hs);
  size_t rest = i / hs;
  int t = (int)(rest % T);
  rest /= T;
  int h = (int)(rest % nh), b = (int)(rest / nh);
  return ((size_t)b * T + t) * row_len + (size_t)h * hs + d;
}

// qkv [B, T, 3C] (q | k | v, each [T, heads, hs]) <-> q, k, v [B, heads, T, hs]; unpack adds
// nothing: it overwrites dqkv.
__global__ void k_split_qkv(float *q, float *k, float *v, const float *qkv, int B, int T, int C, int nh) {
  size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (i >= (size_t)B * T * C) return;
  const float *row = qkv + head_offset(i, T, C, nh, 3 * C);
  q[i] = row[0];
  k[i] = row[C];
  v[i] = row[2 * C];
}

__global__ void k_join_qkv(float *dqkv, const float *dq, const float *dk, const float *dv, int B, int T, int C,
                           int nh) {
  size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (i >= (size_t)B * T * C) return;
  float *row = dqkv + head_offset(i, T, C, nh, 3 * C);
  row[0] = dq[i];
  row[C] = dk[i];
  row[2 * C] = dv[i];
}

// [B, heads, T, hs] <-> [B, T, C] (heads side by side); to_heads picks the direction
__global__ void k_heads(float *dst, const float *src, int B, int T, int C, int nh, int to_heads) {
  size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (i >= (size_t)B * T * C) return;
  size_t flat = head_offset(i, T, C, nh, C);
  if (to_heads) dst[i] = src[flat];
  else dst[flat] = src[i];
}

// One block per row t of one (sample, head): P[t, j] = softmax_j<=t(scale S[t, j]), 0 for j > t.
__global__ void k_causal_softmax(float *att, int T, float scale) {
  __shared__ float sh[32];
  size_t row = blockIdx.x;
  int t = (int)(row % T);
  float *p = att + row * T;
  float m = -INFINITY;
  for (int j = threadIdx.x; j <= t; j += blockDim.x) m = fmaxf(m, scale * p[j]);
  m = block_max(m, sh);
  float s = 0.0f;
  for (int j = threadIdx.x; j <= t; j += blockDim.x) s += expf(scale * p[j] - m);
  s = block_sum(s, sh);
  float inv = 1.0f / s;
  for (int j = threadIdx.x; j < T; j += blockDim.x) p[j] = j <= t ? expf(scale * p[j] - m) * inv : 0.0f;
}

// In place on dP: dS[t, j] = scale P[t, j] (dP[t, j] - sum_j' P[t, j'] dP[t, j']).
__global__ void k_causal_softmax_backward(float *d, const float *att, int T, float scale) {
  __shared__ float sh[32];
  size_t row = blockIdx.x;
  int t = (int)(row % T);
  const float *p = att + row * T;
  float *dr = d + row * T;
  float s = 0.0f;
  for (int j = threadIdx.x; j <= t; j += blockDim.x) s += p[j] * dr[j];
  s = block_sum(s, sh);
  for (int j = threadIdx.x; j < T; j += blockDim.x) dr[j] = j <= t ? scale * p[j] * (dr[j] - s) : 0.0f;
}

static unsigned row_threads(int T) { return T >= 256 ? 256 : T > 32 ? (unsigned)((T + 31) / 32 * 32) : 32; }

void cu_attn_forward(float *y, float *att, const float *qkv, int B, int T, int C, int n_head) {
  const int hs = C / n_head, BH = B * n_head;
  const size_t n = (size_t)B * T * C;
  const long long sv = (long long)T * hs, sa = (long long)T * T;
  float *q = (float *)cddp__cu_scratch(CU_SCRATCH_ATTN, 4 * n * sizeof(float)), *k = q + n, *v = k + n, *o = v + n;
  k_split_qkv<<<cdiv(n, THREADS), THREADS, 0, st()>>>(q, k, v, qkv, B, T, C, n_head);
  CUDA_LAUNCHED();
  cddp__cublas_gemm_batched(0, 1, T, T, hs, 1.0f, q, sv, k, sv, 0.0f, att, sa, BH);
  k_causal_softmax<<<(unsigned)((size_t)BH * T), row_threads(T), 0, st()>>>(att, T, 1.0f / sqrtf((float)hs));
  CUDA_LAUNCHED();
  cddp__cublas_gemm_batched(0, 0, T, hs, T, 1.0f, att, sa, v, sv, 0.0f, o, sv, BH);
  k_heads<<<cdiv(n, THREADS), THREADS, 0, st()>>>(y, o, B, T, C, n_head, 0);
  CUDA_LAUNCHED();
}

void cu_attn_backward(float *dqkv, const float *dy, const float *qkv, const float *att, float *scratch, int B, int T,
                      int C, int n_head) {
  (void)scratch; // the CPU's per-head T x T scratch; here dP for every head at once
  const int hs = C / n_head, BH = B * n_head;
  const size_t n = (size_t)B * T * C, nt = (size_t)BH * T * T;
  const long long sv = (long long)T * hs, sa = (long long)T * T;
  float *q = (float *)cddp__cu_scratch(CU_SCRATCH_ATTN, 4 * n * sizeof(float)), *k = q + n, *v = k + n, *dout = v + n;
  float *dq = (float *)cddp__cu_scratch(CU_SCRATCH_ATTN_BWD, (3 * n + nt) * sizeof(float)), *dk = dq + n,
        *dv = dk + n, *dp = dv + n;
  k_split_qkv<<<cdiv(n, THREADS), THREADS, 0, st()>>>(q, k, v, qkv, B, T, C, n_head);
  CUDA_LAUNCHED();
  k_heads<<<cdiv(n, THREADS), THREADS, 0, st()>>>(dout, dy, B, T, C, n_head, 1);
  CUDA_LAUNCHED();
  cddp__cublas_gemm_batched(0, 1, T, T, hs, 1.0f, dout, sv, v, sv, 0.0f, dp, sa, BH);   // dP = dO v^T
  cddp__cublas_gemm_batched(1, 0, T, hs, T, 1.0f, att, sa, dout, sv, 0.0f, dv, sv, BH); // dv = P^T dO
  k_causal_softmax_backward<<<(unsigned)((size_t)BH * T), row_threads(T), 0, st()>>>(dp, att, T,
                                                                                     1.0f / sqrtf((float)hs));
  CUDA_LAUNCHED();
  cddp__cublas_gemm_batched(0, 0, T, hs, T, 1.0f, dp, sa, k, sv, 0.0f, dq, sv, BH); // dq = dS k
  cddp__cublas_gemm_batched(1, 0, T, hs, T, 1.0f, dp, sa, q, sv, 0.0f, dk, sv, BH); // dk = dS^T q
  k_join_qkv<<<cdiv(n, THREADS), THREADS, 0, st()>>>(dqkv, dq, dk, dv, B, T, C, n_head);
  CUDA_LAUNCHED();
}
