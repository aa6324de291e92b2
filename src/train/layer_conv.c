/* layer_conv.c - 2-D convolution, stride 1, padding k/2 (k odd), by im2col of one sample at a
 * time and one sgemm per sample (weight [c_out, c_in*k*k] times columns [c_in*k*k, h*w]). */
#include <cblas.h>
#include <string.h>

#include "train/layers.h"

size_t cddp__conv2d_col_floats(int c_in, int h, int w, int k) {
  return (size_t)c_in * k * k * h * w;
}

/* col[(ci*k + ki)*k + kj][oy*w + ox] = x[ci][oy + ki - p][ox + kj - p], zero outside. */
static void im2col(float *restrict col, const float *restrict x, int c_in, int h, int w, int k) {
  int p = k / 2;
  for (int ci = 0; ci < c_in; ci++) {
    const float *xc = x + (size_t)ci * h * w;
    for (int ki = 0; ki < k; ki++) {
      for (int kj = 0; kj < k; kj++) {
        float *row = col + ((size_t)(ci * k + ki) * k + kj) * h * w;
        int dx = kj - p;
        int x0 = dx < 0 ? -dx : 0, x1 = dx > 0 ? w - dx : w; /* valid output columns */
        for (int oy = 0; oy < h; oy++) {
          int iy = oy + ki - p;
          float *r = row + (size_t)oy * w;
          if (iy < 0 || iy >= h || x0 >= x1) {
            memset(r, 0, sizeof(float) * (size_t)w);
            continue;
          }
          const float *xr = xc + (size_t)iy * w;
          for (int ox = 0; ox < x0; ox++) r[ox] = 0.0f;
          for (int ox = x0; ox < x1; ox++) r[ox] = xr[ox + dx];
          for (int ox = x1; ox < w; ox++) r[ox] = 0.0f;
        }
      }
    }
  }
}

/* The adjoint of im2col: dx (zeroed first) gathers every column entry back to its pixel. */
static void col2im(float *restrict dx, const float *restrict col, int c_in, int h, int w, int k) {
  int p = k / 2;
  memset(dx, 0, sizeof(float) * (size_t)c_in * h * w);
  for (int ci = 0; ci < c_in; ci++) {
    float *xc = dx + (size_t)ci * h * w;
    for (int ki = 0; ki < k; ki++) {
      for (int kj = 0; kj < k; kj++) {
        const float *row = col + ((size_t)(ci * k + ki) * k + kj) * h * w;
        int ddx = kj - p;
        int x0 = ddx < 0 ? -ddx : 0, x1 = ddx > 0 ? w - ddx : w;
        for (int oy = 0; oy < h; oy++) {
          int iy = oy + ki - p;
          if (iy < 0 || iy >= h) continue;
          const float *r = row + (size_t)oy * w;
          float *xr = xc + (size_t)iy * w;
          for (int ox = x0; ox < x1; ox++) xr[ox + ddx] += r[ox];
        }
      }
    }
  }
}

void cddp__conv2d_forward(float *y, const float *x, const float *wt, const float *b, float *col,
                          int n, int c_in, int h, int w, int c_out, int k, int relu) {
  int hw = h * w, ckk = c_in * k * k;
  for (int s = 0; s < n; s++) {
    const float *xs = x + (size_t)s * c_in * hw;
    float *ys = y + (size_t)s * c_out * hw;
    im2col(col, xs, c_in, h, w, k);
    /* ys[c_out, hw] = W[c_out, ckk] col[ckk, hw] */
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, c_out, hw, ckk, 1.0f, wt, ckk, col, hw,
                0.0f, ys, hw);
    for (int c = 0; c < c_out; c++) cddp__bias_scalar(ys + (size_t)c * hw, b[c], (size_t)hw, relu);
  }
}

void cddp__conv2d_backward(float *dx, float *dw, float *db, const float *dy, const float *x,
                           const float *wt, float *col, int n, int c_in, int h, int w, int c_out,
                           int k, int accumulate) {
  int hw = h * w, ckk = c_in * k * k;
  if (!accumulate) {
    memset(dw, 0, sizeof(float) * (size_t)c_out * ckk);
    memset(db, 0, sizeof(float) * (size_t)c_out);
  }
  for (int s = 0; s < n; s++) {
    const float *dys = dy + (size_t)s * c_out * hw;
    im2col(col, x + (size_t)s * c_in * hw, c_in, h, w, k);
    /* dw[c_out, ckk] += dys[c_out, hw] col^T[hw, ckk] */
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, c_out, ckk, hw, 1.0f, dys, hw, col, hw,
                1.0f, dw, ckk);
    for (int c = 0; c < c_out; c++) db[c] += cddp__sum(dys + (size_t)c * hw, (size_t)hw);
    if (dx) {
      /* dcol[ckk, hw] = W^T[ckk, c_out] dys[c_out, hw], into col (no longer needed). */
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, ckk, hw, c_out, 1.0f, wt, ckk, dys, hw,
                  0.0f, col, hw);
      col2im(dx + (size_t)s * c_in * hw, col, c_in, h, w, k);
    }
  }
}
