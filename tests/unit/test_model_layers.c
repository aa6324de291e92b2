/* test_model_layers.c - each layer of the model (linear, ReLU, conv, max pool, softmax
 * cross-entropy) against its definition and finite differences. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test.h"
#include "trainer/gemm.h"
#include "trainer/layers.h"
#include "trainer/linear_form.h"
#include "trainer/model.h"
#include "unit/test_model_grad.h"

/* ---- linear */

typedef struct {
  int n, in, out, relu;
  float *x, *w, *b, *y, *r; /* r: the projection that makes a scalar loss sum(r * y) */
} lin_t;
static double lin_loss(void *c) {
  lin_t *t = c;
  cddp__linear_forward(t->y, t->x, t->w, t->b, t->n, t->in, t->out, t->relu);
  return dot(t->y, t->r, (size_t)t->n * t->out);
}

static void linear_check(int relu) {
  lin_t t = {.n = 3, .in = 5, .out = 4, .relu = relu};
  t.x = vec(15, 1), t.w = vec(20, 1), t.b = vec(4, 0.5f), t.y = vec(12, 0), t.r = vec(12, 1);
  float *dw = vec(20, 1), *db = vec(4, 1), *dx = vec(15, 1), *dz = vec(12, 0);
  lin_loss(&t);
  /* dy = r; through the ReLU when there is one */
  if (relu) cddp__relu_backward(dz, t.r, t.y, 12);
  else memcpy(dz, t.r, sizeof(float) * 12);
  cddp__linear_backward_params(dw, db, dz, t.x, 3, 5, 4, 0);
  cddp__linear_backward_input(dx, dz, t.w, NULL, 3, 5, 4, 0);
  /* y against a direct sum */
  for (int i = 0; i < 3; i++)
    for (int o = 0; o < 4; o++) {
      double s = t.b[o];
      for (int k = 0; k < 5; k++) s += (double)t.x[i * 5 + k] * t.w[o * 5 + k];
      if (relu && s < 0) s = 0;
      CHECK_NEAR(t.y[i * 4 + o], s, 1e-5);
    }
  double *gw = numeric_grad(t.w, 20, 1e-2f, lin_loss, &t);
  double *gb = numeric_grad(t.b, 4, 1e-2f, lin_loss, &t);
  double *gx = numeric_grad(t.x, 15, 1e-2f, lin_loss, &t);
  CHECK_REL("linear dW", dw, gw, 20, 1e-4);
  CHECK_REL("linear db", db, gb, 4, 1e-4);
  CHECK_REL("linear dx", dx, gx, 15, 1e-4);
  free(gw), free(gb), free(gx), free(dw), free(db), free(dx), free(dz);
  free(t.x), free(t.w), free(t.b), free(t.y), free(t.r);
}

TEST(linear_gradients_match_finite_differences) { linear_check(0); }

/* The fused bias+ReLU forward and ReLU-masked input gradient, wide enough (37 columns) for
 * the vector loops and their scalar tails. */
TEST(linear_relu_fused_paths_match_finite_differences) {
  linear_check(1);
  int n = 3, in = 37, out = 37;
  float *x = vec(n * in, 1), *w = vec(out * in, 1), *b = vec(out, 1), *y = vec(n * out, 0);
  float *dy = vec(n * out, 1), *dx = vec(n * in, 0);
  cddp__relu_forward(x, x, (size_t)n * in); /* the input is a ReLU output */
  cddp__linear_forward(y, x, w, b, n, in, out, 1);
  cddp__linear_backward_input(dx, dy, w, x, n, in, out, 1);
  for (int i = 0; i < n; i++)
    for (int k = 0; k < in; k++) {
      double s = 0;
      for (int o = 0; o < out; o++) s += (double)dy[i * out + o] * w[o * in + k];
      CHECK_NEAR(dx[i * in + k], x[i * in + k] > 0 ? s : 0.0, 1e-4);
    }
  for (int i = 0; i < n * out; i++) CHECK(y[i] >= 0);
  free(x), free(w), free(b), free(y), free(dy), free(dx);
}

/* The two forms of the product (linear_form.c): each matches the definition, with and without
 * bias, residual and ReLU, on shapes with tails in every direction, in fp32 and (where the CPU
 * has it) bf16. Whether they give the same bits depends on the BLAS kernels (OpenBLAS's
 * AVX-512 ones: yes; Haswell's: not always; tests/run.sh runs this file under both), so what
 * is checked everywhere is auto's promise: its output has the bits of x W^T, and where the
 * two forms differ it keeps x W^T. */
