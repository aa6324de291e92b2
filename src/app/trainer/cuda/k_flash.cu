// k_flash.cu - causal self-attention fused, FlashAttention's way: no T x T scores in memory.
// A block takes ROWS query rows of one (sample, head), one warp per row; the keys and values
// come through shared memory in tiles of KT rows, and each warp folds its row's scores into a
// running maximum m, sum l and weighted sum of v (the online softmax), in float32 whatever the
// inputs (float32 or bf16). It writes y and each row's log-sum-exp m + log l, from which a
// fused backward recomputes the probabilities. The reference is layer_attn_flash.c, in the
// same order of operations per row. hs (C / n_head) up to 128: GPT-2's heads are 64.
// The backward (FlashAttention-2's) is two kernels, so that no two warps add into one row and
// the sums are deterministic: dq with a warp per query row over its keys, dk and dv with a warp
// per key row over the query rows after it; both recompute p = exp(s - lse) and D = dy . y.
#include <cuda_bf16.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "trainer/cuda/cuda_ops.h"
#include "trainer/cuda/cuda_util.h"

#define ROWS 4    // query rows per block, one warp each
#define KT 32     // keys per shared-memory tile
#define MAXHS 128 // the widest head: MAXHS / 32 values per lane

static cudaStream_t st(void) { return cddp__cuda_stream(); }

__device__ inline float widen(float x) { return x; }
__device__ inline float widen(uint16_t x) { return __bfloat162float(__ushort_as_bfloat16(x)); }

template <typename In>
__global__ void k_flash_forward(float *y, float *lse, const In *qkv, int T, int C, int nh, float scale) {
  __shared__ float ks[KT][MAXHS + 1], vs[KT][MAXHS + 1]; // +1: no bank conflicts down a column
  const int hs = C / nh, h = blockIdx.y, b = blockIdx.z, lane = threadIdx.x & 31;
  const int t0 = blockIdx.x * ROWS, t = t0 + (threadIdx.x >> 5);
  const size_t ld = 3 * (size_t)C;
  const In *base = qkv + (size_t)b * T * ld + (size_t)h * hs;
  float q[MAXHS / 32], acc[MAXHS / 32];
#pragma unroll
  for (int i = 0; i < MAXHS / 32; i++) {
    int d = lane + 32 * i;
    q[i] = t < T && d < hs ? widen(base[(size_t)t * ld + d]) * scale : 0.0f;
    acc[i] = 0.0f;
  }
  float m = -INFINITY, l = 0.0f;
  const int last = min(t0 + ROWS, T) - 1; // keys after the block's last row are masked for all its rows
  for (int j0 = 0; j0 <= last; j0 += KT) {
    __syncthreads(); // the previous tile is read by every warp
    for (int e = threadIdx.x; e < KT * hs; e += blockDim.x) {
      int jj = e / hs, d = e % hs, j = j0 + jj;
      ks[jj][d] = j < T ? widen(base[(size_t)j * ld + C + d]) : 0.0f;
      vs[jj][d] = j < T ? widen(base[(size_t)j * ld + 2 * C + d]) : 0.0f;
    }
    __syncthreads();
    if (t >= T) continue; // a whole warp: the shuffles below see all 32 lanes
    int jn = min(KT, t - j0 + 1); // this row's keys in the tile: j <= t
    for (int jj = 0; jj < jn; jj++) {
      float s = 0.0f;
#pragma unroll
      for (int i = 0; i < MAXHS / 32; i++) {
        int d = lane + 32 * i;
        if (d < hs) s += q[i] * ks[jj][d];
      }
      s = warp_sum(s);
      float mn = fmaxf(m, s), corr = expf(m - mn), p = expf(s - mn);
      l = l * corr + p;
#pragma unroll
      for (int i = 0; i < MAXHS / 32; i++) {
        int d = lane + 32 * i;
        if (d < hs) acc[i] = acc[i] * corr + p * vs[jj][d];
      }
      m = mn;
    }
  }
  if (t >= T) return;
  float *yt = y + ((size_t)b * T + t) * C + (size_t)h * hs;
#pragma unroll
  for (int i = 0; i < MAXHS / 32; i++) {
    int d = lane + 32 * i;
    if (d < hs) yt[d] = acc[i] / l;
  }
  if (lane == 0) lse[((size_t)b * nh + h) * T + t] = m + logf(l);
}

