/* layer_norm.c - LayerNorm over the last dimension (forward keeps mean and 1/std per row), its
 * backward, and the column sums of bias gradients: loops from layer_norm_body.h for AVX-512,
 * AVX2 and SSE, picked at run time (cddp__cpu_isa). */
#include <math.h>
#include <string.h>

#include "trainer/layers_gpt.h"
#include "trainer/vmath.h"

#define VBODY "trainer/layer_norm_body.h"
#include "trainer/vwidths.h"

void cddp__layernorm_forward(float *y, float *mean, float *rstd, const float *x, const float *w,
                             const float *b, int n, int c) {
  switch (cddp__cpu_isa()) {
    case 2: ln_forward_avx512(y, mean, rstd, x, w, b, n, c); break;
    case 1: ln_forward_avx2(y, mean, rstd, x, w, b, n, c); break;
    default: ln_forward_sse(y, mean, rstd, x, w, b, n, c); break;
  }
}

void cddp__layernorm_backward(float *dx, float *dw, float *db, const float *dy, const float *x,
                              const float *w, const float *mean, const float *rstd, int n, int c,
                              int accumulate) {
  if (!accumulate) {
    memset(dw, 0, sizeof(float) * (size_t)c);
    memset(db, 0, sizeof(float) * (size_t)c);
  }
  switch (cddp__cpu_isa()) {
    case 2: ln_backward_avx512(dx, dw, db, dy, x, w, mean, rstd, n, c); break;
    case 1: ln_backward_avx2(dx, dw, db, dy, x, w, mean, rstd, n, c); break;
    default: ln_backward_sse(dx, dw, db, dy, x, w, mean, rstd, n, c); break;
  }
}

void cddp__colsum(float *acc, const float *x, int n, int c, int accumulate) {
  if (!accumulate) memset(acc, 0, sizeof(float) * (size_t)c);
  switch (cddp__cpu_isa()) {
    case 2: colsum_avx512(acc, x, n, c); break;
    case 1: colsum_avx2(acc, x, n, c); break;
    default: colsum_sse(acc, x, n, c); break;
  }
}
