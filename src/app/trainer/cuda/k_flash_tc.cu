// k_flash_tc.cu - the fused attention on tensor cores (train.precision bf16). The forward: a
// warp per 16 query rows, over the key tiles up to them, s = q k^T by WMMA, the online softmax
// per row in float32, o = o corr + p v by WMMA (p rounded to bf16), y = o / l and the rows'
// log-sum-exp. The backward: FlashAttention-2's in tiles of 16 rows, every product a WMMA bf16 16x16x16 with
// float32 accumulation, nothing T x T in memory. Two kernels, as k_flash.cu's, so that no two
// blocks add into one row (deterministic sums, no atomics): dk and dv with a block per 16 key
// rows over the query tiles at and after them, dq with a block per 16 query rows over the key
// tiles up to them; both recompute each tile's s = q k^T and dp = dy v^T, then p = exp(s
// scale - lse) and ds = p (dp - D), D = dy . y from a small kernel before them. q, k, v, dy are
// rounded to bf16 as they are read, p and ds before they multiply: the places the CPU's
// reference (layer_attn_flash.c, cddp__attn_flash_backward_bf16) rounds them. A block is one
// warp; heads of 16 to 128 columns in steps of 16 (cddp__attn_bf16_bwd_ok), others take the
// float32 kernels.
#include <cuda_bf16.h>
#include <math.h>
#include <mma.h>

#include "trainer/cuda/cuda_ops.h"
#include "trainer/cuda/cuda_util.h"
extern "C" {
#include "trainer/layers_gpt.h"
}

using namespace nvcuda;
typedef __nv_bfloat16 bf16;

#define TR 16                // rows of a tile: WMMA's 16
#define TC_MAXHS 128         // the widest head
#define LDH (TC_MAXHS + 8)   // a bf16 tile's row: a multiple of 8 (WMMA's ldm), off the banks' period
#define LDS 20               // a 16 x 16 float tile's row: a multiple of 4
#define LDP 24               // a 16 x 16 bf16 tile's row
#define LDO (TC_MAXHS + 4)   // the float rows a block writes out through

typedef wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc_t;

static cudaStream_t st(void) { return cddp__cuda_stream(); }

// D[b, h, t] = dy_t . y_t over the head's columns: a warp per row.
__global__ void k_rowdot(float *D, const float *dy, const float *y, int T, int C, int nh, size_t rows) {
  size_t row = blockIdx.x * (size_t)(blockDim.x / 32) + threadIdx.x / 32;
  if (row >= rows) return;
  int lane = threadIdx.x & 31, hs = C / nh, t = (int)(row % T), h = (int)(row / T % nh);
  size_t b = row / ((size_t)T * nh), at = (b * T + t) * C + (size_t)h * hs;
  float s = 0.0f;
  for (int d = lane; d < hs; d += 32) s += dy[at + d] * y[at + d];
  for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
  if (lane == 0) D[row] = s;
}

// Rows r0.. r0+15 of a [T, hs] slice (rows ld floats apart) into a bf16 tile; rows past T are 0.
__device__ inline void load_tile(bf16 *dst, const float *src, size_t ld, int r0, int T, int hs) {
  for (int e = threadIdx.x; e < TR * hs; e += 32) {
    int r = e / hs, d = e % hs, t = r0 + r;
    dst[r * LDH + d] = __float2bfloat16_rn(t < T ? src[(size_t)t * ld + d] : 0.0f);
  }
}

// The tile pair (query rows i0.., key rows j0..): p and ds as bf16 tiles, from s = q k^T and
// dp = dy v^T; masked (j > i) and padded (i >= T) entries are 0.
template <int NF>
__device__ inline void probs(bf16 *Pb, bf16 *dSb, float *Sf, float *dPf, const bf16 *Qs, const bf16 *Ks,
                             const bf16 *dYs, const bf16 *Vs, int i0, int j0, int T, const float *lse, const float *D,
                             float scale) {
  acc_t s, dp;
  wmma::fill_fragment(s, 0.0f);
  wmma::fill_fragment(dp, 0.0f);
#pragma unroll
  for (int f = 0; f < NF; f++) {
    wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major> a;
    wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::col_major> b; // k^T: k's rows are its columns
    wmma::load_matrix_sync(a, Qs + f * 16, LDH);
    wmma::load_matrix_sync(b, Ks + f * 16, LDH);
    wmma::mma_sync(s, a, b, s);
    wmma::load_matrix_sync(a, dYs + f * 16, LDH);
    wmma::load_matrix_sync(b, Vs + f * 16, LDH);
    wmma::mma_sync(dp, a, b, dp);
  }
  wmma::store_matrix_sync(Sf, s, LDS, wmma::mem_row_major);
  wmma::store_matrix_sync(dPf, dp, LDS, wmma::mem_row_major);
  __syncwarp();
  for (int e = threadIdx.x; e < TR * TR; e += 32) {
    int r = e / TR, c = e % TR, i = i0 + r, j = j0 + c;
    float p = i < T && j <= i ? expf(Sf[r * LDS + c] * scale - lse[i]) : 0.0f;
    float ds = i < T ? p * (dPf[r * LDS + c] - D[i]) : 0.0f;
    Pb[r * LDP + c] = __float2bfloat16_rn(p);
    dSb[r * LDP + c] = __float2bfloat16_rn(ds);
  }
  __syncwarp();
}

