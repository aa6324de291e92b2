// k_flash.cu - causal self-attention fused, FlashAttention's way: no T x T scores in memory.
// A block takes ROWS query rows of one (sample, head), one warp per row; the keys and values
// come through shared memory in tiles of KT rows, and each warp folds its row's scores into a
// running maximum m, sum l and weighted sum of v (the online softmax), in float32 whatever the
// inputs (float32 or bf16). It writes y and each row's log-sum-exp m + log l, from which a
// fused backward recomputes the probabilities. The reference is layer_attn_flash.c, in the
// same order of operations per row. hs (C / n_head) up to 128: GPT-2's heads are 64.
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

template <typename In> static void flash(float *y, float *lse, const In *qkv, int B, int T, int C, int nh) {
  int hs = C / nh;
  if (hs > MAXHS || hs * nh != C) { // the models check n_head divides d_model; the width is ours
    fprintf(stderr, "cddp: fused attention: head width %d (d %d / %d heads) is over %d\n", hs, C, nh, MAXHS);
    abort();
  }
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
