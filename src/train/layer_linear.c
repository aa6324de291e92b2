/* layer_linear.c - fully connected layer (y = x W^T + b, optional fused ReLU) and its backward,
 * three sgemm calls in the orientations OpenBLAS runs fastest for [n, features] activations. */
#include <cblas.h>
#include <string.h>

#include "train/layers.h"

/* y[n,out] = x[n,in] W^T: RowMajor (N,T) measured as fast as any other orientation here
 * (docs/model.md). beta=0; bias and ReLU follow in one pass over y. */
void cddp__linear_forward(float *y, const float *x, const float *w, const float *b, int n,
                          int in, int out, int relu) {
  if (n <= 0) return;
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, out, in, 1.0f, x, in, w, in, 0.0f, y,
              out);
  cddp__bias_rows(y, b, n, out, relu);
}

void cddp__linear_backward_params(float *dw, float *db, const float *dy, const float *x, int n,
                                  int in, int out, int accumulate) {
  if (n <= 0) {
    if (!accumulate) {
      memset(dw, 0, sizeof(float) * (size_t)out * in);
      memset(db, 0, sizeof(float) * (size_t)out);
    }
    return;
  }
  /* dw[out,in] (+)= dy^T[out,n] x[n,in]; beta=1 skips OpenBLAS's scaling pass over dw. */
  cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, out, in, n, 1.0f, dy, out, x, in,
              accumulate ? 1.0f : 0.0f, dw, in);
  cddp__sum_rows(db, dy, n, out, accumulate);
}

void cddp__linear_backward_input(float *dx, const float *dy, const float *w, const float *x,
                                 int n, int in, int out, int relu_in) {
  if (n <= 0) return;
  /* dx[n,in] = dy[n,out] W[out,in] */
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, in, out, 1.0f, dy, out, w, in, 0.0f,
              dx, in);
  if (relu_in) cddp__relu_backward(dx, dx, x, (size_t)n * in);
}
