/* layer_relu.c - the elementwise passes around the GEMMs: ReLU forward/backward, bias (+ReLU)
 * over rows, column sums for bias gradients. Written with GCC vector types (8 floats) so they
 * vectorise at -O2 for any x86-64 (SSE) (a branchy scalar ReLU cost 10% of an MLP step). */
#include <string.h>

#include "trainer/layers.h"

typedef float v4f __attribute__((vector_size(16)));
typedef int v4i __attribute__((vector_size(16)));
/* two SSE registers' worth: 32-byte GCC vectors without AVX would be scalarised */
typedef struct { v4f lo, hi; } v8f;

static inline v8f load8(const float *p) {
  v8f v;
  memcpy(&v, p, sizeof v);
  return v;
}
static inline void store8(float *p, v8f v) { memcpy(p, &v, sizeof v); }
static inline v8f add8(v8f a, v8f b) { return (v8f){a.lo + b.lo, a.hi + b.hi}; }
/* max(v, 0) without a branch: the mask of v > 0 keeps v's bits (NaN and -0 become +0). */
static inline v4f relu4(v4f v) { return (v4f)((v4i)v & (v4i)(v > (v4f){0})); }
static inline v8f relu8(v8f v) { return (v8f){relu4(v.lo), relu4(v.hi)}; }
/* d where y > 0, else 0 */
static inline v8f where_pos8(v8f d, v8f y) {
  return (v8f){(v4f)((v4i)d.lo & (v4i)(y.lo > (v4f){0})), (v4f)((v4i)d.hi & (v4i)(y.hi > (v4f){0}))};
}

void cddp__relu_forward(float *y, const float *x, size_t count) {
  size_t i = 0;
  for (; i + 8 <= count; i += 8) store8(y + i, relu8(load8(x + i)));
  for (; i < count; i++) y[i] = x[i] > 0.0f ? x[i] : 0.0f;
}

void cddp__relu_backward(float *dx, const float *dy, const float *y, size_t count) {
  size_t i = 0;
  for (; i + 8 <= count; i += 8) store8(dx + i, where_pos8(load8(dy + i), load8(y + i)));
  for (; i < count; i++) dx[i] = y[i] > 0.0f ? dy[i] : 0.0f;
}

void cddp__bias_rows(float *y, const float *b, int rows, int cols, int relu) {
  for (int r = 0; r < rows; r++) {
    float *row = y + (size_t)r * cols;
    int j = 0;
    if (relu) {
      for (; j + 8 <= cols; j += 8) store8(row + j, relu8(add8(load8(row + j), load8(b + j))));
      for (; j < cols; j++) {
        float v = row[j] + b[j];
        row[j] = v > 0.0f ? v : 0.0f;
      }
    } else {
      for (; j + 8 <= cols; j += 8) store8(row + j, add8(load8(row + j), load8(b + j)));
      for (; j < cols; j++) row[j] += b[j];
    }
  }
}

void cddp__bias_scalar(float *y, float b, size_t count, int relu) {
  v8f bv = {{b, b, b, b}, {b, b, b, b}};
  size_t i = 0;
  if (relu) {
    for (; i + 8 <= count; i += 8) store8(y + i, relu8(add8(load8(y + i), bv)));
    for (; i < count; i++) y[i] = y[i] + b > 0.0f ? y[i] + b : 0.0f;
  } else {
    for (; i + 8 <= count; i += 8) store8(y + i, add8(load8(y + i), bv));
    for (; i < count; i++) y[i] += b;
  }
}

void cddp__sum_rows(float *acc, const float *x, int rows, int cols, int accumulate) {
  if (!accumulate) memset(acc, 0, sizeof(float) * (size_t)cols);
  int j = 0;
  /* 32 columns at a time stay in registers across all rows */
  for (; j + 32 <= cols; j += 32) {
    v8f a0 = load8(acc + j), a1 = load8(acc + j + 8), a2 = load8(acc + j + 16),
        a3 = load8(acc + j + 24);
    for (int r = 0; r < rows; r++) {
      const float *p = x + (size_t)r * cols + j;
      a0 = add8(a0, load8(p)), a1 = add8(a1, load8(p + 8));
      a2 = add8(a2, load8(p + 16)), a3 = add8(a3, load8(p + 24));
    }
    store8(acc + j, a0);
    store8(acc + j + 8, a1);
    store8(acc + j + 16, a2);
    store8(acc + j + 24, a3);
  }
  for (; j < cols; j++) {
    float a = acc[j];
    for (int r = 0; r < rows; r++) a += x[(size_t)r * cols + j];
    acc[j] = a;
  }
}

void cddp__add_to(float *dst, const float *src, size_t count) {
  size_t i = 0;
  for (; i + 8 <= count; i += 8) store8(dst + i, add8(load8(dst + i), load8(src + i)));
  for (; i < count; i++) dst[i] += src[i];
}

float cddp__sum(const float *x, size_t count) {
  v8f a = {{0}, {0}};
  size_t i = 0;
  for (; i + 8 <= count; i += 8) a = add8(a, load8(x + i));
  v4f t = a.lo + a.hi;
  float s = t[0] + t[1] + t[2] + t[3];
  for (; i < count; i++) s += x[i];
  return s;
}
