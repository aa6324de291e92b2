// k_layers.cu - the CUDA kernels of the MLP's and the GPT's layers but attention: bias and
// ReLU around cuBLAS's GEMMs, softmax cross-entropy, LayerNorm, column sums, GELU (tanh),
// embeddings and the tied head, bf16 casts. Each matches its CPU function (layers.h,
// layers_gpt.h); one block per row where a row is reduced.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <math.h>
#include <stdio.h>

#include "trainer/cuda/cuda_ops.h"
#include "trainer/cuda/cuda_util.h"

#define LN_EPS 1e-5f /* CDDP_LN_EPS of layers_gpt.h, as nn.LayerNorm */
#define ROW_THREADS 256
#define THREADS 256

static cudaStream_t st(void) { return cddp__cuda_stream(); }

// ---- bias, ReLU

__global__ void k_bias_rows(float *y, const float *b, size_t rows, int cols, int relu) {
  size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (i >= rows * cols) return;
  float v = y[i] + (b ? b[i % cols] : 0.0f);
  y[i] = relu && !(v > 0.0f) ? 0.0f : v;
}

__global__ void k_relu_mask(float *d, const float *x, size_t count) {
  size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (i < count && !(x[i] > 0.0f)) d[i] = 0.0f;
}

// ---- column sums (a bias's gradient; LayerNorm's dw and db) in two passes, deterministic:
// pass 1 gives each tile of 32 columns x ROW_CHUNK rows a block (so thousands of rows keep the
// GPU busy) and writes one partial sum per chunk; pass 2 adds each column's chunks in order.
// Sums a = sum_r x[r, j] (LN: dy[r, j] xhat[r, j]) and, for LN, b = sum_r dy[r, j].

#define COL_TILE 32
#define ROW_LANES 8
#define ROW_CHUNK 256

__global__ void k_col_partial(float *pa, float *pb, const float *v, const float *x, const float *mean,
                              const float *rstd, int n, int c) {
  __shared__ float sa[ROW_LANES][COL_TILE + 1], sb[ROW_LANES][COL_TILE + 1];
  const int j = blockIdx.x * COL_TILE + threadIdx.x, r0 = blockIdx.y * ROW_CHUNK;
  const int r1 = r0 + ROW_CHUNK < n ? r0 + ROW_CHUNK : n;
  float a = 0.0f, b = 0.0f;
  if (j < c)
    for (int r = r0 + threadIdx.y; r < r1; r += ROW_LANES) {
      float g = v[(size_t)r * c + j];
      if (x) { // LayerNorm: v is dy
        a += g * (x[(size_t)r * c + j] - mean[r]) * rstd[r];
        b += g;
      } else {
        a += g;
      }
    }
  sa[threadIdx.y][threadIdx.x] = a;
  sb[threadIdx.y][threadIdx.x] = b;
  __syncthreads();
  if (threadIdx.y == 0 && j < c) {
    for (int l = 1; l < ROW_LANES; l++) a += sa[l][threadIdx.x], b += sb[l][threadIdx.x];
    pa[(size_t)blockIdx.y * c + j] = a;
    if (pb) pb[(size_t)blockIdx.y * c + j] = b;
  }
}

__global__ void k_col_finish(float *out_a, float *out_b, const float *pa, const float *pb, int chunks, int c,
                             int accumulate) {
  int j = blockIdx.x * blockDim.x + threadIdx.x;
  if (j >= c) return;
  float a = 0.0f, b = 0.0f;
  for (int k = 0; k < chunks; k++) {
    a += pa[(size_t)k * c + j];
    if (out_b) b += pb[(size_t)k * c + j];
  }
  out_a[j] = accumulate ? out_a[j] + a : a;
  if (out_b) out_b[j] = accumulate ? out_b[j] + b : b;
}

// out_a (+)= column sums of v (x NULL), or LayerNorm's dw into out_a and db into out_b
static void column_sums(float *out_a, float *out_b, const float *v, const float *x, const float *mean,
                        const float *rstd, int n, int c, int accumulate) {
  unsigned chunks = n > 0 ? cdiv(n, ROW_CHUNK) : 1;
  float *pa = (float *)cddp__cu_scratch(CU_SCRATCH_COLS, 2 * (size_t)chunks * c * sizeof(float));
  float *pb = out_b ? pa + (size_t)chunks * c : NULL;
  if (n > 0) {
    k_col_partial<<<dim3(cdiv(c, COL_TILE), chunks), dim3(COL_TILE, ROW_LANES), 0, st()>>>(pa, pb, v, x, mean, rstd,
                                                                                          n, c);
    CUDA_LAUNCHED();
  } else {
    CUDA_CHECK(cudaMemsetAsync(pa, 0, 2 * (size_t)c * sizeof(float), st()));
  }
  k_col_finish<<<cdiv(c, THREADS), THREADS, 0, st()>>>(out_a, out_b, pa, pb, (int)chunks, c, accumulate);
  CUDA_LAUNCHED();
}

