/* vmath.h - exp and tanh over 4 floats (GCC vector types, SSE at -O2 on any x86-64) for the
 * GPT's softmaxes and GELU: Cephes' expf polynomial (relative error ~1e-7), no libm call. */
#ifndef CDDP_TRAINER_VMATH_H
#define CDDP_TRAINER_VMATH_H

#include <string.h>

typedef float cddp_v4f __attribute__((vector_size(16)));
typedef int cddp_v4i __attribute__((vector_size(16)));

static inline cddp_v4f cddp__v4_load(const float *p) {
  cddp_v4f v;
  memcpy(&v, p, sizeof v);
  return v;
}
static inline void cddp__v4_store(float *p, cddp_v4f v) { memcpy(p, &v, sizeof v); }
static inline cddp_v4f cddp__v4_set(float x) { return (cddp_v4f){x, x, x, x}; }
static inline float cddp__v4_hsum(cddp_v4f v) { return (v[0] + v[1]) + (v[2] + v[3]); }
/* a where mask (all ones), else b */
static inline cddp_v4f cddp__v4_select(cddp_v4i mask, cddp_v4f a, cddp_v4f b) {
  return (cddp_v4f)((mask & (cddp_v4i)a) | (~mask & (cddp_v4i)b));
}
static inline cddp_v4f cddp__v4_max(cddp_v4f a, cddp_v4f b) { return cddp__v4_select(a > b, a, b); }
static inline cddp_v4f cddp__v4_min(cddp_v4f a, cddp_v4f b) { return cddp__v4_select(a < b, a, b); }
static inline float cddp__v4_hmax(cddp_v4f v) {
  float a = v[0] > v[1] ? v[0] : v[1], b = v[2] > v[3] ? v[2] : v[3];
  return a > b ? a : b;
}

/* e^x: x clamped to [-87.3, 88.3] (so 2^n stays a normal float), n = round(x / ln 2),
 * r = x - n ln 2 in two parts, e^r by a degree-6 polynomial, times 2^n through the exponent. */
static inline cddp_v4f cddp__v4_exp(cddp_v4f x) {
  x = cddp__v4_max(cddp__v4_min(x, cddp__v4_set(88.3f)), cddp__v4_set(-87.3f));
  cddp_v4f t = x * 1.44269504088896341f + 0.5f;
  cddp_v4i n = __builtin_convertvector(t, cddp_v4i); /* truncates: floor for t >= 0 */
  cddp_v4f nf = __builtin_convertvector(n, cddp_v4f);
  n += (cddp_v4i)(nf > t); /* -1 where truncation went up (t < 0, not whole) */
  nf = __builtin_convertvector(n, cddp_v4f);
  cddp_v4f r = x - nf * 0.693359375f - nf * -2.12194440e-4f;
  cddp_v4f p = cddp__v4_set(1.9875691500e-4f);
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  cddp_v4i bits = (n + 127) << 23;
  return p * (cddp_v4f)bits;
}

/* The same e^x for a GCC vector of any width (a statement expression, so it inlines into
 * functions compiled for AVX2 or AVX-512 with their own vector width). */
#define CDDP_VEXP(xin)                                                                    \
  ({                                                                                      \
    __typeof__(xin) x_ = (xin), hi_ = x_ - x_ + 88.3f, lo_ = x_ - x_ - 87.3f;             \
    __typeof__(x_ > x_) m_ = x_ < hi_;                                                    \
    x_ = (__typeof__(x_))((m_ & (__typeof__(m_))x_) | (~m_ & (__typeof__(m_))hi_));      \
    m_ = x_ > lo_;                                                                        \
    x_ = (__typeof__(x_))((m_ & (__typeof__(m_))x_) | (~m_ & (__typeof__(m_))lo_));      \
    __typeof__(x_) t_ = x_ * 1.44269504088896341f + 0.5f;                                 \
    __typeof__(m_) n_ = __builtin_convertvector(t_, __typeof__(m_));                      \
    __typeof__(x_) nf_ = __builtin_convertvector(n_, __typeof__(x_));                     \
    n_ += (__typeof__(m_))(nf_ > t_);                                                     \
    nf_ = __builtin_convertvector(n_, __typeof__(x_));                                    \
    __typeof__(x_) r_ = x_ - nf_ * 0.693359375f - nf_ * -2.12194440e-4f;                  \
    __typeof__(x_) p_ = r_ * 1.9875691500e-4f + 1.3981999507e-3f;                         \
    p_ = p_ * r_ + 8.3334519073e-3f;                                                      \
    p_ = p_ * r_ + 4.1665795894e-2f;                                                      \
    p_ = p_ * r_ + 1.6666665459e-1f;                                                      \
    p_ = p_ * r_ + 5.0000001201e-1f;                                                      \
    p_ = p_ * r_ * r_ + r_ + 1.0f;                                                        \
    p_ * (__typeof__(x_))((n_ + 127) << 23);                                              \
  })

/* tanh(u) = 1 - 2 / (e^{2u} + 1): exact limits +-1, absolute error ~1e-7. */
static inline cddp_v4f cddp__v4_tanh(cddp_v4f u) {
  return 1.0f - 2.0f / (cddp__v4_exp(u + u) + 1.0f);
}

#endif /* CDDP_TRAINER_VMATH_H */