// A block's NF accumulators (16 x 16 each, times mul) to rows r0.. of a [T, hs] slice of dqkv.
template <int NF>
__device__ inline void store_rows(float *dst, size_t ld, int r0, int T, int hs, acc_t *acc, float mul, float *stage) {
#pragma unroll
  for (int f = 0; f < NF; f++) {
    for (int x = 0; x < acc[f].num_elements; x++) acc[f].x[x] *= mul;
    wmma::store_matrix_sync(stage + f * 16, acc[f], LDO, wmma::mem_row_major);
  }
  __syncwarp();
  for (int e = threadIdx.x; e < TR * hs; e += 32) {
    int r = e / hs, d = e % hs;
    if (r0 + r < T) dst[(size_t)(r0 + r) * ld + d] = stage[r * LDO + d];
  }
  __syncwarp();
}

// y and lse of query rows i0 .. i0+15 of one (sample, head): over the key tiles up to them.
template <int NF>
__global__ void __launch_bounds__(32) k_flash_tc_forward(float *y, float *lse, const float *qkv, int T, int C, int nh,
                                                         float scale) {
  __shared__ __align__(32) bf16 qs[TR * LDH], ks[TR * LDH], vs[TR * LDH], pb[TR * LDP];
  __shared__ __align__(32) float sf[TR * LDS], o[TR * LDO], pv[TR * LDO];
  __shared__ float m[TR], l[TR], corr[TR];
  const int hs = NF * 16, h = blockIdx.y, b = blockIdx.z, i0 = blockIdx.x * TR, lane = threadIdx.x;
  const size_t ld = 3 * (size_t)C;
  const float *q = qkv + (size_t)b * T * ld + (size_t)h * hs;
  load_tile(qs, q, ld, i0, T, hs);
  for (int e = lane; e < TR * hs; e += 32) o[(e / hs) * LDO + e % hs] = 0.0f;
  if (lane < TR) m[lane] = -INFINITY, l[lane] = 0.0f;
  const int last = min(i0 + TR, T) - 1;
  for (int j0 = 0; j0 <= last; j0 += TR) {
    __syncwarp();
    load_tile(ks, q + C, ld, j0, T, hs);
    load_tile(vs, q + 2 * C, ld, j0, T, hs);
    __syncwarp();
    acc_t s;
    wmma::fill_fragment(s, 0.0f);
#pragma unroll
    for (int f = 0; f < NF; f++) {
      wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major> a;
      wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::col_major> kt;
      wmma::load_matrix_sync(a, qs + f * 16, LDH);
      wmma::load_matrix_sync(kt, ks + f * 16, LDH);
      wmma::mma_sync(s, a, kt, s);
    }
    wmma::store_matrix_sync(sf, s, LDS, wmma::mem_row_major);
    __syncwarp();
    if (lane < TR) { // a lane per row: the tile's maximum, the correction, p and its sum
      int i = i0 + lane;
      float mt = -INFINITY, sum = 0.0f;
      for (int c = 0; c < TR; c++)
        if (i < T && j0 + c <= i) mt = fmaxf(mt, sf[lane * LDS + c] * scale);
      float mn = fmaxf(m[lane], mt), cr = i < T ? expf(m[lane] - mn) : 0.0f;
      for (int c = 0; c < TR; c++) {
        float p = i < T && j0 + c <= i ? expf(sf[lane * LDS + c] * scale - mn) : 0.0f;
        sum += p;
        pb[lane * LDP + c] = __float2bfloat16_rn(p);
      }
      if (i < T) l[lane] = l[lane] * cr + sum, m[lane] = mn;
      corr[lane] = cr;
    }
    __syncwarp();
    wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major> pa;
    wmma::load_matrix_sync(pa, pb, LDP);
#pragma unroll
    for (int f = 0; f < NF; f++) {
      wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::row_major> vm;
      acc_t t;
      wmma::fill_fragment(t, 0.0f);
      wmma::load_matrix_sync(vm, vs + f * 16, LDH);
      wmma::mma_sync(t, pa, vm, t); // this tile's p v
      wmma::store_matrix_sync(pv + f * 16, t, LDO, wmma::mem_row_major);
    }
    __syncwarp();
    for (int e = lane; e < TR * hs; e += 32) {
      int r = e / hs, d = e % hs;
      o[r * LDO + d] = o[r * LDO + d] * corr[r] + pv[r * LDO + d];
    }
  }
  __syncwarp();
  float *yb = y + (size_t)b * T * C + (size_t)h * hs;
  for (int e = lane; e < TR * hs; e += 32) {
    int r = e / hs, d = e % hs;
    if (i0 + r < T) yb[(size_t)(i0 + r) * C + d] = o[r * LDO + d] / l[r];
  }
  if (lane < TR && i0 + lane < T) lse[((size_t)b * nh + h) * T + i0 + lane] = m[lane] + logf(l[lane]);
}