void cu_colsum(float *acc, const float *x, int n, int c, int accumulate) {
  column_sums(acc, NULL, x, NULL, NULL, NULL, n, c, accumulate);
}

void cu_linear_forward(float *y, const float *x, const float *w, const float *b, int n, int in, int out, int relu) {
  cddp__cublas_gemm(0, 1, n, out, in, 1.0f, x, w, 0.0f, y);
  size_t count = (size_t)n * out;
  k_bias_rows<<<cdiv(count, THREADS), THREADS, 0, st()>>>(y, b, (size_t)n, out, relu);
  CUDA_LAUNCHED();
}

void cu_linear_backward_params(float *dw, float *db, const float *dy, const float *x, int n, int in, int out,
                               int accumulate) {
  cddp__cublas_gemm(1, 0, out, in, n, 1.0f, dy, x, accumulate ? 1.0f : 0.0f, dw);
  if (db) cu_colsum(db, dy, n, out, accumulate);
}

// dw[r0:r1, :] (+)= dy[:, r0:r1]^T x: a panel of rows, dy's columns read with its full stride
void cu_linear_backward_weight_rows(float *dw, const float *dy, const float *x, int n, int in, int out, int r0,
                                    int r1, int accumulate) {
  if (r1 <= r0) return;
  float *rows = dw + (size_t)r0 * in;
  if (n <= 0) {
    if (!accumulate) CUDA_CHECK(cudaMemsetAsync(rows, 0, sizeof(float) * (size_t)(r1 - r0) * in, st()));
    return;
  }
  cddp__cublas_gemm_ld(1, 0, r1 - r0, in, n, 1.0f, dy + r0, out, x, in, accumulate ? 1.0f : 0.0f, rows, in);
}

__global__ void k_bias_residual(float *y, const float *b, const float *res, size_t n, int c) {
  size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (i < n * c) y[i] = (b ? b[i % c] : 0.0f) + (res ? res[i] : 0.0f);
}

void cu_bias_rows(float *y, const float *b, const float *res, int n, int c) {
  size_t count = (size_t)n * c;
  if (!count) return;
  k_bias_residual<<<cdiv(count, THREADS), THREADS, 0, st()>>>(y, b, res, (size_t)n, c);
  CUDA_LAUNCHED();
}

// y = (res +) bias + x W^T: the bias (and residual) rows first, then cuBLAS adds the product
void cu_linear_xwt(float *y, const float *x, const float *w, const float *bias, const float *res, int n, int in,
                   int out) {
  if (bias || res) cu_bias_rows(y, bias, res, n, out);
  cddp__cublas_gemm(0, 1, n, out, in, 1.0f, x, w, bias || res ? 1.0f : 0.0f, y);
}

void cu_linear_backward_input(float *dx, const float *dy, const float *w, const float *x, int n, int in, int out,
                              int relu_in) {
  cddp__cublas_gemm(0, 0, n, in, out, 1.0f, dy, w, 0.0f, dx);
  if (relu_in) {
    size_t count = (size_t)n * in;
    k_relu_mask<<<cdiv(count, THREADS), THREADS, 0, st()>>>(dx, x, count);
    CUDA_LAUNCHED();
  }
}

// ---- softmax cross-entropy: one block per row; prob may be z (every read is done before
// the first write). loss[r] = logsumexp - z[y] (NaN for a label >= k), hit[r] = argmax == y.

__global__ void k_softmax_xent(float *prob, const float *z, const uint8_t *y, int k, double *loss, int *hit) {
  __shared__ float sh[32];
  const size_t r = blockIdx.x;
  const float *zr = z + r * k;
  float m = -INFINITY;
  for (int i = threadIdx.x; i < k; i += blockDim.x) m = fmaxf(m, zr[i]);
  m = block_max(m, sh);
  float s = 0.0f;
  for (int i = threadIdx.x; i < k; i += blockDim.x) s += expf(zr[i] - m);
  s = block_sum(s, sh);
  if (threadIdx.x == 0) {
    int label = y[r];
    loss[r] = label < k ? (double)(m + logf(s)) - (double)zr[label] : (double)NAN;
    if (hit) {
      int best = 0;
      for (int i = 1; i < k; i++)
        if (zr[i] > zr[best]) best = i;
      hit[r] = best == label;
    }
  }
  __syncthreads();
  float inv = 1.0f / s;
  for (int i = threadIdx.x; i < k; i += blockDim.x) prob[r * k + i] = expf(zr[i] - m) * inv;
}