static void forms_match(int n, int in, int out) {
  float *x = vec(n * in, 1), *w = vec(out * in, 1), *b = vec(out, 1), *res = vec(n * out, 1);
  float *yd = vec(n * out, 0), *yt = vec(n * out, 0), *ya = vec(n * out, 0);
  double tol = cddp__gemm_precision() == CDDP_PRECISION_BF16 ? 0.05 : 1e-3;
  for (int c = 0; c < 8; c++) {
    const float *bias = c & 1 ? b : NULL, *r = c & 2 ? res : NULL;
    int relu = (c & 4) != 0;
    cddp__linear_form_force(CDDP_LINEAR_FORM_DIRECT);
    cddp__linear_xwt(yd, x, w, bias, r, n, in, out, relu);
    cddp__linear_form_force(CDDP_LINEAR_FORM_TRANSPOSED);
    cddp__linear_xwt(yt, x, w, bias, r, n, in, out, relu);
    for (int i = 0; i < n; i++)
      for (int o = 0; o < out; o++) {
        double s = (r ? r[i * out + o] : 0) + (bias ? bias[o] : 0);
        for (int k = 0; k < in; k++) s += (double)x[i * in + k] * w[o * in + k];
        if (relu && s < 0) s = 0;
        CHECK_NEAR(yd[i * out + o], s, tol);
        CHECK_NEAR(yt[i * out + o], s, tol);
      }
    int differ = memcmp(yd, yt, sizeof(float) * (size_t)n * out) != 0;
    cddp__linear_form_force(CDDP_LINEAR_FORM_AUTO);
    for (int call = 0; call < 3; call++) cddp__linear_xwt(ya, x, w, bias, r, n, in, out, relu);
    if (memcmp(ya, yd, sizeof(float) * (size_t)n * out) != 0)
      TEST_FAIL("%dx%d -> %d, bias %d res %d relu %d: auto's bits are not x W^T's", n, in, out,
                bias != NULL, r != NULL, relu);
    cddp__linear_form_t f = cddp__linear_form_of(n, in, out);
    if (differ && f != CDDP_LINEAR_FORM_DIRECT)
      TEST_FAIL("%dx%d -> %d: the forms differ in bits here, yet auto kept the transposed one", n, in, out);
    cddp__linear_xwt(ya, x, w, bias, r, n, in, out, relu); /* the kept form, once more */
    CHECK(memcmp(ya, yd, sizeof(float) * (size_t)n * out) == 0);
  }
  free(x), free(w), free(b), free(res), free(yd), free(yt), free(ya);
}

/* the last two are past the 1,024 outputs below which auto does not compare */
static const int form_shapes[][3] = {{3, 5, 4}, {17, 37, 33}, {1, 16, 16}, {128, 70, 40}, {33, 19, 100}};

TEST(linear_forms_match_the_definition_and_auto_keeps_the_bits) {
  for (size_t i = 0; i < sizeof form_shapes / sizeof form_shapes[0]; i++)
    forms_match(form_shapes[i][0], form_shapes[i][1], form_shapes[i][2]);
}

TEST(linear_forms_in_bf16_match_the_definition_and_auto_keeps_the_bits) {
  /* on the fastest bf16 path this CPU has; each path's product itself: test_gemm */
  CHECK_OK(cddp__gemm_set_precision(CDDP_PRECISION_BF16));
  for (size_t i = 0; i < sizeof form_shapes / sizeof form_shapes[0]; i++)
    forms_match(form_shapes[i][0], form_shapes[i][1], form_shapes[i][2]);
  CHECK_OK(cddp__gemm_set_precision(CDDP_PRECISION_FP32));
}

