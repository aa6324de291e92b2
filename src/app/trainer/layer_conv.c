/* layer_conv.c - 2-D convolution, stride 1, padding k/2 (k odd), by im2col of one sample at a
 * time and one sgemm per sample (weight [c_out, c_in*k*k] times columns [c_in*k*k, h*w]). */
#include <stddef.h>
#include <string.h>

#include "trainer/gemm.h"
#include "trainer/layers.h"

size_t cddp__conv2d_col_floats(int c_in, int h, int w, int k) {
  return (size_t)c_in * k * k * h * w;
}

/* The rows of the output that tap row ki / column kj of the kernel see the input shifted by
 * (ki - p, kj - p): one contiguous copy covers all of them, and the few columns that copy
 * wraps around the image edge are padding, zeroed after it. */
typedef struct {
  int oy0, oy1, x0, x1; /* valid output rows and columns */
  ptrdiff_t shift;      /* input index - column index */
  size_t a, b;          /* the contiguous column range [a, b) */
} tap_t;

static int tap(tap_t *t, int h, int w, int k, int ki, int kj) {
  int p = k / 2, dy = ki - p, dx = kj - p;
  t->oy0 = dy < 0 ? -dy : 0, t->oy1 = dy > 0 ? h - dy : h;
  t->x0 = dx < 0 ? -dx : 0, t->x1 = dx > 0 ? w - dx : w;
  if (t->oy1 <= t->oy0 || t->x1 <= t->x0) return 0;
  t->shift = (ptrdiff_t)dy * w + dx;
  t->a = (size_t)t->oy0 * w + t->x0;
  t->b = (size_t)(t->oy1 - 1) * w + t->x1;
  return 1;
}

static void zero_edges(float *row, const tap_t *t, int w) {
  if (t->x0 == 0 && t->x1 == w) return;
  for (int oy = t->oy0; oy < t->oy1; oy++) {
    float *r = row + (size_t)oy * w;
    for (int ox = 0; ox < t->x0; ox++) r[ox] = 0.0f;
    for (int ox = t->x1; ox < w; ox++) r[ox] = 0.0f;
  }
}

/* col[(ci*k + ki)*k + kj][oy*w + ox] = x[ci][oy + ki - p][ox + kj - p], zero outside. */
static void im2col(float *restrict col, const float *restrict x, int c_in, int h, int w, int k) {
  size_t hw = (size_t)h * w;
  for (int ci = 0; ci < c_in; ci++) {
    const float *xc = x + ci * hw;
    for (int ki = 0; ki < k; ki++) {
      for (int kj = 0; kj < k; kj++) {
        float *row = col + ((size_t)(ci * k + ki) * k + kj) * hw;
        tap_t t;
        if (!tap(&t, h, w, k, ki, kj)) {
          memset(row, 0, sizeof(float) * hw);
          continue;
        }
        memset(row, 0, sizeof(float) * (size_t)t.oy0 * w);
        memset(row + (size_t)t.oy1 * w, 0, sizeof(float) * (size_t)(h - t.oy1) * w);
        memcpy(row + t.a, xc + t.a + t.shift, sizeof(float) * (t.b - t.a));
        zero_edges(row, &t, w);
      }
    }
  }
}

/* The adjoint of im2col: dx (zeroed first) gathers every column entry back to its pixel. The
 * padding columns of col are zeroed first (col is scratch) so one contiguous add per tap is
 * right. */
static void col2im(float *restrict dx, float *restrict col, int c_in, int h, int w, int k) {
  size_t hw = (size_t)h * w;
  memset(dx, 0, sizeof(float) * c_in * hw);
  for (int ci = 0; ci < c_in; ci++) {
    float *xc = dx + ci * hw;
    for (int ki = 0; ki < k; ki++) {
      for (int kj = 0; kj < k; kj++) {
        float *row = col + ((size_t)(ci * k + ki) * k + kj) * hw;
        tap_t t;
        if (!tap(&t, h, w, k, ki, kj)) continue;
        zero_edges(row, &t, w);
        cddp__add_to(xc + t.a + t.shift, row + t.a, t.b - t.a);
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
    cddp__gemm(CblasNoTrans, CblasNoTrans, c_out, hw, ckk, 1.0f, wt, ckk, col, hw,
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
    cddp__gemm(CblasNoTrans, CblasTrans, c_out, ckk, hw, 1.0f, dys, hw, col, hw,
                1.0f, dw, ckk);
    for (int c = 0; c < c_out; c++) db[c] += cddp__sum(dys + (size_t)c * hw, (size_t)hw);
    if (dx) {
      /* dcol[ckk, hw] = W^T[ckk, c_out] dys[c_out, hw], into col (no longer needed). */
      cddp__gemm(CblasTrans, CblasNoTrans, ckk, hw, c_out, 1.0f, wt, ckk, dys, hw,
                  0.0f, col, hw);
      col2im(dx + (size_t)s * c_in * hw, col, c_in, h, w, k);
    }
  }
}
