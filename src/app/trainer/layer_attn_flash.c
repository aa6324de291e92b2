/* layer_attn_flash.c - causal self-attention without the T x T scores: for each row its keys'
 * scores are taken one at a time and folded into a running maximum, sum and weighted sum of
 * v (the online softmax of FlashAttention), all in float32; the backward recomputes each
 * probability from the row's log-sum-exp (FlashAttention-2's backward). The reference the CUDA
 * kernels (cuda/k_flash.cu) are compared against, in the same order of operations per row; the
 * trainer's CPU path keeps layer_attn.c's GEMM form, which is faster here. The backward's bf16
 * form is the reference of the tensor-core kernels (cuda/k_flash_tc.cu). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "comm/reduce.h"
#include "trainer/layers_gpt.h"

/* One (sample, head): q, k, v rows ld floats apart; y rows C apart; lse [T]. acc: hs floats. */
static void flash_head(float *y, float *lse, const float *q, const float *k, const float *v, int T, int hs, int ld,
                       int C, float scale, float *acc) {
  for (int t = 0; t < T; t++) {
    const float *qt = q + (size_t)t * ld;
    float m = -INFINITY, l = 0.0f;
    memset(acc, 0, (size_t)hs * sizeof *acc);
    for (int j = 0; j <= t; j++) {
      const float *kj = k + (size_t)j * ld, *vj = v + (size_t)j * ld;
      float s = 0.0f;
      for (int d = 0; d < hs; d++) s += qt[d] * scale * kj[d];
      float mn = fmaxf(m, s), corr = expf(m - mn), p = expf(s - mn);
      l = l * corr + p;
      for (int d = 0; d < hs; d++) acc[d] = acc[d] * corr + p * vj[d];
      m = mn;
    }
    float *yt = y + (size_t)t * C;
    for (int d = 0; d < hs; d++) yt[d] = acc[d] / l;
    lse[t] = m + logf(l);
  }
}

/* A float rounded to bf16 and back (nearest even): where the tensor cores take their operands. */
static inline float bf(float x) { return cddp__bf16_to_f32(cddp__f32_to_bf16(x)); }

#define TC_TILE 16 /* the tensor cores' tile: keys folded into the running softmax 16 at a time */

/* One (sample, head) of the tensor cores' forward (layers_gpt.h); acc: hs floats. */
static void flash_head_tc(float *y, float *lse, const float *q, const float *k, const float *v, int T, int hs, int ld,
                          int C, float scale, float *acc) {
  for (int t = 0; t < T; t++) {
    const float *qt = q + (size_t)t * ld;
    float m = -INFINITY, l = 0.0f;
    memset(acc, 0, (size_t)hs * sizeof *acc);
    for (int j0 = 0; j0 <= t; j0 += TC_TILE) {
      float s[TC_TILE], mt = -INFINITY;
      int jn = t - j0 + 1 < TC_TILE ? t - j0 + 1 : TC_TILE; /* keys j <= t in this tile */
      for (int c = 0; c < jn; c++) {
        const float *kj = k + (size_t)(j0 + c) * ld;
        float dot = 0.0f;
        for (int d = 0; d < hs; d++) dot += bf(qt[d]) * bf(kj[d]);
        s[c] = dot * scale, mt = fmaxf(mt, s[c]);
      }
      float mn = fmaxf(m, mt), corr = expf(m - mn), sum = 0.0f;
      for (int d = 0; d < hs; d++) acc[d] *= corr;
      for (int c = 0; c < jn; c++) {
        float p = expf(s[c] - mn), pb = bf(p);
        const float *vj = v + (size_t)(j0 + c) * ld;
        sum += p;
        for (int d = 0; d < hs; d++) acc[d] += pb * bf(vj[d]);
      }
      l = l * corr + sum, m = mn;
    }
    float *yt = y + (size_t)t * C;
    for (int d = 0; d < hs; d++) yt[d] = acc[d] / l;
    lse[t] = m + logf(l);
  }
}

typedef void head_fn(float *y, float *lse, const float *q, const float *k, const float *v, int T, int hs, int ld, int C,
                     float scale, float *acc);

/* Every (sample, head) of a forward. */
static void flash_forward(head_fn *head, float *y, float *lse, const float *qkv, int B, int T, int C, int n_head) {
  int hs = C / n_head, ld = 3 * C;
  float scale = 1.0f / sqrtf((float)hs), *acc = malloc((size_t)hs * sizeof *acc);
  if (!acc) abort(); /* hs floats: a reference for tests and the emulated device */
  for (int b = 0; b < B; b++)
    for (int h = 0; h < n_head; h++) {
      const float *q = qkv + (size_t)b * T * ld + (size_t)h * hs;
      head(y + (size_t)b * T * C + (size_t)h * hs, lse + ((size_t)b * n_head + h) * T, q, q + C, q + 2 * C, T, hs, ld,
           C, scale, acc);
    }
  free(acc);
}

void cddp__attn_flash_forward(float *y, float *lse, const float *qkv, int B, int T, int C, int n_head) {
  flash_forward(flash_head, y, lse, qkv, B, T, C, n_head);
}

