/* layer_linear.c - fully connected layer (y = x W^T + b, optional fused ReLU) and its backward,
 * three sgemm calls in the orientations OpenBLAS runs fastest for [n, features] activations. */
#include <cblas.h>

#include "train/layers.h"

/* y[n,out] = x[n,in] W^T: RowMajor (N,T) measured as fast as any other orientation here
 * (docs/model.md). beta=0; bias and ReLU follow in one pass over y. */
void cddp__linear_forward(float *y, const float *x, const float *w, const float *b, int n,
                          int in, int out, int relu) {
  if (n <= 0) return;
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, out, in, 1.0f, x, in, w, in, 0.0f, y,
              out);
  for (int i = 0; i < n; i++) {
    float *restrict row = y + (size_t)i * out;
    if (relu) {
      for (int j = 0; j < out; j++) {
        float v = row[j] + b[j];
        row[j] = v > 0.0f ? v : 0.0f;
      }
    } else {
      for (int j = 0; j < out; j++) row[j] += b[j];
    }
  }
}

void cddp__linear_backward_params(float *dw, float *db, const float *dy, const float *x, int n,
                                  int in, int out, int accumulate) {
  if (n <= 0) {
    if (!accumulate) {
      for (size_t i = 0; i < (size_t)out * in; i++) dw[i] = 0.0f;
      for (int j = 0; j < out; j++) db[j] = 0.0f;
    }
    return;
  }
  /* dw[out,in] (+)= dy^T[out,n] x[n,in]; beta=1 skips OpenBLAS's scaling pass over dw. */
  cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, out, in, n, 1.0f, dy, out, x, in,
              accumulate ? 1.0f : 0.0f, dw, in);
  /* db: column sums of dy, row after row (contiguous, vectorised). */
  float *restrict d = db;
  int i0 = 0;
  if (!accumulate) {
    for (int j = 0; j < out; j++) d[j] = dy[j];
    i0 = 1;
  }
  for (int i = i0; i < n; i++) {
    const float *restrict row = dy + (size_t)i * out;
    for (int j = 0; j < out; j++) d[j] += row[j];
  }
}

void cddp__linear_backward_input(float *dx, const float *dy, const float *w, const float *x,
                                 int n, int in, int out, int relu_in) {
  if (n <= 0) return;
  /* dx[n,in] = dy[n,out] W[out,in] */
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, in, out, 1.0f, dy, out, w, in, 0.0f,
              dx, in);
  if (relu_in) cddp__relu_backward(dx, dx, x, (size_t)n * in);
}
