/* layer_pool.c - 2x2 max pooling, stride 2, with the argmax kept for backward. Branchless
 * (ReLU outputs make branches unpredictable) and four windows at a time with SSE vectors. */
#include <stdint.h>
#include <string.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "trainer/layers.h"

typedef float v4f __attribute__((vector_size(16)));
typedef int v4i __attribute__((vector_size(16)));

static inline v4f load4(const float *p) {
  v4f v;
  memcpy(&v, p, sizeof v);
  return v;
}
static inline v4f select4(v4i mask, v4f a, v4f b) { /* mask ? a : b */
  return (v4f)((mask & (v4i)a) | (~mask & (v4i)b));
}

/* Even and odd lanes of the pair (a, b); GCC and clang spell the shuffle differently. */
#if defined(__clang__)
#define EVENS(a, b) __builtin_shufflevector(a, b, 0, 2, 4, 6)
#define ODDS(a, b) __builtin_shufflevector(a, b, 1, 3, 5, 7)
#else
#define EVENS(a, b) __builtin_shuffle(a, b, (v4i){0, 2, 4, 6})
#define ODDS(a, b) __builtin_shuffle(a, b, (v4i){1, 3, 5, 7})
#endif

/* One row of windows. Ties keep the first element in row-major order, as a sequential scan
 * with > would: left before right, top before bottom. */
/* Windows [ox, ox + 4) of one row of windows. */
static inline void pool4(float *restrict y, uint8_t *restrict arg, const float *restrict r0,
                         const float *restrict r1, int ox) {
  v4f a = load4(r0 + 2 * ox), b = load4(r0 + 2 * ox + 4);
  v4f c = load4(r1 + 2 * ox), d = load4(r1 + 2 * ox + 4);
  v4f tl = EVENS(a, b), tr = ODDS(a, b);
  v4f bl = EVENS(c, d), br = ODDS(c, d);
  v4i up = tr > tl, down = br > bl; /* -1 where the right one wins */
  v4f m_up = select4(up, tr, tl), m_down = select4(down, br, bl);
  v4i lower = m_down > m_up;
  v4f m = select4(lower, m_down, m_up);
  v4i idx = (lower & (2 - down)) | (~lower & -up); /* masks are -1: -up is 0/1 */
  memcpy(y + ox, &m, sizeof m);
#if defined(__SSE2__)
  __m128i w16 = _mm_packs_epi32((__m128i)idx, (__m128i)idx);
  uint32_t bytes = (uint32_t)_mm_cvtsi128_si32(_mm_packus_epi16(w16, w16));
  memcpy(arg + ox, &bytes, sizeof bytes);
#else
  for (int i = 0; i < 4; i++) arg[ox + i] = (uint8_t)idx[i];
#endif
}

/* One row of windows. Ties keep the first element in row-major order, as a sequential scan
 * with > would: left before right, top before bottom. A row of at least 4 windows ends with
 * an overlapping group of 4 (recomputing a few windows is cheaper than a scalar tail). */
static void pool_row(float *restrict y, uint8_t *restrict arg, const float *restrict r0,
                     const float *restrict r1, int ow) {
  int ox = 0;
  for (; ox + 4 <= ow; ox += 4) pool4(y, arg, r0, r1, ox);
  if (ox < ow && ow >= 4) {
    pool4(y, arg, r0, r1, ow - 4);
    return;
  }
  for (; ox < ow; ox++) {
    float v0 = r0[2 * ox], v1 = r0[2 * ox + 1], v2 = r1[2 * ox], v3 = r1[2 * ox + 1];
    int up = v1 > v0, down = v3 > v2;
    float m_up = up ? v1 : v0, m_down = down ? v3 : v2;
    int lower = m_down > m_up;
    y[ox] = lower ? m_down : m_up;
    arg[ox] = (uint8_t)(lower ? 2 + down : up);
  }
}

void cddp__maxpool2_forward(float *y, uint8_t *arg, const float *x, int n, int c, int h, int w) {
  int oh = h / 2, ow = w / 2;
  for (size_t p = 0; p < (size_t)n * c; p++) {
    const float *xp = x + p * h * w;
    for (int oy = 0; oy < oh; oy++) {
      size_t o = (p * oh + oy) * ow;
      const float *r0 = xp + (size_t)(2 * oy) * w;
      pool_row(y + o, arg + o, r0, r0 + w, ow);
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
        int o = oy * ow + ox, a = ap[o];
        float g = dyp[o];
        if (relu_y) g = yp[o] > 0.0f ? g : 0.0f; /* a select, not a branch */
        dxp[(size_t)(2 * oy + (a >> 1)) * w + 2 * ox + (a & 1)] = g;
      }
    }
  }
}