void cddp__attn_flash_forward_tc(float *y, float *lse, const float *qkv, int B, int T, int C, int n_head) {
  flash_forward(cddp__attn_bf16_bwd_ok(C / n_head) ? flash_head_tc : flash_head, y, lse, qkv, B, T, C, n_head);
}

void cddp__attn_flash_forward_bf16(float *y, float *lse, const uint16_t *qkv, int B, int T, int C, int n_head) {
  size_t n = (size_t)B * T * 3 * C;
  float *wide = malloc(n * sizeof *wide);
  if (!wide) abort();
  cddp__bf16_to_f32_n(wide, qkv, n);
  cddp__attn_flash_forward(y, lse, wide, B, T, C, n_head);
  free(wide);
}

/* One (sample, head): dq, dk, dv rows ld floats apart (zeroed here); dy, y rows C apart. Per
 * query row i: D = dy_i . y_i; per key j <= i: p = exp(q_i k_j scale - lse_i), dp = dy_i . v_j,
 * ds = p (dp - D) scale; dq_i += ds k_j, dk_j += ds q_i, dv_j += p dy_i. r16 (the bf16 form,
 * layers_gpt.h): each product's operands rounded to bf16 where the tensor cores take them, the
 * scale applied to s after its sum and to dq, dk at the end; r16 0 is float32's own order. */
static void flash_head_backward(float *dq, float *dk, float *dv, const float *dy, const float *y, const float *lse,
                                const float *q, const float *k, const float *v, int T, int hs, int ld, int C,
                                float scale, int r16) {
  for (int t = 0; t < T; t++) {
    memset(dq + (size_t)t * ld, 0, (size_t)hs * sizeof *dq);
    memset(dk + (size_t)t * ld, 0, (size_t)hs * sizeof *dk);
    memset(dv + (size_t)t * ld, 0, (size_t)hs * sizeof *dv);
  }
  for (int i = 0; i < T; i++) {
    const float *qi = q + (size_t)i * ld, *dyi = dy + (size_t)i * C, *yi = y + (size_t)i * C;
    float *dqi = dq + (size_t)i * ld, D = 0.0f;
    for (int d = 0; d < hs; d++) D += dyi[d] * yi[d];
    for (int j = 0; j <= i; j++) {
      const float *kj = k + (size_t)j * ld, *vj = v + (size_t)j * ld;
      float *dkj = dk + (size_t)j * ld, *dvj = dv + (size_t)j * ld;
      float s = 0.0f, dp = 0.0f;
      if (r16) {
        for (int d = 0; d < hs; d++) s += bf(qi[d]) * bf(kj[d]);
        for (int d = 0; d < hs; d++) dp += bf(dyi[d]) * bf(vj[d]);
        float p = expf(s * scale - lse[i]), ds = bf(p * (dp - D)), pb = bf(p);
        for (int d = 0; d < hs; d++) dqi[d] += ds * bf(kj[d]), dkj[d] += ds * bf(qi[d]), dvj[d] += pb * bf(dyi[d]);
        continue;
      }
      for (int d = 0; d < hs; d++) s += qi[d] * scale * kj[d];
      for (int d = 0; d < hs; d++) dp += dyi[d] * vj[d];
      float p = expf(s - lse[i]), ds = p * (dp - D) * scale;
      for (int d = 0; d < hs; d++) {
        dqi[d] += ds * kj[d];
        dkj[d] += ds * qi[d];
        dvj[d] += p * dyi[d];
      }
    }
  }
  for (int t = 0; r16 && t < T; t++)
    for (int d = 0; d < hs; d++) dq[(size_t)t * ld + d] *= scale, dk[(size_t)t * ld + d] *= scale;
}

/* Every (sample, head) of the backward; r16 as above. */
static void flash_backward(float *dqkv, const float *dy, const float *qkv, const float *y, const float *lse, int B,
                           int T, int C, int n_head, int r16) {
  int hs = C / n_head, ld = 3 * C;
  float scale = 1.0f / sqrtf((float)hs);
  for (int b = 0; b < B; b++)
    for (int h = 0; h < n_head; h++) {
      size_t off = (size_t)b * T * ld + (size_t)h * hs, yo = (size_t)b * T * C + (size_t)h * hs;
      const float *q = qkv + off;
      float *dq = dqkv + off;
      flash_head_backward(dq, dq + C, dq + 2 * C, dy + yo, y + yo, lse + ((size_t)b * n_head + h) * T, q, q + C,
                          q + 2 * C, T, hs, ld, C, scale, r16);
    }
}

void cddp__attn_flash_backward(float *dqkv, const float *dy, const float *qkv, const float *y, const float *lse,
                               int B, int T, int C, int n_head) {
  flash_backward(dqkv, dy, qkv, y, lse, B, T, C, n_head, 0);
}

void cddp__attn_flash_backward_bf16(float *dqkv, const float *dy, const float *qkv, const float *y, const float *lse,
                                    int B, int T, int C, int n_head) {
  flash_backward(dqkv, dy, qkv, y, lse, B, T, C, n_head, cddp__attn_bf16_bwd_ok(C / n_head));
}