TEST(linear_form_auto_measures_a_shape_once_after_warming_up) {
  int n = 40, in = 64, out = 48;
  float *x = vec(n * in, 1), *w = vec(out * in, 1), *b = vec(out, 1), *y = vec(n * out, 0);
  float *want = vec(n * out, 0);
  cddp__linear_form_force(CDDP_LINEAR_FORM_DIRECT);
  cddp__linear_xwt(want, x, w, b, NULL, n, in, out, 1);
  cddp__linear_form_force(CDDP_LINEAR_FORM_AUTO);
  for (int call = 0; call < 2; call++) { /* WARM_CALLS: run direct, not yet measured */
    cddp__linear_xwt(y, x, w, b, NULL, n, in, out, 1);
    CHECK_EQ(cddp__linear_form_of(n, in, out), CDDP_LINEAR_FORM_AUTO);
  }
  memset(y, 0, sizeof(float) * (size_t)n * out);
  cddp__linear_xwt(y, x, w, b, NULL, n, in, out, 1); /* this one times both forms */
  cddp__linear_form_t f = cddp__linear_form_of(n, in, out);
  CHECK(f == CDDP_LINEAR_FORM_DIRECT || f == CDDP_LINEAR_FORM_TRANSPOSED);
  CHECK(memcmp(y, want, sizeof(float) * (size_t)n * out) == 0); /* the measuring call's result */
  cddp__linear_xwt(y, x, w, b, NULL, n, in, out, 1);
  CHECK_EQ(cddp__linear_form_of(n, in, out), f); /* kept */
  CHECK_EQ(cddp__linear_form_of(n + 1, in, out), CDDP_LINEAR_FORM_AUTO); /* per shape */
  /* below 1,024 outputs auto does not compare the forms: x W^T, measured or not */
  for (int call = 0; call < 3; call++) cddp__linear_xwt(y, x, w, b, NULL, 4, in, out, 1);
  CHECK_EQ(cddp__linear_form_of(4, in, out), CDDP_LINEAR_FORM_DIRECT);
  free(x), free(w), free(b), free(y), free(want);
}

/* ---- relu */

typedef struct {
  size_t n;
  float *x, *y, *r;
} relu_t;
static double relu_loss(void *c) {
  relu_t *t = c;
  cddp__relu_forward(t->y, t->x, t->n);
  return dot(t->y, t->r, t->n);
}

TEST(relu_gradient_matches_finite_differences) {
  relu_t t = {.n = 43};
  t.x = vec(43, 1), t.y = vec(43, 0), t.r = vec(43, 1);
  for (size_t i = 0; i < 43; i++) /* stay away from the kink */
    if (fabsf(t.x[i]) < 0.05f) t.x[i] = t.x[i] < 0 ? -0.1f : 0.1f;
  float *dx = vec(43, 0);
  relu_loss(&t);
  for (size_t i = 0; i < 43; i++) CHECK_EQ(t.y[i], t.x[i] > 0 ? t.x[i] : 0);
  cddp__relu_backward(dx, t.r, t.y, 43);
  double *g = numeric_grad(t.x, 43, 1e-2f, relu_loss, &t);
  CHECK_REL("relu dx", dx, g, 43, 1e-4);
  free(g), free(dx), free(t.x), free(t.y), free(t.r);
}

/* ---- conv */

typedef struct {
  int n, c_in, h, w, c_out, k;
  float *x, *wt, *b, *y, *r, *col;
} conv_t;
static double conv_loss(void *c) {
  conv_t *t = c;
  cddp__conv2d_forward(t->y, t->x, t->wt, t->b, t->col, t->n, t->c_in, t->h, t->w, t->c_out,
                       t->k, 0);
  return dot(t->y, t->r, (size_t)t->n * t->c_out * t->h * t->w);
}