// dqkv's q columns for one query row per warp: dq_i = sum over j <= i of p (dp - D) scale k_j.
__global__ void k_flash_backward_dq(float *dqkv, const float *dy, const float *qkv, const float *y, const float *lse,
                                    int T, int C, int nh, float scale) {
  __shared__ float ks[KT][MAXHS + 1], vs[KT][MAXHS + 1];
  const int hs = C / nh, h = blockIdx.y, b = blockIdx.z, lane = threadIdx.x & 31;
  const int t0 = blockIdx.x * ROWS, t = t0 + (threadIdx.x >> 5);
  const size_t ld = 3 * (size_t)C, off = (size_t)b * T * ld + (size_t)h * hs;
  const size_t row = ((size_t)b * T + (t < T ? t : 0)) * C + (size_t)h * hs; // t's dy and y
  const float *base = qkv + off;
  float q[MAXHS / 32], g[MAXHS / 32], dq[MAXHS / 32], D = 0.0f;
#pragma unroll
  for (int i = 0; i < MAXHS / 32; i++) {
    int d = lane + 32 * i;
    bool in = t < T && d < hs;
    q[i] = in ? base[(size_t)t * ld + d] * scale : 0.0f;
    g[i] = in ? dy[row + d] : 0.0f;
    D += in ? g[i] * y[row + d] : 0.0f;
    dq[i] = 0.0f;
  }
  D = warp_sum(D);
  const float L = t < T ? lse[((size_t)b * nh + h) * T + t] : 0.0f;
  const int last = min(t0 + ROWS, T) - 1;
  for (int j0 = 0; j0 <= last; j0 += KT) {
    __syncthreads();
    for (int e = threadIdx.x; e < KT * hs; e += blockDim.x) {
      int jj = e / hs, d = e % hs, j = j0 + jj;
      ks[jj][d] = j < T ? base[(size_t)j * ld + C + d] : 0.0f;
      vs[jj][d] = j < T ? base[(size_t)j * ld + 2 * C + d] : 0.0f;
    }
    __syncthreads();
    if (t >= T) continue;
    int jn = min(KT, t - j0 + 1);
    for (int jj = 0; jj < jn; jj++) {
      float s = 0.0f, dp = 0.0f;
#pragma unroll
      for (int i = 0; i < MAXHS / 32; i++) {
        int d = lane + 32 * i;
        if (d < hs) s += q[i] * ks[jj][d], dp += g[i] * vs[jj][d];
      }
      s = warp_sum(s), dp = warp_sum(dp);
      float p = expf(s - L), ds = p * (dp - D) * scale;
#pragma unroll
      for (int i = 0; i < MAXHS / 32; i++) {
        int d = lane + 32 * i;
        if (d < hs) dq[i] += ds * ks[jj][d];
      }
    }
  }
  if (t >= T) return;
#pragma unroll
  for (int i = 0; i < MAXHS / 32; i++) {
    int d = lane + 32 * i;
    if (d < hs) dqkv[off + (size_t)t * ld + d] = dq[i];
  }
}