struct tiles {
  __align__(32) bf16 q[TR * LDH], k[TR * LDH], v[TR * LDH], dy[TR * LDH];
  __align__(32) float s[TR * LDS], dp[TR * LDS];
  __align__(32) bf16 p[TR * LDP], ds[TR * LDP];
  __align__(32) float out[TR * LDO];
};

// dk and dv of key rows j0 .. j0+15: over the query tiles at and after them. NF = hs / 16: the
// accumulators stay in registers.
template <int NF>
__global__ void __launch_bounds__(32) k_flash_tc_dkv(float *dqkv, const float *dy, const float *qkv,
                                                     const float *lse, const float *D, int T, int C, int nh,
                                                     float scale) {
  __shared__ tiles sh;
  const int hs = NF * 16, h = blockIdx.y, b = blockIdx.z, j0 = blockIdx.x * TR;
  const size_t ld = 3 * (size_t)C, off = (size_t)b * T * ld + (size_t)h * hs, row = ((size_t)b * nh + h) * T;
  const float *q = qkv + off, *g = dy + (size_t)b * T * C + (size_t)h * hs;
  acc_t dk[NF], dv[NF];
#pragma unroll
  for (int f = 0; f < NF; f++) wmma::fill_fragment(dk[f], 0.0f), wmma::fill_fragment(dv[f], 0.0f);
  load_tile(sh.k, q + C, ld, j0, T, hs);
  load_tile(sh.v, q + 2 * C, ld, j0, T, hs);
  for (int i0 = j0; i0 < T; i0 += TR) { // causal: only query rows i >= j see key j
    __syncwarp();
    load_tile(sh.q, q, ld, i0, T, hs);
    load_tile(sh.dy, g, C, i0, T, hs);
    __syncwarp();
    probs<NF>(sh.p, sh.ds, sh.s, sh.dp, sh.q, sh.k, sh.dy, sh.v, i0, j0, T, lse + row, D + row, scale);
    wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::col_major> pt, dst; // p^T and ds^T
    wmma::load_matrix_sync(pt, sh.p, LDP);
    wmma::load_matrix_sync(dst, sh.ds, LDP);
#pragma unroll
    for (int f = 0; f < NF; f++) {
      wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::row_major> m;
      wmma::load_matrix_sync(m, sh.dy + f * 16, LDH);
      wmma::mma_sync(dv[f], pt, m, dv[f]); // dv += p^T dy
      wmma::load_matrix_sync(m, sh.q + f * 16, LDH);
      wmma::mma_sync(dk[f], dst, m, dk[f]); // dk += ds^T q
    }
  }
  store_rows<NF>(dqkv + off + C, ld, j0, T, hs, dk, scale, sh.out);
  store_rows<NF>(dqkv + off + 2 * C, ld, j0, T, hs, dv, 1.0f, sh.out);
}

// dq of query rows i0 .. i0+15: over the key tiles up to them.
template <int NF>
__global__ void __launch_bounds__(32) k_flash_tc_dq(float *dqkv, const float *dy, const float *qkv,
                                                    const float *lse, const float *D, int T, int C, int nh,
                                                    float scale) {
  __shared__ tiles sh;
  const int hs = NF * 16, h = blockIdx.y, b = blockIdx.z, i0 = blockIdx.x * TR;
  const size_t ld = 3 * (size_t)C, off = (size_t)b * T * ld + (size_t)h * hs, row = ((size_t)b * nh + h) * T;
  const float *q = qkv + off, *g = dy + (size_t)b * T * C + (size_t)h * hs;
  acc_t dq[NF];
#pragma unroll
  for (int f = 0; f < NF; f++) wmma::fill_fragment(dq[f], 0.0f);
  load_tile(sh.q, q, ld, i0, T, hs);
  load_tile(sh.dy, g, C, i0, T, hs);
  const int last = min(i0 + TR, T) - 1; // keys after the tile's last row are masked for all its rows
  for (int j0 = 0; j0 <= last; j0 += TR) {
    __syncwarp();
    load_tile(sh.k, q + C, ld, j0, T, hs);
    load_tile(sh.v, q + 2 * C, ld, j0, T, hs);
    __syncwarp();
    probs<NF>(sh.p, sh.ds, sh.s, sh.dp, sh.q, sh.k, sh.dy, sh.v, i0, j0, T, lse + row, D + row, scale);
    wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major> a;
    wmma::load_matrix_sync(a, sh.ds, LDP);
#pragma unroll
    for (int f = 0; f < NF; f++) {
      wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::row_major> m;
      wmma::load_matrix_sync(m, sh.k + f * 16, LDH);
      wmma::mma_sync(dq[f], a, m, dq[f]); // dq += ds k
    }
  }
  store_rows<NF>(dqkv + off, ld, i0, T, hs, dq, scale, sh.out);
}

