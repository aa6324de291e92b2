/* layer_embed.c - token + position embeddings, the output head tied to the token embedding
 * (logits = h wte^T, two sgemm for its backward), and a vectorised softmax cross-entropy. */
#include <math.h>
#include <string.h>

#include "trainer/gemm.h"
#include "trainer/layers.h"
#include "trainer/layers_gpt.h"
#include "trainer/vmath.h"

typedef cddp_v4f v4f;

void cddp__embed_forward(float *x, const uint8_t *tok, const float *wte, const float *wpe, int B,
                         int T, int C) {
  for (int b = 0; b < B; b++)
    for (int t = 0; t < T; t++) {
      float *xr = x + ((size_t)b * T + t) * C;
      const float *e = wte + (size_t)tok[(size_t)b * T + t] * C, *p = wpe + (size_t)t * C;
      int j = 0;
      for (; j + 4 <= C; j += 4) cddp__v4_store(xr + j, cddp__v4_load(e + j) + cddp__v4_load(p + j));
      for (; j < C; j++) xr[j] = e[j] + p[j];
    }
}

void cddp__embed_backward(float *dwte, float *dwpe, const float *dx, const uint8_t *tok, int B,
                          int T, int C, int accumulate) {
  if (!accumulate) memset(dwpe, 0, sizeof(float) * (size_t)T * C);
  for (int b = 0; b < B; b++)
    for (int t = 0; t < T; t++) {
      const float *d = dx + ((size_t)b * T + t) * C;
      cddp__add_to(dwte + (size_t)tok[(size_t)b * T + t] * C, d, (size_t)C);
      cddp__add_to(dwpe + (size_t)t * C, d, (size_t)C);
    }
}

void cddp__head_forward(float *logits, const float *h, const float *wte, int n, int C, int V) {
  if (n <= 0) return;
  cddp__gemm(CblasNoTrans, CblasTrans, n, V, C, 1.0f, h, C, wte, C, 0.0f, logits,
              V);
}

void cddp__head_backward(float *dh, float *dwte, const float *dlogits, const float *h,
                         const float *wte, int n, int C, int V, int accumulate) {
  if (n <= 0) {
    if (!accumulate) memset(dwte, 0, sizeof(float) * (size_t)V * C);
    return;
  }
  cddp__gemm(CblasTrans, CblasNoTrans, V, C, n, 1.0f, dlogits, V, h, C,
              accumulate ? 1.0f : 0.0f, dwte, C);
  cddp__gemm(CblasNoTrans, CblasNoTrans, n, C, V, 1.0f, dlogits, V, wte, C, 0.0f,
              dh, C);
}

double cddp__softmax_xent(float *prob, const float *z, const uint8_t *y, int n, int V) {
  double loss = 0.0;
  for (int i = 0; i < n; i++) {
    const float *zr = z + (size_t)i * V;
    float *p = prob + (size_t)i * V;
    float target = y[i] < V ? zr[y[i]] : NAN; /* read before prob may overwrite z */
    float zmax = -INFINITY;
    v4f mv = cddp__v4_set(-INFINITY);
    int j = 0;
    for (; j + 4 <= V; j += 4) mv = cddp__v4_max(mv, cddp__v4_load(zr + j));
    zmax = cddp__v4_hmax(mv);
    for (; j < V; j++) zmax = zr[j] > zmax ? zr[j] : zmax;
    v4f zm = cddp__v4_set(zmax), sv = {0};
    float sum = 0.0f;
    j = 0;
    for (; j + 4 <= V; j += 4) {
      v4f e = cddp__v4_exp(cddp__v4_load(zr + j) - zm);
      cddp__v4_store(p + j, e);
      sv += e;
    }
    sum = cddp__v4_hsum(sv);
    for (; j < V; j++) sum += p[j] = expf(zr[j] - zmax);
    v4f inv = cddp__v4_set(1.0f / sum);
    j = 0;
    for (; j + 4 <= V; j += 4) cddp__v4_store(p + j, cddp__v4_load(p + j) * inv);
    for (; j < V; j++) p[j] *= 1.0f / sum;
    /* -log softmax(z)[y] = log(sum exp(z - zmax)) - (z[y] - zmax) */
    loss += log((double)sum) - (double)(target - zmax);
  }
  return loss;
}
