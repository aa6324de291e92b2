/* layer_attn.c - causal multi-head self-attention over c_attn's q|k|v output: per (sample,
 * head) S = q k^T / sqrt(hs) (sgemm), a causal softmax (vector exp), y = P v (sgemm); backward
 * in four more sgemm and one pass of softmax backward. */
#include <cblas.h>
#include <math.h>
#include <string.h>

#include "train/layers_gpt.h"
#include "train/vmath.h"

typedef cddp_v4f v4f;

/* Row i of the causal softmax: s[0..i] become probabilities, s[i+1..T) zero. */
static void causal_softmax_row(float *s, int i, int T) {
  int n = i + 1, j = 0;
  v4f mv = cddp__v4_set(-INFINITY);
  for (; j + 4 <= n; j += 4) mv = cddp__v4_max(mv, cddp__v4_load(s + j));
  float m = cddp__v4_hmax(mv);
  for (; j < n; j++) m = s[j] > m ? s[j] : m;
  v4f mm = cddp__v4_set(m), sv = {0};
  j = 0;
  for (; j + 4 <= n; j += 4) {
    v4f e = cddp__v4_exp(cddp__v4_load(s + j) - mm);
    cddp__v4_store(s + j, e);
    sv += e;
  }
  float sum = cddp__v4_hsum(sv);
  for (; j < n; j++) sum += s[j] = expf(s[j] - m);
  float inv = 1.0f / sum;
  v4f iv = cddp__v4_set(inv);
  j = 0;
  for (; j + 4 <= n; j += 4) cddp__v4_store(s + j, cddp__v4_load(s + j) * iv);
  for (; j < n; j++) s[j] *= inv;
  if (n < T) memset(s + n, 0, sizeof(float) * (size_t)(T - n));
}

void cddp__attn_forward(float *y, float *att, const float *qkv, int B, int T, int C, int n_head) {
  int hs = C / n_head, ld = 3 * C;
  float scale = 1.0f / sqrtf((float)hs);
  for (int b = 0; b < B; b++)
    for (int h = 0; h < n_head; h++) {
      const float *q = qkv + (size_t)b * T * ld + (size_t)h * hs, *k = q + C, *v = q + 2 * C;
      float *s = att + ((size_t)b * n_head + h) * T * T;
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, T, hs, scale, q, ld, k, ld, 0.0f,
                  s, T);
      for (int i = 0; i < T; i++) causal_softmax_row(s + (size_t)i * T, i, T);
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, hs, T, 1.0f, s, T, v, ld, 0.0f,
                  y + (size_t)b * T * C + (size_t)h * hs, C);
    }
}

void cddp__attn_backward(float *dqkv, const float *dy, const float *qkv, const float *att,
                         float *scratch, int B, int T, int C, int n_head) {
  int hs = C / n_head, ld = 3 * C;
  float scale = 1.0f / sqrtf((float)hs);
  for (int b = 0; b < B; b++)
    for (int h = 0; h < n_head; h++) {
      size_t off = (size_t)b * T * ld + (size_t)h * hs;
      const float *q = qkv + off, *k = q + C, *v = q + 2 * C;
      float *dq = dqkv + off, *dk = dq + C, *dv = dq + 2 * C, *ds = scratch;
      const float *p = att + ((size_t)b * n_head + h) * T * T;
      const float *dyh = dy + (size_t)b * T * C + (size_t)h * hs;
      /* dP = dy v^T, dv = P^T dy */
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, T, T, hs, 1.0f, dyh, C, v, ld, 0.0f,
                  ds, T);
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, T, hs, T, 1.0f, p, T, dyh, C, 0.0f,
                  dv, ld);
      /* dS = P (dP - sum_j P dP), row by row over the causal part */
      for (int i = 0; i < T; i++) {
        const float *pr = p + (size_t)i * T;
        float *dr = ds + (size_t)i * T;
        int n = i + 1, j = 0;
        v4f acc = {0};
        for (; j + 4 <= n; j += 4) acc += cddp__v4_load(pr + j) * cddp__v4_load(dr + j);
        float dot = cddp__v4_hsum(acc);
        for (; j < n; j++) dot += pr[j] * dr[j];
        v4f dv4 = cddp__v4_set(dot);
        j = 0;
        for (; j + 4 <= n; j += 4)
          cddp__v4_store(dr + j, cddp__v4_load(pr + j) * (cddp__v4_load(dr + j) - dv4));
        for (; j < n; j++) dr[j] = pr[j] * (dr[j] - dot);
        if (n < T) memset(dr + n, 0, sizeof(float) * (size_t)(T - n));
      }
      /* dq = dS k scale, dk = dS^T q scale */
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, T, hs, T, scale, ds, T, k, ld, 0.0f,
                  dq, ld);
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, T, hs, T, scale, ds, T, q, ld, 0.0f,
                  dk, ld);
    }
}
