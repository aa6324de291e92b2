/* layer_gelu.c - GELU, tanh approximation (GPT-2's; torch's approximate='tanh'), fused with
 * the bias of the linear layer before it; tanh from vmath.h's vector exp. */
#include <math.h>

#include "train/layers_gpt.h"
#include "train/vmath.h"

typedef cddp_v4f v4f;
#define K0 0.7978845608028654f /* sqrt(2/pi) */
#define K1 0.044715f

static inline v4f gelu4(v4f x) {
  v4f t = cddp__v4_tanh(K0 * (x + K1 * x * x * x));
  return 0.5f * x * (1.0f + t);
}
static inline float gelu1(float x) {
  return 0.5f * x * (1.0f + tanhf(K0 * (x + K1 * x * x * x)));
}

void cddp__bias_gelu_forward(float *y, float *x, const float *b, int n, int c) {
  for (int r = 0; r < n; r++) {
    float *xr = x + (size_t)r * c, *yr = y + (size_t)r * c;
    int j = 0;
    for (; j + 4 <= c; j += 4) {
      v4f v = cddp__v4_load(xr + j) + cddp__v4_load(b + j);
      cddp__v4_store(xr + j, v);
      cddp__v4_store(yr + j, gelu4(v));
    }
    for (; j < c; j++) {
      xr[j] += b[j];
      yr[j] = gelu1(xr[j]);
    }
  }
}

/* d/dx: (1 + t)/2 + x/2 (1 - t^2) K0 (1 + 3 K1 x^2), t = tanh(K0 (x + K1 x^3)) */
void cddp__gelu_backward(float *d, const float *x, size_t count) {
  size_t i = 0;
  for (; i + 4 <= count; i += 4) {
    v4f v = cddp__v4_load(x + i);
    v4f t = cddp__v4_tanh(K0 * (v + K1 * v * v * v));
    v4f g = 0.5f * (1.0f + t) + 0.5f * v * (1.0f - t * t) * K0 * (1.0f + 3.0f * K1 * v * v);
    cddp__v4_store(d + i, cddp__v4_load(d + i) * g);
  }
  for (; i < count; i++) {
    float v = x[i], t = tanhf(K0 * (v + K1 * v * v * v));
    d[i] *= 0.5f * (1.0f + t) + 0.5f * v * (1.0f - t * t) * K0 * (1.0f + 3.0f * K1 * v * v);
  }
}