static void conv_check(int n, int c_in, int h, int w, int c_out, int k) {
  conv_t t = {.n = n, .c_in = c_in, .h = h, .w = w, .c_out = c_out, .k = k};
  size_t nx = (size_t)n * c_in * h * w, nw = (size_t)c_out * c_in * k * k,
         ny = (size_t)n * c_out * h * w;
  t.x = vec(nx, 1), t.wt = vec(nw, 1), t.b = vec(c_out, 1), t.y = vec(ny, 0), t.r = vec(ny, 1);
  t.col = vec(cddp__conv2d_col_floats(c_in, h, w, k), 0);
  conv_loss(&t);
  /* forward against the direct definition */
  int p = k / 2;
  for (int s = 0; s < n; s++)
    for (int co = 0; co < c_out; co++)
      for (int oy = 0; oy < h; oy++)
        for (int ox = 0; ox < w; ox++) {
          double v = t.b[co];
          for (int ci = 0; ci < c_in; ci++)
            for (int ki = 0; ki < k; ki++)
              for (int kj = 0; kj < k; kj++) {
                int iy = oy + ki - p, ix = ox + kj - p;
                if (iy < 0 || iy >= h || ix < 0 || ix >= w) continue;
                v += (double)t.x[((s * c_in + ci) * h + iy) * w + ix] *
                     t.wt[((co * c_in + ci) * k + ki) * k + kj];
              }
          CHECK_NEAR(t.y[((s * c_out + co) * h + oy) * w + ox], v, 1e-4);
        }
  float *dw = vec(nw, 1), *db = vec(c_out, 1), *dx = vec(nx, 1);
  cddp__conv2d_backward(dx, dw, db, t.r, t.x, t.wt, t.col, n, c_in, h, w, c_out, k, 0);
  double *gw = numeric_grad(t.wt, nw, 1e-2f, conv_loss, &t);
  double *gb = numeric_grad(t.b, c_out, 1e-2f, conv_loss, &t);
  double *gx = numeric_grad(t.x, nx, 1e-2f, conv_loss, &t);
  CHECK_REL("conv dW", dw, gw, nw, 1e-4);
  CHECK_REL("conv db", db, gb, c_out, 1e-4);
  CHECK_REL("conv dx", dx, gx, nx, 1e-4);
  free(gw), free(gb), free(gx), free(dw), free(db), free(dx);
  free(t.x), free(t.wt), free(t.b), free(t.y), free(t.r), free(t.col);
}

TEST(conv_gradients_match_finite_differences) {
  conv_check(2, 2, 5, 4, 3, 3); /* non-square, several channels */
  conv_check(1, 1, 6, 6, 2, 5); /* a kernel wider than half the image */
  conv_check(2, 3, 3, 4, 2, 1); /* 1x1 */
  conv_check(1, 2, 2, 3, 2, 5); /* a kernel bigger than the image: taps that see nothing */
}

/* ---- maxpool */

typedef struct {
  int n, c, h, w;
  float *x, *y, *r;
  uint8_t *arg;
} pool_t;
static double pool_loss(void *ctx) {
  pool_t *t = ctx;
  cddp__maxpool2_forward(t->y, t->arg, t->x, t->n, t->c, t->h, t->w);
  return dot(t->y, t->r, (size_t)t->n * t->c * (t->h / 2) * (t->w / 2));
}

TEST(maxpool_gradient_matches_finite_differences) {
  pool_t t = {.n = 2, .c = 2, .h = 5, .w = 6}; /* odd height: the last row is dropped */
  size_t nx = 2 * 2 * 5 * 6, ny = 2 * 2 * 2 * 3;
  t.x = malloc(nx * sizeof(float));
  for (size_t i = 0; i < nx; i++) t.x[i] = (float)((i * 37) % nx) * 0.1f - 3.0f; /* distinct */
  t.y = vec(ny, 0), t.r = vec(ny, 1), t.arg = malloc(ny);
  pool_loss(&t);
  for (int p = 0; p < 4; p++)
    for (int oy = 0; oy < 2; oy++)
      for (int ox = 0; ox < 3; ox++) {
        const float *xp = t.x + p * 30;
        float m = fmaxf(fmaxf(xp[2 * oy * 6 + 2 * ox], xp[2 * oy * 6 + 2 * ox + 1]),
                        fmaxf(xp[(2 * oy + 1) * 6 + 2 * ox], xp[(2 * oy + 1) * 6 + 2 * ox + 1]));
        CHECK_EQ(t.y[p * 6 + oy * 3 + ox], m);
      }
  float *dx = vec(nx, 1);
  cddp__maxpool2_backward(dx, t.r, t.arg, t.y, 2, 2, 5, 6, 0);
  double *g = numeric_grad(t.x, nx, 1e-2f, pool_loss, &t);
  CHECK_REL("maxpool dx", dx, g, nx, 1e-4);
  /* the fused ReLU mask: windows whose max is <= 0 pass nothing */
  cddp__maxpool2_backward(dx, t.r, t.arg, t.y, 2, 2, 5, 6, 1);
  for (size_t i = 0; i < nx; i++) {
    double want = t.x[i] > 0 ? g[i] : 0.0;
    CHECK_NEAR(dx[i], want, 1e-3);
  }
  free(g), free(dx), free(t.x), free(t.y), free(t.r), free(t.arg);
}

/* Wide rows (the 4-window vector path and its tail) and many ties (ReLU zeros): the value and
 * argmax are those of a sequential scan keeping the first maximum. */
