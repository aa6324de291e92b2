/* test_model_grad.h - helpers of the model tests: a seeded generator, random vectors, central
 * finite differences and the relative error between two gradients. */
#ifndef CDDP_TEST_MODEL_GRAD_H
#define CDDP_TEST_MODEL_GRAD_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "test.h"

static uint64_t rng = 0x1234567ull;
static inline float frand(void) { /* [-1, 1) */
  rng = rng * 6364136223846793005ull + 1442695040888963407ull;
  return (float)(rng >> 40) / 8388608.0f - 1.0f;
}
static inline float *vec(size_t n, float scale) {
  float *p = malloc((n ? n : 1) * sizeof(float));
  for (size_t i = 0; i < n; i++) p[i] = scale * frand();
  return p;
}
static inline double dot(const float *a, const float *b, size_t n) {
  double s = 0;
  for (size_t i = 0; i < n; i++) s += (double)a[i] * b[i];
  return s;
}
/* ||a - b|| / max(||a||, ||b||), 0 when both are 0 */
static inline double rel_err(const float *a, const double *b, size_t n) {
  double d = 0, na = 0, nb = 0;
  for (size_t i = 0; i < n; i++) {
    d += (a[i] - b[i]) * (a[i] - b[i]);
    na += (double)a[i] * a[i], nb += b[i] * b[i];
  }
  double m = fmax(sqrt(na), sqrt(nb));
  return m == 0 ? 0 : sqrt(d) / m;
}
#define CHECK_REL(name, analytic, numeric, n, tol)                                         \
  do {                                                                                     \
    double e_ = rel_err(analytic, numeric, n);                                             \
    if (!(e_ <= (tol))) TEST_FAIL("%s: relative error %.3g > %.3g", name, e_, (double)(tol)); \
  } while (0)

/* Central differences of f over each element of v: out[i] = (f(v+e) - f(v-e)) / 2e. */
typedef double (*loss_fn)(void *ctx);
static inline double *numeric_grad(float *v, size_t n, float eps, loss_fn f, void *ctx) {
  double *g = malloc((n ? n : 1) * sizeof(double));
  for (size_t i = 0; i < n; i++) {
    float keep = v[i];
    v[i] = keep + eps;
    double lp = f(ctx);
    v[i] = keep - eps;
    double lm = f(ctx);
    v[i] = keep;
    g[i] = (lp - lm) / (2.0 * eps);
  }
  return g;
}


#endif /* CDDP_TEST_MODEL_GRAD_H */
