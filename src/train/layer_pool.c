/* layer_pool.c - 2x2 max pooling, stride 2, with the argmax kept for backward. */
#include <string.h>

#include "train/layers.h"

void cddp__maxpool2_forward(float *y, uint8_t *arg, const float *x, int n, int c, int h, int w) {
  int oh = h / 2, ow = w / 2;
  for (size_t p = 0; p < (size_t)n * c; p++) {
    const float *xp = x + p * h * w;
    float *yp = y + p * oh * ow;
    uint8_t *ap = arg + p * oh * ow;
    for (int oy = 0; oy < oh; oy++) {
      const float *r0 = xp + (size_t)(2 * oy) * w, *r1 = r0 + w;
      for (int ox = 0; ox < ow; ox++) {
        float v[4] = {r0[2 * ox], r0[2 * ox + 1], r1[2 * ox], r1[2 * ox + 1]};
        int best = 0;
        for (int i = 1; i < 4; i++)
          if (v[i] > v[best]) best = i;
        yp[oy * ow + ox] = v[best];
        ap[oy * ow + ox] = (uint8_t)best;
      }
    }
  }
}

void cddp__maxpool2_backward(float *dx, const float *dy, const uint8_t *arg, const float *y,
                             int n, int c, int h, int w, int relu_y) {
  int oh = h / 2, ow = w / 2;
  memset(dx, 0, sizeof(float) * (size_t)n * c * h * w);
  for (size_t p = 0; p < (size_t)n * c; p++) {
    float *dxp = dx + p * h * w;
    const float *dyp = dy + p * oh * ow, *yp = y + p * oh * ow;
    const uint8_t *ap = arg + p * oh * ow;
    for (int oy = 0; oy < oh; oy++) {
      for (int ox = 0; ox < ow; ox++) {
        int o = oy * ow + ox;
        if (relu_y && !(yp[o] > 0.0f)) continue;
        int a = ap[o];
        dxp[(size_t)(2 * oy + (a >> 1)) * w + 2 * ox + (a & 1)] = dyp[o];
      }
    }
  }
}
