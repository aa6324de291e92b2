/* layer_norm.c - LayerNorm over the last dimension (forward keeps mean and 1/std per row) and
 * its backward; SSE vectors via vmath.h. */
#include <math.h>
#include <string.h>

#include "train/layers_gpt.h"
#include "train/vmath.h"

typedef cddp_v4f v4f;
#define LD cddp__v4_load
#define ST cddp__v4_store

void cddp__layernorm_forward(float *y, float *mean, float *rstd, const float *x, const float *w,
                             const float *b, int n, int c) {
  for (int r = 0; r < n; r++) {
    const float *xr = x + (size_t)r * c;
    float *yr = y + (size_t)r * c;
    v4f s = {0}, s2 = {0};
    int j = 0;
    for (; j + 4 <= c; j += 4) s += LD(xr + j);
    float m = cddp__v4_hsum(s);
    for (; j < c; j++) m += xr[j];
    m /= (float)c;
    v4f mv = cddp__v4_set(m);
    j = 0;
    for (; j + 4 <= c; j += 4) {
      v4f d = LD(xr + j) - mv;
      s2 += d * d;
    }
    float var = cddp__v4_hsum(s2);
    for (; j < c; j++) var += (xr[j] - m) * (xr[j] - m);
    var /= (float)c;
    float rs = 1.0f / sqrtf(var + CDDP_LN_EPS);
    v4f rv = cddp__v4_set(rs);
    j = 0;
    for (; j + 4 <= c; j += 4) ST(yr + j, (LD(xr + j) - mv) * rv * LD(w + j) + LD(b + j));
    for (; j < c; j++) yr[j] = (xr[j] - m) * rs * w[j] + b[j];
    mean[r] = m, rstd[r] = rs;
  }
}

/* With xhat = (x - mean) rstd and g = dy w: dx = rstd (g - mean(g) - xhat mean(g xhat)),
 * dw = sum over rows of dy xhat, db = sum of dy. */
void cddp__layernorm_backward(float *dx, float *dw, float *db, const float *dy, const float *x,
                              const float *w, const float *mean, const float *rstd, int n, int c,
                              int accumulate) {
  if (!accumulate) {
    memset(dw, 0, sizeof(float) * (size_t)c);
    memset(db, 0, sizeof(float) * (size_t)c);
  }
  for (int r = 0; r < n; r++) {
    const float *xr = x + (size_t)r * c, *dyr = dy + (size_t)r * c;
    float *dxr = dx + (size_t)r * c;
    v4f mv = cddp__v4_set(mean[r]), rv = cddp__v4_set(rstd[r]);
    v4f sg = {0}, sgx = {0};
    int j = 0;
    for (; j + 4 <= c; j += 4) {
      v4f xh = (LD(xr + j) - mv) * rv, d = LD(dyr + j), g = d * LD(w + j);
      sg += g, sgx += g * xh;
      ST(dw + j, LD(dw + j) + d * xh);
      ST(db + j, LD(db + j) + d);
    }
    float a = cddp__v4_hsum(sg), bx = cddp__v4_hsum(sgx);
    for (; j < c; j++) {
      float xh = (xr[j] - mean[r]) * rstd[r], g = dyr[j] * w[j];
      a += g, bx += g * xh;
      dw[j] += dyr[j] * xh;
      db[j] += dyr[j];
    }
    a /= (float)c, bx /= (float)c;
    v4f av = cddp__v4_set(a), bv = cddp__v4_set(bx);
    j = 0;
    for (; j + 4 <= c; j += 4) {
      v4f xh = (LD(xr + j) - mv) * rv, g = LD(dyr + j) * LD(w + j);
      ST(dxr + j, LD(dxr + j) + rv * (g - av - xh * bv));
    }
    for (; j < c; j++) {
      float xh = (xr[j] - mean[r]) * rstd[r], g = dyr[j] * w[j];
      dxr[j] += rstd[r] * (g - a - xh * bx);
    }
  }
}