// dqkv's k and v columns for one key row j per warp: over the query rows i >= j, through
// shared memory with their lse and D, dk_j += p (dp - D) scale q_i and dv_j += p dy_i.
__global__ void k_flash_backward_dkv(float *dqkv, const float *dy, const float *qkv, const float *y,
                                     const float *lse, int T, int C, int nh, float scale) {
  __shared__ float qs[KT][MAXHS + 1], gs[KT][MAXHS + 1], ls[KT], Ds[KT];
  const int hs = C / nh, h = blockIdx.y, b = blockIdx.z, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int j0 = blockIdx.x * ROWS, j = j0 + warp;
  const size_t ld = 3 * (size_t)C, off = (size_t)b * T * ld + (size_t)h * hs;
  const float *base = qkv + off, *dyh = dy + (size_t)b * T * C + (size_t)h * hs, *yh = y + (dyh - dy);
  const float *lh = lse + ((size_t)b * nh + h) * T;
  float k[MAXHS / 32], v[MAXHS / 32], dk[MAXHS / 32], dv[MAXHS / 32];
#pragma unroll
  for (int i = 0; i < MAXHS / 32; i++) {
    int d = lane + 32 * i;
    bool in = j < T && d < hs;
    k[i] = in ? base[(size_t)j * ld + C + d] : 0.0f;
    v[i] = in ? base[(size_t)j * ld + 2 * C + d] : 0.0f;
    dk[i] = dv[i] = 0.0f;
  }
  for (int i0 = j0; i0 < T; i0 += KT) { // query rows before the block's first key see none of its keys
    __syncthreads();
    for (int e = threadIdx.x; e < KT * hs; e += blockDim.x) {
      int ii = e / hs, d = e % hs, i = i0 + ii;
      qs[ii][d] = i < T ? base[(size_t)i * ld + d] : 0.0f;
      gs[ii][d] = i < T ? dyh[(size_t)i * C + d] : 0.0f;
    }
    for (int r = warp; r < KT; r += ROWS) { // each row's D = dy . y and lse, a warp per row
      int i = i0 + r;
      float D = 0.0f;
      for (int d = lane; d < hs && i < T; d += 32) D += dyh[(size_t)i * C + d] * yh[(size_t)i * C + d];
      D = warp_sum(D);
      if (lane == 0) Ds[r] = D, ls[r] = i < T ? lh[i] : 0.0f;
    }
    __syncthreads();
    if (j >= T) continue;
    int ia = max(0, j - i0), ib = min(KT, T - i0); // rows i >= j, i < T
    for (int ii = ia; ii < ib; ii++) {
      float s = 0.0f, dp = 0.0f;
#pragma unroll
      for (int i = 0; i < MAXHS / 32; i++) {
        int d = lane + 32 * i;
        if (d < hs) s += qs[ii][d] * scale * k[i], dp += gs[ii][d] * v[i];
      }
      s = warp_sum(s), dp = warp_sum(dp);
      float p = expf(s - ls[ii]), ds = p * (dp - Ds[ii]) * scale;
#pragma unroll
      for (int i = 0; i < MAXHS / 32; i++) {
        int d = lane + 32 * i;
        if (d < hs) dk[i] += ds * qs[ii][d], dv[i] += p * gs[ii][d];
      }
    }
  }
  if (j >= T) return;
#pragma unroll
  for (int i = 0; i < MAXHS / 32; i++) {
    int d = lane + 32 * i;
    if (d < hs) dqkv[off + (size_t)j * ld + C + d] = dk[i], dqkv[off + (size_t)j * ld + 2 * C + d] = dv[i];
  }
}

// The head width of d C over nh heads; aborts past MAXHS (the models check n_head divides
// d_model; the width is ours).
static int head_width(int C, int nh) {
  int hs = C / nh;
  if (hs > MAXHS || hs * nh != C) {
    fprintf(stderr, "cddp: fused attention: head width %d (d %d / %d heads) is over %d\n", hs, C, nh, MAXHS);
    abort();
  }
  return hs;
}

template <typename In> static void flash(float *y, float *lse, const In *qkv, int B, int T, int C, int nh) {
  int hs = head_width(C, nh);
  if (!B || !T) return;
  dim3 grid(cdiv((size_t)T, ROWS), (unsigned)nh, (unsigned)B);
  k_flash_forward<In><<<grid, ROWS * 32, 0, st()>>>(y, lse, qkv, T, C, nh, 1.0f / sqrtf((float)hs));
  CUDA_LAUNCHED();
}

void cu_attn_flash_forward(float *y, float *lse, const float *qkv, int B, int T, int C, int n_head) {
  flash(y, lse, qkv, B, T, C, n_head);
}
void cu_attn_flash_forward_bf16(float *y, float *lse, const uint16_t *qkv, int B, int T, int C, int n_head) {
  flash(y, lse, qkv, B, T, C, n_head);
}
void cu_attn_flash_backward(float *dqkv, const float *dy, const float *qkv, const float *y, const float *lse, int B,
                            int T, int C, int n_head) {
  int hs = head_width(C, n_head);
  if (!B || !T) return;
  dim3 grid(cdiv((size_t)T, ROWS), (unsigned)n_head, (unsigned)B);
  float scale = 1.0f / sqrtf((float)hs);
  k_flash_backward_dq<<<grid, ROWS * 32, 0, st()>>>(dqkv, dy, qkv, y, lse, T, C, n_head, scale);
  CUDA_LAUNCHED();
  k_flash_backward_dkv<<<grid, ROWS * 32, 0, st()>>>(dqkv, dy, qkv, y, lse, T, C, n_head, scale);
  CUDA_LAUNCHED();
}
