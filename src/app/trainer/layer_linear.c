/* layer_linear.c - fully connected layer (y = x W^T + b, optional fused ReLU) and its backward,
 * three sgemm calls; the forward's form is chosen per shape by measurement (linear_form.c). */
#include <string.h>

#include "trainer/gemm.h"
#include "trainer/layers.h"
#include "trainer/linear_form.h"

/* y[n,out] = x[n,in] W^T + b, then ReLU: in the form measured faster for the shape
 * (linear_form.c). */
void cddp__linear_forward(float *y, const float *x, const float *w, const float *b, int n,
                          int in, int out, int relu) {
  cddp__linear_xwt(y, x, w, b, NULL, n, in, out, relu);
}

void cddp__linear_backward_weight_rows(float *dw, const float *dy, const float *x, int n, int in,
                                       int out, int r0, int r1, int accumulate) {
  if (r1 <= r0) return;
  float *rows = dw + (size_t)r0 * in;
  if (n <= 0) {
    if (!accumulate) memset(rows, 0, sizeof(float) * (size_t)(r1 - r0) * in);
    return;
  }
  /* dw[r0:r1, :] (+)= dy[:, r0:r1]^T x: RowMajor (T,N) measured fastest (docs/model.md);
   * beta=1 skips OpenBLAS's zeroing pass over dw. */
  cddp__gemm(CblasTrans, CblasNoTrans, r1 - r0, in, n, 1.0f, dy + r0, out, x, in,
              accumulate ? 1.0f : 0.0f, rows, in);
}

void cddp__linear_backward_params(float *dw, float *db, const float *dy, const float *x, int n,
                                  int in, int out, int accumulate) {
  cddp__sum_rows(db, dy, n > 0 ? n : 0, out, accumulate);
  cddp__linear_backward_weight_rows(dw, dy, x, n, in, out, 0, out, accumulate);
}

void cddp__linear_backward_input(float *dx, const float *dy, const float *w, const float *x,
                                 int n, int in, int out, int relu_in) {
  if (n <= 0) return;
  /* dx[n,in] = dy[n,out] W[out,in] */
  cddp__gemm(CblasNoTrans, CblasNoTrans, n, in, out, 1.0f, dy, out, w, in, 0.0f,
              dx, in);
  if (relu_in) cddp__relu_backward(dx, dx, x, (size_t)n * in);
}