template <int NF>
static void launch(float *dqkv, const float *dy, const float *qkv, const float *lse, const float *D, int B, int T, int C,
                   int nh, float scale) {
  dim3 grid(cdiv((size_t)T, TR), (unsigned)nh, (unsigned)B);
  k_flash_tc_dkv<NF><<<grid, 32, 0, st()>>>(dqkv, dy, qkv, lse, D, T, C, nh, scale);
  CUDA_LAUNCHED();
  k_flash_tc_dq<NF><<<grid, 32, 0, st()>>>(dqkv, dy, qkv, lse, D, T, C, nh, scale);
  CUDA_LAUNCHED();
}

template <int NF> static void launch_forward(float *y, float *lse, const float *qkv, int B, int T, int C, int nh) {
  dim3 grid(cdiv((size_t)T, TR), (unsigned)nh, (unsigned)B);
  k_flash_tc_forward<NF><<<grid, 32, 0, st()>>>(y, lse, qkv, T, C, nh, 1.0f / sqrtf((float)(NF * 16)));
  CUDA_LAUNCHED();
}

void cu_attn_flash_forward_tc(float *y, float *lse, const float *qkv, int B, int T, int C, int n_head) {
  int hs = C / n_head;
  if (!cddp__attn_bf16_bwd_ok(hs) || hs * n_head != C) { // the float32 kernel, as the reference does
    cu_attn_flash_forward(y, lse, qkv, B, T, C, n_head);
    return;
  }
  if (!B || !T) return;
  switch (hs / 16) {
    case 1: launch_forward<1>(y, lse, qkv, B, T, C, n_head); break;
    case 2: launch_forward<2>(y, lse, qkv, B, T, C, n_head); break;
    case 3: launch_forward<3>(y, lse, qkv, B, T, C, n_head); break;
    case 4: launch_forward<4>(y, lse, qkv, B, T, C, n_head); break;
    case 5: launch_forward<5>(y, lse, qkv, B, T, C, n_head); break;
    case 6: launch_forward<6>(y, lse, qkv, B, T, C, n_head); break;
    case 7: launch_forward<7>(y, lse, qkv, B, T, C, n_head); break;
    default: launch_forward<8>(y, lse, qkv, B, T, C, n_head); break;
  }
}

void cu_attn_flash_backward_bf16(float *dqkv, const float *dy, const float *qkv, const float *y, const float *lse,
                                 int B, int T, int C, int n_head) {
  int hs = C / n_head;
  if (!cddp__attn_bf16_bwd_ok(hs) || hs * n_head != C) { // the float32 kernels, as the reference does
    cu_attn_flash_backward(dqkv, dy, qkv, y, lse, B, T, C, n_head);
    return;
  }
  if (!B || !T) return;
  size_t rows = (size_t)B * n_head * T;
  float *D = (float *)cddp__cu_scratch(CU_SCRATCH_FLASH_D, rows * sizeof(float));
  k_rowdot<<<cdiv(rows, 8), 256, 0, st()>>>(D, dy, y, T, C, n_head, rows);
  CUDA_LAUNCHED();
  float scale = 1.0f / sqrtf((float)hs);
  switch (hs / 16) { // cddp__attn_bf16_bwd_ok: 1 to 8
    case 1: launch<1>(dqkv, dy, qkv, lse, D, B, T, C, n_head, scale); break;
    case 2: launch<2>(dqkv, dy, qkv, lse, D, B, T, C, n_head, scale); break;
    case 3: launch<3>(dqkv, dy, qkv, lse, D, B, T, C, n_head, scale); break;
    case 4: launch<4>(dqkv, dy, qkv, lse, D, B, T, C, n_head, scale); break;
    case 5: launch<5>(dqkv, dy, qkv, lse, D, B, T, C, n_head, scale); break;
    case 6: launch<6>(dqkv, dy, qkv, lse, D, B, T, C, n_head, scale); break;
    case 7: launch<7>(dqkv, dy, qkv, lse, D, B, T, C, n_head, scale); break;
    default: launch<8>(dqkv, dy, qkv, lse, D, B, T, C, n_head, scale); break;
  }
}