// The per-row losses come back to the host and are summed there in row order, in double.
static double xent(float *prob, const float *z, const uint8_t *y, int n, int k, int *n_correct) {
  size_t bytes = (size_t)n * (sizeof(double) + sizeof(int));
  double *loss = (double *)cddp__cu_scratch(CU_SCRATCH_ROWS, bytes);
  int *hit = n_correct ? (int *)(loss + n) : NULL;
  k_softmax_xent<<<n, ROW_THREADS, 0, st()>>>(prob, z, y, k, loss, hit);
  CUDA_LAUNCHED();
  double *h = (double *)malloc(bytes);
  if (!h) {
    fprintf(stderr, "cddp: cross-entropy: out of host memory for %d rows\n", n);
    abort();
  }
  CUDA_CHECK(cudaMemcpyAsync(h, loss, bytes, cudaMemcpyDeviceToHost, st()));
  CUDA_CHECK(cudaStreamSynchronize(st()));
  double sum = 0;
  for (int r = 0; r < n; r++) sum += h[r];
  if (n_correct) {
    const int *hh = (const int *)(h + n);
    int c = 0;
    for (int r = 0; r < n; r++) c += hh[r];
    *n_correct = c;
  }
  free(h);
  return sum;
}

double cu_xent_forward(float *prob, const float *logits, const uint8_t *y, int n, int k, int *n_correct) {
  return xent(prob, logits, y, n, k, n_correct);
}

double cu_softmax_xent(float *prob, const float *z, const uint8_t *y, int n, int V) {
  return xent(prob, z, y, n, V, NULL);
}

__global__ void k_xent_backward(float *dl, const float *prob, const uint8_t *y, size_t n, int k, float scale) {
  size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (i >= n * k) return;
  size_t r = i / k;
  int j = (int)(i % k);
  dl[i] = scale * (prob[i] - (j == (int)y[r] ? 1.0f : 0.0f));
}

void cu_xent_backward(float *dlogits, const float *prob, const uint8_t *y, int n, int k, float scale) {
  size_t count = (size_t)n * k;
  k_xent_backward<<<cdiv(count, THREADS), THREADS, 0, st()>>>(dlogits, prob, y, (size_t)n, k, scale);
  CUDA_LAUNCHED();
}

// ---- LayerNorm over rows of c: one block per row, two passes (mean, then the centred
// variance, as the CPU does: biased, eps 1e-5).

__global__ void k_ln_forward(float *y, float *mean, float *rstd, const float *x, const float *w, const float *b,
                             int c) {
  __shared__ float sh[32];
  const size_t r = blockIdx.x;
  const float *xr = x + r * c;
  float s = 0.0f;
  for (int i = threadIdx.x; i < c; i += blockDim.x) s += xr[i];
  float mu = block_sum(s, sh) / c;
  float v = 0.0f;
  for (int i = threadIdx.x; i < c; i += blockDim.x) {
    float d = xr[i] - mu;
    v += d * d;
  }
  float rs = 1.0f / sqrtf(block_sum(v, sh) / c + LN_EPS);
  for (int i = threadIdx.x; i < c; i += blockDim.x) y[r * c + i] = (xr[i] - mu) * rs * w[i] + b[i];
  if (threadIdx.x == 0) mean[r] = mu, rstd[r] = rs;
}

void cu_layernorm_forward(float *y, float *mean, float *rstd, const float *x, const float *w, const float *b, int n,
                          int c) {
  k_ln_forward<<<n, ROW_THREADS, 0, st()>>>(y, mean, rstd, x, w, b, c);
  CUDA_LAUNCHED();
}