TEST(maxpool_vector_path_and_ties_match_a_scan) {
  int n = 2, c = 3, h = 7, w = 18, oh = 3, ow = 9;
  size_t nx = (size_t)n * c * h * w, ny = (size_t)n * c * oh * ow;
  float *x = malloc(nx * sizeof(float)), *y = malloc(ny * sizeof(float));
  float *dy = vec(ny, 1), *dx = malloc(nx * sizeof(float));
  uint8_t *arg = malloc(ny);
  for (size_t i = 0; i < nx; i++) {
    float v = frand();
    x[i] = v < 0 ? 0.0f : (float)(int)(v * 4); /* 0, 1, 2, 3 with many equal */
  }
  cddp__maxpool2_forward(y, arg, x, n, c, h, w);
  cddp__maxpool2_backward(dx, dy, arg, y, n, c, h, w, 0);
  for (int p = 0; p < n * c; p++)
    for (int oy = 0; oy < oh; oy++)
      for (int ox = 0; ox < ow; ox++) {
        const float *xp = x + (size_t)p * h * w;
        float v[4] = {xp[2 * oy * w + 2 * ox], xp[2 * oy * w + 2 * ox + 1],
                      xp[(2 * oy + 1) * w + 2 * ox], xp[(2 * oy + 1) * w + 2 * ox + 1]};
        int best = 0;
        for (int i = 1; i < 4; i++)
          if (v[i] > v[best]) best = i;
        size_t o = ((size_t)p * oh + oy) * ow + ox;
        CHECK_EQ(y[o], v[best]);
        CHECK_EQ(arg[o], best);
        CHECK_EQ(dx[(size_t)p * h * w + (2 * oy + best / 2) * w + 2 * ox + best % 2], dy[o]);
      }
  free(x), free(y), free(dy), free(dx), free(arg);
}

/* ---- softmax cross-entropy */

typedef struct {
  int n, k;
  float *z, *p;
  uint8_t *y;
} xent_t;
static double xent_loss(void *c) {
  xent_t *t = c;
  return cddp__xent_forward(t->p, t->z, t->y, t->n, t->k, NULL);
}

TEST(softmax_xent_matches_definition_and_finite_differences) {
  uint8_t y[4] = {0, 4, 2, 2};
  xent_t t = {4, 5, vec(20, 3), vec(20, 0), y};
  int hits = -1;
  double loss = cddp__xent_forward(t.p, t.z, y, 4, 5, &hits);
  double want = 0;
  int want_hits = 0;
  for (int i = 0; i < 4; i++) {
    double s = 0;
    int best = 0;
    for (int j = 0; j < 5; j++) s += exp(t.z[i * 5 + j]), best = t.z[i * 5 + j] > t.z[i * 5 + best] ? j : best;
    want += log(s) - t.z[i * 5 + y[i]];
    want_hits += best == y[i];
  }
  CHECK_NEAR(loss, want, 1e-5);
  CHECK_EQ(hits, want_hits);
  /* in place (prob = logits), as the device tests compose the MLP step: same loss, same prob */
  float *zi = vec(20, 0);
  memcpy(zi, t.z, 20 * sizeof(float));
  CHECK_NEAR(cddp__xent_forward(zi, zi, y, 4, 5, NULL), loss, 1e-12);
  CHECK(memcmp(zi, t.p, 20 * sizeof(float)) == 0);
  free(zi);
  float *d = vec(20, 0);
  cddp__xent_backward(d, t.p, y, 4, 5, 0.5f);
  double *g = numeric_grad(t.z, 20, 1e-2f, xent_loss, &t);
  for (int i = 0; i < 20; i++) g[i] *= 0.5;
  CHECK_REL("xent dlogits", d, g, 20, 1e-3);
  /* huge logits: no overflow, the loss is the margin */
  float big[3] = {1000.0f, 0.0f, -1000.0f};
  uint8_t yb = 1;
  float pb[3];
  loss = cddp__xent_forward(pb, big, &yb, 1, 3, &hits);
  CHECK_NEAR(loss, 1000.0, 1e-3);
  CHECK_EQ(hits, 0);
  CHECK(isfinite(pb[0]) && isfinite(pb[1]) && isfinite(pb[2]));
  free(g), free(d), free(t.z), free(t.p);
}

