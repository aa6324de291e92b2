/* layer_relu.c - ReLU forward and backward over a flat buffer (the model fuses them into the
 * linear/pool passes where it can; these are the stand-alone versions). */
#include "train/layers.h"

void cddp__relu_forward(float *y, const float *x, size_t count) {
  for (size_t i = 0; i < count; i++) y[i] = x[i] > 0.0f ? x[i] : 0.0f;
}

void cddp__relu_backward(float *dx, const float *dy, const float *y, size_t count) {
  for (size_t i = 0; i < count; i++) dx[i] = y[i] > 0.0f ? dy[i] : 0.0f;
}