// dx += rstd (dxhat - mean(dxhat) - xhat mean(dxhat xhat)), dxhat = dy w: one block per row
__global__ void k_ln_backward_input(float *dx, const float *dy, const float *x, const float *w, const float *mean,
                                    const float *rstd, int c) {
  __shared__ float sh[32];
  const size_t r = blockIdx.x;
  const float mu = mean[r], rs = rstd[r];
  float s1 = 0.0f, s2 = 0.0f;
  for (int i = threadIdx.x; i < c; i += blockDim.x) {
    float g = dy[r * c + i] * w[i], xh = (x[r * c + i] - mu) * rs;
    s1 += g;
    s2 += g * xh;
  }
  s1 = block_sum(s1, sh) / c;
  s2 = block_sum(s2, sh) / c;
  for (int i = threadIdx.x; i < c; i += blockDim.x) {
    float g = dy[r * c + i] * w[i], xh = (x[r * c + i] - mu) * rs;
    dx[r * c + i] += rs * (g - s1 - xh * s2);
  }
}

void cu_layernorm_backward(float *dx, float *dw, float *db, const float *dy, const float *x, const float *w,
                           const float *mean, const float *rstd, int n, int c, int accumulate) {
  k_ln_backward_input<<<n, ROW_THREADS, 0, st()>>>(dx, dy, x, w, mean, rstd, c);
  CUDA_LAUNCHED();
  column_sums(dw, db, dy, x, mean, rstd, n, c, accumulate); // dw = sum dy xhat, db = sum dy
}

// ---- GELU, tanh approximation: y = x/2 (1 + tanh(k (x + 0.044715 x^3))), k = sqrt(2/pi)

#define GELU_K 0.7978845608028654f
#define GELU_A 0.044715f

__global__ void k_bias_gelu(float *y, float *x, const float *b, size_t n, int c) {
  size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (i >= n * c) return;
  float v = x[i] + (b ? b[i % c] : 0.0f);
  x[i] = v;
  y[i] = 0.5f * v * (1.0f + tanhf(GELU_K * (v + GELU_A * v * v * v)));
}

void cu_bias_gelu_forward(float *y, float *x, const float *b, int n, int c) {
  size_t count = (size_t)n * c;
  k_bias_gelu<<<cdiv(count, THREADS), THREADS, 0, st()>>>(y, x, b, (size_t)n, c);
  CUDA_LAUNCHED();
}

__global__ void k_gelu_backward(float *d, const float *x, size_t count) {
  size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (i >= count) return;
  float v = x[i], t = tanhf(GELU_K * (v + GELU_A * v * v * v));
  float dt = (1.0f - t * t) * GELU_K * (1.0f + 3.0f * GELU_A * v * v);
  d[i] *= 0.5f * (1.0f + t) + 0.5f * v * dt;
}

void cu_gelu_backward(float *d, const float *x, size_t count) {
  if (!count) return;
  k_gelu_backward<<<cdiv(count, THREADS), THREADS, 0, st()>>>(d, x, count);
  CUDA_LAUNCHED();
}

// ---- embeddings (wte [V,C], wpe [context,C]) and the tied head

__global__ void k_embed_forward(float *x, const uint8_t *tok, const float *wte, const float *wpe, size_t BT, int T,
                                int C) {
  size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (i >= BT * C) return;
  size_t bt = i / C;
  int c = (int)(i % C), t = (int)(bt % T);
  x[i] = wte[(size_t)tok[bt] * C + c] + wpe[(size_t)t * C + c];
}

void cu_embed_forward(float *x, const uint8_t *tok, const float *wte, const float *wpe, int B, int T, int C) {
  size_t count = (size_t)B * T * C;
  k_embed_forward<<<cdiv(count, THREADS), THREADS, 0, st()>>>(x, tok, wte, wpe, (size_t)B * T, T, C);
  CUDA_LAUNCHED();
}

// dwte rows of the tokens seen += dx rows: rows repeat, so atomics (the order of the adds, and
// so the last bits, vary from run to run)
__global__ void k_embed_backward_wte(float *dwte, const float *dx, const uint8_t *tok, size_t BT, int C) {
  size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (i >= BT * C) return;
  size_t bt = i / C;
  atomicAdd(&dwte[(size_t)tok[bt] * C + i % C], dx[i]);
}

// dwpe[t, c] (+)= sum over b of dx[b, t, c]: one thread per (t, c), b in order (deterministic)
__global__ void k_embed_backward_wpe(float *dwpe, const float *dx, int B, int T, int C, int accumulate) {
  size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (i >= (size_t)T * C) return;
  float s = 0.0f;
  for (int b = 0; b < B; b++) s += dx[(size_t)b * T * C + i];
  dwpe[i] = accumulate ? dwpe[i] + s : s;
}

