/* layers.h - the layers of model.c as plain functions over flat float buffers (row-major,
 * activations [n, features] / NCHW like PyTorch), and the BLAS core selection under them. */
#ifndef CDDP_TRAINER_LAYERS_H
#define CDDP_TRAINER_LAYERS_H

#include <stddef.h>
#include <stdint.h>

/* ---- linear (layer_linear.c): weight [out, in] row-major as torch, bias [out]. */
/* y[n,out] = x[n,in] W^T + b, then ReLU when relu != 0 (bias and ReLU in one pass). */
void cddp__linear_forward(float *y, const float *x, const float *w, const float *b, int n,
                          int in, int out, int relu);
/* Parameter gradients of dy [n,out]: dw [out,in] (+)= dy^T x, db [out] (+)= sum over rows of
 * dy; accumulate=0 overwrites, 1 adds. Any scale must already be in dy. */
void cddp__linear_backward_params(float *dw, float *db, const float *dy, const float *x, int n,
                                  int in, int out, int accumulate);
/* Rows [r0, r1) of dw only: dw[r0:r1, :] (+)= dy[:, r0:r1]^T x (the model calls this per
 * panel of rows so that DDP hears of finished gradients in pieces of about 1 MiB). */
void cddp__linear_backward_weight_rows(float *dw, const float *dy, const float *x, int n, int in,
                                       int out, int r0, int r1, int accumulate);
/* Input gradient dx [n,in] = dy W; when relu_in != 0 the input x was a ReLU output and dx
 * is multiplied by (x > 0) in the same pass (the ReLU's backward). */
void cddp__linear_backward_input(float *dx, const float *dy, const float *w, const float *x,
                                 int n, int in, int out, int relu_in);

/* ---- elementwise (layer_relu.c), vectorised. y may equal x; dx may equal dy. */
void cddp__relu_forward(float *y, const float *x, size_t count);
/* dx = dy * (y > 0), y the ReLU's output. */
void cddp__relu_backward(float *dx, const float *dy, const float *y, size_t count);
/* y[r, :] += b for each of rows rows of cols, then ReLU when relu != 0 (one pass). */
void cddp__bias_rows(float *y, const float *b, int rows, int cols, int relu);
/* y[:count] += b (one scalar), then ReLU when relu != 0. */
void cddp__bias_scalar(float *y, float b, size_t count, int relu);
/* acc[cols] (+)= column sums of x [rows, cols]; accumulate=0 overwrites. */
void cddp__sum_rows(float *acc, const float *x, int rows, int cols, int accumulate);
/* dst[:count] += src[:count] */
void cddp__add_to(float *dst, const float *src, size_t count);
/* Sum of count floats (8 partial sums). */
float cddp__sum(const float *x, size_t count);

/* ---- conv2d (layer_conv.c): stride 1, padding k/2 (k odd, so the output is h x w),
 * weight [c_out, c_in, k, k], bias [c_out], x [n, c_in, h, w], y [n, c_out, h, w].
 * col is scratch of cddp__conv2d_col_floats() floats (im2col of one sample). */
size_t cddp__conv2d_col_floats(int c_in, int h, int w, int k);
void cddp__conv2d_forward(float *y, const float *x, const float *wt, const float *b, float *col,
                          int n, int c_in, int h, int w, int c_out, int k, int relu);
/* dw (+)= and db (+)= as for linear; dx (when not NULL) = the input gradient (overwritten). */
void cddp__conv2d_backward(float *dx, float *dw, float *db, const float *dy, const float *x,
                           const float *wt, float *col, int n, int c_in, int h, int w, int c_out,
                           int k, int accumulate);

/* ---- maxpool 2x2 stride 2 (layer_pool.c): x [n,c,h,w] -> y [n,c,h/2,w/2] (floor; an odd
 * last row/column is dropped, as torch does). arg [n,c,h/2,w/2] keeps each window's argmax
 * (0..3, first maximum in row-major order) for backward. */
void cddp__maxpool2_forward(float *y, uint8_t *arg, const float *x, int n, int c, int h, int w);
/* dx [n,c,h,w] = dy routed to each window's argmax, zero elsewhere. When relu_y != 0 the
 * pool's input was a ReLU output and y (the pool's output) masks dy by y > 0 (the ReLU's
 * backward, fused). */
void cddp__maxpool2_backward(float *dx, const float *dy, const uint8_t *arg, const float *y,
                             int n, int c, int h, int w, int relu_y);

/* ---- softmax cross-entropy (layer_xent.c): logits [n,k], labels y[i] < k. */
/* Writes the softmax probabilities to prob [n,k], returns the SUM of the per-sample losses
 * (log-sum-exp with the row maximum subtracted), counts argmax hits into *n_correct when
 * not NULL. A label >= k contributes NAN (the data loader validates labels). prob may be
 * logits (in place), as for the CUDA table's. */
double cddp__xent_forward(float *prob, const float *logits, const uint8_t *y, int n, int k,
                          int *n_correct);
/* dlogits [n,k] = scale * (prob - onehot(y)): the gradient of scale * (sum of losses). */
void cddp__xent_backward(float *dlogits, const float *prob, const uint8_t *y, int n, int k,
                         float scale);

/* ---- BLAS (layer_blas.c) */
/* OpenBLAS 0.3.21's DYNAMIC_ARCH does not know this CPU model and falls back to its Prescott
 * (SSE3) kernels: 4-5x slower sgemm. When OPENBLAS_CORETYPE is unset and the CPU has AVX-512
 * (or AVX2+FMA), re-runs OpenBLAS's core selection with SkylakeX (or Haswell). Once per
 * process: a constructor of layer_blas.c runs it at load (before main, before any thread);
 * cddp__model_create calls it too (a no-op by then). */
void cddp__blas_select_core(void);

#endif /* CDDP_TRAINER_LAYERS_H */