void cu_embed_backward(float *dwte, float *dwpe, const float *dx, const uint8_t *tok, int B, int T, int C,
                       int accumulate) {
  size_t count = (size_t)B * T * C;
  k_embed_backward_wte<<<cdiv(count, THREADS), THREADS, 0, st()>>>(dwte, dx, tok, (size_t)B * T, C);
  CUDA_LAUNCHED();
  k_embed_backward_wpe<<<cdiv((size_t)T * C, THREADS), THREADS, 0, st()>>>(dwpe, dx, B, T, C, accumulate);
  CUDA_LAUNCHED();
}

void cu_head_forward(float *logits, const float *h, const float *wte, int n, int C, int V) {
  cddp__cublas_gemm(0, 1, n, V, C, 1.0f, h, wte, 0.0f, logits);
}

void cu_head_backward(float *dh, float *dwte, const float *dlogits, const float *h, const float *wte, int n, int C,
                      int V, int accumulate) {
  cddp__cublas_gemm(0, 0, n, C, V, 1.0f, dlogits, wte, 0.0f, dh);
  cddp__cublas_gemm(1, 0, V, C, n, 1.0f, dlogits, h, accumulate ? 1.0f : 0.0f, dwte);
}

// ---- bf16 casts (round to nearest even) and the sum of squares

__global__ void k_to_bf16(uint16_t *dst, const float *src, size_t n) {
  size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (i < n) dst[i] = __bfloat16_as_ushort(__float2bfloat16_rn(src[i]));
}
__global__ void k_from_bf16(float *dst, const uint16_t *src, size_t n) {
  size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (i < n) dst[i] = __bfloat162float(__ushort_as_bfloat16(src[i]));
}

__global__ void k_to_f16(uint16_t *dst, const float *src, size_t n) {
  size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (i < n) dst[i] = __half_as_ushort(__float2half_rn(src[i]));
}
// IEEE half, round to nearest even, inf past 65504: train.precision fp16's products' inputs
void cu_to_f16(uint16_t *dst, const float *src, size_t n) {
  if (!n) return;
  k_to_f16<<<cdiv(n, THREADS), THREADS, 0, st()>>>(dst, src, n);
  CUDA_LAUNCHED();
}

void cu_to_bf16(uint16_t *dst, const float *src, size_t n) {
  if (!n) return;
  k_to_bf16<<<cdiv(n, THREADS), THREADS, 0, st()>>>(dst, src, n);
  CUDA_LAUNCHED();
}
void cu_from_bf16(float *dst, const uint16_t *src, size_t n) {
  if (!n) return;
  k_from_bf16<<<cdiv(n, THREADS), THREADS, 0, st()>>>(dst, src, n);
  CUDA_LAUNCHED();
}

// Each block sums its grid-stride share in double and adds it to *out.
__global__ void k_sumsq(double *out, const float *x, size_t n) {
  __shared__ double sh[32];
  double s = 0;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    s += (double)x[i] * x[i];
  s = block_sum(s, sh);
  if (threadIdx.x == 0) atomicAdd(out, s);
}

double cu_sumsq(const float *x, size_t n) {
  double *acc = (double *)cddp__cu_scratch(CU_SCRATCH_NORM, sizeof(double)), h = 0;
  CUDA_CHECK(cudaMemsetAsync(acc, 0, sizeof(double), st()));
  if (n) {
    unsigned blocks = cdiv(n, THREADS);
    k_sumsq<<<blocks < 1024 ? blocks : 1024, THREADS, 0, st()>>>(acc, x, n);
    CUDA_LAUNCHED();
  }
  CUDA_CHECK(cudaMemcpyAsync(&h, acc, sizeof h, cudaMemcpyDeviceToHost, st()));
  CUDA_CHECK(cudaStreamSynchronize(st()));
  return h;
}

// ---- a later micro-step's gradient into the first's (one rounding per element, as the CPU)

__global__ void k_add_into(float *dst, const float *src, size_t n) {
  size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (i < n) dst[i] += src[i];
}

void cu_add_into(float *dst, const float *src, size_t n) {
  if (!n) return;
  k_add_into<<<cdiv(n, THREADS), THREADS, 0, st()>>>(dst, src, n);
  CUDA_LAUNCHED();
}

// ---- fp16's loss scale taken off the gradients (x *= a, a = 1/S: a power of two, exact)

__global__ void k_scale(float *x, float a, size_t n) {
  size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (i < n) x[i] *= a;
}

void cu_scale(float *x, float a, size_t n) {
  if (!n) return;
  k_scale<<<cdiv(n, THREADS), THREADS, 0, st()>>>(x, a, n);
  CUDA_LAUNCHED();
}
