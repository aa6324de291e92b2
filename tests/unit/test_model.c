/* test_model.c - the model's layers and both models: finite-difference gradients of every layer
 * and model, PyTorch's forward/backward on tiny models (tests/ref/model.txt), accumulation,
 * the ready hook's order and finality, spec errors, n = 0, names and init. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test.h"
#include "train/layers.h"
#include "train/model.h"

/* ---- helpers */

static uint64_t rng = 0x1234567ull;
static float frand(void) { /* [-1, 1) */
  rng = rng * 6364136223846793005ull + 1442695040888963407ull;
  return (float)(rng >> 40) / 8388608.0f - 1.0f;
}
static float *vec(size_t n, float scale) {
  float *p = malloc((n ? n : 1) * sizeof(float));
  for (size_t i = 0; i < n; i++) p[i] = scale * frand();
  return p;
}
static double dot(const float *a, const float *b, size_t n) {
  double s = 0;
  for (size_t i = 0; i < n; i++) s += (double)a[i] * b[i];
  return s;
}
/* ||a - b|| / max(||a||, ||b||), 0 when both are 0 */
static double rel_err(const float *a, const double *b, size_t n) {
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
static double *numeric_grad(float *v, size_t n, float eps, loss_fn f, void *ctx) {
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

/* ---- whole models */

static cddp_model_spec_t mlp_spec(void) {
  cddp_model_spec_t s = {.kind = CDDP_MODEL_MLP, .in_c = 1, .in_h = 4, .in_w = 5,
                         .n_classes = 4, .n_hidden = 2, .hidden = {7, 6}};
  return s;
}
static cddp_model_spec_t cnn_spec(void) {
  cddp_model_spec_t s = {.kind = CDDP_MODEL_CNN, .in_c = 2, .in_h = 9, .in_w = 8,
                         .n_classes = 4, .n_hidden = 1, .hidden = {6}, .n_conv = 2,
                         .conv_channels = {3, 4}, .kernel = 3};
  return s;
}

typedef struct {
  cddp_model_t *m;
  float *params, *grads, *x;
  uint8_t *y;
  int n;
  size_t np;
} net_t;

static net_t net_make(cddp_model_spec_t spec, int n, uint64_t seed) {
  net_t t = {.n = n};
  CHECK_OK(cddp_model_create(&spec, n, &t.m));
  t.np = cddp_model_param_count(t.m);
  t.params = vec(t.np, 0), t.grads = vec(t.np, 0);
  size_t in = (size_t)spec.in_c * spec.in_h * spec.in_w;
  t.x = vec((size_t)n * in, 1);
  t.y = malloc((size_t)n);
  for (int i = 0; i < n; i++) t.y[i] = (uint8_t)(i * 7 % spec.n_classes);
  cddp_model_bind(t.m, t.params, t.grads);
  cddp_model_init_params(t.m, seed);
  return t;
}
static void net_free(net_t *t) {
  cddp_model_destroy(t->m);
  free(t->params), free(t->grads), free(t->x), free(t->y);
}
static double net_loss(void *c) {
  net_t *t = c;
  return cddp_model_forward(t->m, t->x, t->y, t->n, NULL);
}

static void model_fd_check(cddp_model_spec_t spec, const char *what) {
  net_t t = net_make(spec, 3, 99);
  /* larger weights than the default init so that every layer matters in the loss */
  for (size_t i = 0; i < t.np; i++) t.params[i] *= 3.0f;
  net_loss(&t);
  cddp_model_backward(t.m, 1.0f, 0, NULL, NULL);
  double *g = numeric_grad(t.params, t.np, 2e-3f, net_loss, &t);
  for (int i = 0; i < cddp_model_n_params(t.m); i++) {
    const cddp_param_info_t *p = cddp_model_param(t.m, i);
    char name[96];
    snprintf(name, sizeof name, "%s %s", what, p->name);
    CHECK_REL(name, t.grads + p->offset, g + p->offset, p->count, 1e-2);
  }
  free(g);
  net_free(&t);
}

TEST(mlp_gradients_match_finite_differences) {
  model_fd_check(mlp_spec(), "mlp");
  cddp_model_spec_t linear = mlp_spec(); /* no hidden layer: one linear layer, no ReLU */
  linear.n_hidden = 0;
  model_fd_check(linear, "mlp without hidden layers");
}
TEST(cnn_gradients_match_finite_differences) { model_fd_check(cnn_spec(), "cnn"); }

/* ---- PyTorch reference (tests/ref/gen_model.py) */

static FILE *open_ref(void) {
  const char *paths[] = {"tests/ref/model.txt", "../tests/ref/model.txt"};
  for (size_t i = 0; i < sizeof paths / sizeof paths[0]; i++) {
    FILE *f = fopen(paths[i], "r");
    if (f) return f;
  }
  TEST_FAIL("tests/ref/model.txt not found (run from the repository root)");
}
static void expect_word(FILE *f, const char *want) {
  char w[64];
  if (fscanf(f, "%63s", w) != 1 || strcmp(w, want) != 0)
    TEST_FAIL("model.txt: expected '%s', found '%s'", want, w);
}
static float *read_floats(FILE *f, size_t *n) {
  CHECK(fscanf(f, "%zu", n) == 1);
  float *v = malloc((*n ? *n : 1) * sizeof(float));
  for (size_t i = 0; i < *n; i++) CHECK(fscanf(f, "%f", &v[i]) == 1);
  return v;
}

/* One model of the file: returns 0 at the end of the file. */
static int ref_case(FILE *f) {
  char kind[16];
  if (fscanf(f, " model %15s", kind) != 1) return 0;
  cddp_model_spec_t s = {.kind = strcmp(kind, "cnn") == 0 ? CDDP_MODEL_CNN : CDDP_MODEL_MLP};
  expect_word(f, "spec");
  CHECK(fscanf(f, "%d %d %d %d %d", &s.in_c, &s.in_h, &s.in_w, &s.n_classes, &s.n_hidden) == 5);
  for (int i = 0; i < s.n_hidden; i++) CHECK(fscanf(f, "%d", &s.hidden[i]) == 1);
  CHECK(fscanf(f, "%d", &s.n_conv) == 1);
  for (int i = 0; i < s.n_conv; i++) CHECK(fscanf(f, "%d", &s.conv_channels[i]) == 1);
  CHECK(fscanf(f, "%d", &s.kernel) == 1);
  int n;
  float scale;
  size_t nx, ny;
  CHECK(fscanf(f, " batch %d scale %f", &n, &scale) == 2);
  expect_word(f, "x");
  float *x = read_floats(f, &nx);
  expect_word(f, "y");
  CHECK(fscanf(f, "%zu", &ny) == 1 && ny == (size_t)n);
  uint8_t *y = malloc(ny);
  for (size_t i = 0; i < ny; i++) {
    unsigned v;
    CHECK(fscanf(f, "%u", &v) == 1);
    y[i] = (uint8_t)v;
  }
  cddp_model_t *m;
  CHECK_OK(cddp_model_create(&s, n, &m));
  size_t np = cddp_model_param_count(m);
  CHECK_EQ(nx, (size_t)n * s.in_c * s.in_h * s.in_w);
  float *params = vec(np, 0), *grads = vec(np, 0);
  cddp_model_bind(m, params, grads);
  /* torch's state_dict order, names and shapes are ours */
  for (int i = 0; i < cddp_model_n_params(m); i++) {
    const cddp_param_info_t *p = cddp_model_param(m, i);
    char name[64];
    int ndim;
    CHECK(fscanf(f, " param %63s %d", name, &ndim) == 2);
    if (strcmp(name, p->name) != 0) TEST_FAIL("%s model param %d: torch %s, ours %s", kind, i, name, p->name);
    CHECK_EQ(ndim, p->ndim);
    for (int d = 0; d < ndim; d++) {
      long long dim;
      CHECK(fscanf(f, "%lld", &dim) == 1);
      CHECK_EQ(dim, p->shape[d]);
    }
    size_t cnt;
    float *v = read_floats(f, &cnt);
    CHECK_EQ(cnt, p->count);
    memcpy(params + p->offset, v, cnt * sizeof(float));
    free(v);
  }
  double want_loss;
  int want_correct, correct = -1;
  CHECK(fscanf(f, " loss %lf correct %d", &want_loss, &want_correct) == 2);
  double loss = cddp_model_forward(m, x, y, n, &correct);
  CHECK_NEAR(loss, want_loss, 1e-5 * fabs(want_loss) + 1e-6);
  CHECK_EQ(correct, want_correct);
  for (size_t i = 0; i < np; i++) grads[i] = NAN; /* accumulate=0 must overwrite everything */
  cddp_model_backward(m, scale, 0, NULL, NULL);
  double worst = 0;
  for (int i = 0; i < cddp_model_n_params(m); i++) {
    const cddp_param_info_t *p = cddp_model_param(m, i);
    char name[64];
    CHECK(fscanf(f, " grad %63s", name) == 1);
    CHECK(strcmp(name, p->name) == 0);
    size_t cnt;
    float *v = read_floats(f, &cnt);
    CHECK_EQ(cnt, p->count);
    for (size_t j = 0; j < cnt; j++) {
      double d = fabs((double)grads[p->offset + j] - v[j]);
      worst = fmax(worst, d);
      if (!(d <= 1e-5 + 1e-4 * fabs(v[j])))
        TEST_FAIL("%s %s[%zu]: ours %.9g, torch %.9g", kind, name, j, grads[p->offset + j], v[j]);
    }
    free(v);
  }
  expect_word(f, "end");
  fprintf(stderr, "# %s vs torch: loss %.9g (torch %.9g), largest grad difference %.3g\n", kind,
          loss, want_loss, worst);
  cddp_model_destroy(m);
  free(x), free(y), free(params), free(grads);
  return 1;
}

TEST(forward_backward_match_pytorch) {
  FILE *f = open_ref();
  int cases = 0;
  while (ref_case(f)) cases++;
  fclose(f);
  CHECK_EQ(cases, 3);
}

/* ---- accumulation, scale, the ready hook */

static void accumulate_check(cddp_model_spec_t spec) {
  net_t a = net_make(spec, 5, 7), b = net_make(spec, 5, 7);
  size_t np = a.np, in = (size_t)spec.in_c * spec.in_h * spec.in_w;
  float *x2 = vec(5 * in, 1), *g1 = vec(np, 0), *g2 = vec(np, 0);
  cddp_model_forward(a.m, a.x, a.y, 5, NULL);
  cddp_model_backward(a.m, 0.5f, 0, NULL, NULL);
  memcpy(g1, a.grads, np * sizeof(float));
  cddp_model_forward(a.m, x2, a.y, 3, NULL); /* a shorter second micro-batch */
  cddp_model_backward(a.m, 0.5f, 0, NULL, NULL);
  memcpy(g2, a.grads, np * sizeof(float));
  /* b: the same two micro-batches, the second accumulated */
  cddp_model_forward(b.m, a.x, b.y, 5, NULL); /* b.x is other random data */
  cddp_model_backward(b.m, 0.5f, 0, NULL, NULL);
  cddp_model_forward(b.m, x2, b.y, 3, NULL);
  cddp_model_backward(b.m, 0.5f, 1, NULL, NULL);
  size_t nonzero = 0;
  for (size_t i = 0; i < np; i++) {
    CHECK_NEAR(b.grads[i], g1[i] + g2[i], 1e-6 + 1e-5 * fabs(g1[i] + g2[i]));
    nonzero += g2[i] != 0;
  }
  CHECK(nonzero > np / 4);
  /* grad_scale is linear: scale 2 = 4 x scale 0.5 */
  cddp_model_backward(b.m, 2.0f, 0, NULL, NULL);
  for (size_t i = 0; i < np; i++) CHECK_NEAR(b.grads[i], 4.0f * g2[i], 1e-6 + 1e-5 * fabs(g2[i]));
  free(x2), free(g1), free(g2);
  net_free(&a), net_free(&b);
}

TEST(accumulate_adds_to_separate_backwards) {
  accumulate_check(mlp_spec());
  accumulate_check(cnn_spec());
}

typedef struct {
  const float *grads;
  size_t np;
  int calls;
  size_t offsets[64];
  float *snap[64]; /* grads[offset..np) when the hook was called */
} hook_t;
static void on_ready(void *ctx, size_t offset) {
  hook_t *h = ctx;
  CHECK(h->calls < 64);
  h->offsets[h->calls] = offset;
  h->snap[h->calls] = malloc((h->np - offset + 1) * sizeof(float));
  memcpy(h->snap[h->calls], h->grads + offset, (h->np - offset) * sizeof(float));
  h->calls++;
}

/* n_calls < 0: at least one call per layer (big layers report panels) */
static void hook_check(cddp_model_spec_t spec, int n_calls, int accumulate) {
  net_t t = net_make(spec, 4, 3);
  for (size_t i = 0; i < t.np; i++) t.grads[i] = accumulate ? 0.25f : NAN;
  hook_t h = {.grads = t.grads, .np = t.np};
  cddp_model_forward(t.m, t.x, t.y, 4, NULL);
  cddp_model_backward(t.m, 1.0f, accumulate, on_ready, &h);
  if (n_calls >= 0) CHECK_EQ(h.calls, n_calls);
  CHECK_EQ(h.offsets[h.calls - 1], 0);
  for (int c = 0; c < h.calls; c++) {
    if (c > 0) CHECK(h.offsets[c] < h.offsets[c - 1]);
    /* each call's offset lies in a weight tensor (a layer's bias is done before its weight) */
    int in_weight = 0;
    for (int i = 0; i < cddp_model_n_params(t.m); i++) {
      const cddp_param_info_t *p = cddp_model_param(t.m, i);
      if (strstr(p->name, ".weight") && h.offsets[c] >= p->offset &&
          h.offsets[c] < p->offset + p->count)
        in_weight = 1;
    }
    CHECK(in_weight);
    /* what the hook saw is final, bit for bit */
    CHECK(memcmp(h.snap[c], t.grads + h.offsets[c], (t.np - h.offsets[c]) * sizeof(float)) == 0);
    free(h.snap[c]);
  }
  /* every layer is reported once it is done: each weight's first element is some offset */
  for (int i = 0; i < cddp_model_n_params(t.m); i++) {
    const cddp_param_info_t *p = cddp_model_param(t.m, i);
    int seen = 0;
    for (int c = 0; c < h.calls; c++) seen |= h.offsets[c] == p->offset;
    CHECK(seen || !strstr(p->name, ".weight"));
  }
  for (size_t i = 0; i < t.np; i++) CHECK(isfinite(t.grads[i]));
  net_free(&t);
}

TEST(ready_hook_offsets_decrease_to_zero_and_are_final) {
  hook_check(mlp_spec(), 3, 0);
  hook_check(mlp_spec(), 3, 1);
  hook_check(cnn_spec(), 4, 0);
  hook_check(cnn_spec(), 4, 1);
  /* a 600x784 layer (470k floats) reports in two panels of about 1 MiB: 3 calls in all */
  cddp_model_spec_t big = {.kind = CDDP_MODEL_MLP, .in_c = 1, .in_h = 28, .in_w = 28,
                           .n_classes = 10, .n_hidden = 1, .hidden = {600}};
  hook_check(big, 3, 0);
  hook_check(big, 3, 1);
}

/* ---- spec errors, n = 0, names, init, FLOPs */

static void expect_bad(cddp_model_spec_t s, int max_batch, const char *field) {
  cddp_model_t *m = (cddp_model_t *)&s; /* must be reset to NULL */
  CHECK_RESULT(cddp_model_create(&s, max_batch, &m), CDDP_INVALID_ARG);
  CHECK(m == NULL);
  if (!strstr(cddp_last_error(), field))
    TEST_FAIL("error '%s' does not name '%s'", cddp_last_error(), field);
  fprintf(stderr, "# %s\n", cddp_last_error());
}

TEST(bad_spec_fields_are_named) {
  cddp_model_spec_t s = mlp_spec();
  s.hidden[1] = 0;
  expect_bad(s, 4, "hidden[1]");
  s = mlp_spec(), s.n_hidden = CDDP_MODEL_MAX_LAYERS + 1;
  expect_bad(s, 4, "n_hidden");
  s = mlp_spec(), s.n_hidden = -1;
  expect_bad(s, 4, "n_hidden");
  s = mlp_spec(), s.in_w = 0;
  expect_bad(s, 4, "in_w");
  s = mlp_spec(), s.n_classes = 1;
  expect_bad(s, 4, "n_classes");
  s = mlp_spec(), s.n_classes = 300;
  expect_bad(s, 4, "n_classes");
  s = mlp_spec(), s.kind = (cddp_model_kind_t)7;
  expect_bad(s, 4, "kind");
  expect_bad(mlp_spec(), 0, "max_batch");
  s = cnn_spec(), s.kernel = 4;
  expect_bad(s, 4, "kernel");
  s = cnn_spec(), s.kernel = 0;
  expect_bad(s, 4, "kernel");
  s = cnn_spec(), s.conv_channels[1] = 0;
  expect_bad(s, 4, "conv_channels[1]");
  s = cnn_spec(), s.n_conv = 0;
  expect_bad(s, 4, "n_conv");
  s = cnn_spec(), s.n_conv = 4, s.conv_channels[2] = s.conv_channels[3] = 2; /* 9x8 -> 4x4 -> 2x2 -> 1x1: no fourth pool */
  expect_bad(s, 4, "in_h x in_w");
  s = mlp_spec(), s.hidden[0] = 1 << 20, s.hidden[1] = 1 << 20; /* 2^40 parameters */
  expect_bad(s, 4, "parameters");
  CHECK_RESULT(cddp_model_create(NULL, 4, &(cddp_model_t *){NULL}), CDDP_INVALID_ARG);
}

TEST(zero_rows_forward_and_backward) {
  cddp_model_spec_t specs[2] = {mlp_spec(), cnn_spec()};
  for (int k = 0; k < 2; k++) {
    net_t t = net_make(specs[k], 2, 5);
    int correct = -1;
    CHECK_EQ(cddp_model_forward(t.m, t.x, t.y, 0, &correct), 0);
    CHECK_EQ(correct, 0);
    for (size_t i = 0; i < t.np; i++) t.grads[i] = 1.0f;
    cddp_model_backward(t.m, 1.0f, 1, NULL, NULL); /* adds nothing */
    for (size_t i = 0; i < t.np; i++) CHECK_EQ(t.grads[i], 1.0f);
    hook_t h = {.grads = t.grads, .np = t.np};
    cddp_model_backward(t.m, 1.0f, 0, on_ready, &h); /* zeroes */
    for (size_t i = 0; i < t.np; i++) CHECK_EQ(t.grads[i], 0.0f);
    CHECK(h.calls > 0 && h.offsets[h.calls - 1] == 0);
    for (int c = 0; c < h.calls; c++) free(h.snap[c]);
    /* more rows than max_batch: NAN, not a write past the activations */
    CHECK(isnan(cddp_model_forward(t.m, t.x, t.y, 3, &correct)));
    net_free(&t);
  }
}

TEST(param_names_shapes_and_layout) {
  cddp_model_spec_t s = cnn_spec();
  cddp_model_t *m;
  CHECK_OK(cddp_model_create(&s, 2, &m));
  const char *names[] = {"conv0.weight", "conv0.bias", "conv1.weight", "conv1.bias",
                         "fc0.weight",   "fc0.bias",   "fc1.weight",   "fc1.bias"};
  CHECK_EQ(cddp_model_n_params(m), 8);
  size_t off = 0;
  for (int i = 0; i < 8; i++) {
    const cddp_param_info_t *p = cddp_model_param(m, i);
    CHECK(strcmp(p->name, names[i]) == 0);
    CHECK_EQ(p->offset, off);
    size_t c = 1;
    for (int d = 0; d < p->ndim; d++) c *= (size_t)p->shape[d];
    CHECK_EQ(c, p->count);
    off += p->count;
  }
  CHECK_EQ(off, cddp_model_param_count(m));
  const cddp_param_info_t *c1 = cddp_model_param(m, 2), *f0 = cddp_model_param(m, 4);
  CHECK_EQ(c1->ndim, 4);
  CHECK(c1->shape[0] == 4 && c1->shape[1] == 3 && c1->shape[2] == 3 && c1->shape[3] == 3);
  CHECK(f0->ndim == 2 && f0->shape[0] == 6 && f0->shape[1] == 4 * 2 * 2);
  CHECK(cddp_model_param(m, 8) == NULL && cddp_model_param(m, -1) == NULL);
  cddp_model_destroy(m);
}

TEST(init_is_deterministic_and_pytorch_bounded) {
  cddp_model_spec_t s = {.kind = CDDP_MODEL_MLP, .in_c = 1, .in_h = 28, .in_w = 28,
                         .n_classes = 10, .n_hidden = 1, .hidden = {64}};
  net_t a = net_make(s, 1, 42), b = net_make(s, 1, 42), c = net_make(s, 1, 43);
  CHECK(memcmp(a.params, b.params, a.np * sizeof(float)) == 0);
  CHECK(memcmp(a.params, c.params, a.np * sizeof(float)) != 0);
  for (int i = 0; i < cddp_model_n_params(a.m); i++) {
    const cddp_param_info_t *p = cddp_model_param(a.m, i);
    double bound = 1.0 / sqrt(i < 2 ? 784.0 : 64.0), lo = 0, hi = 0, sum = 0;
    for (size_t j = 0; j < p->count; j++) {
      float v = a.params[p->offset + j];
      lo = fmin(lo, v), hi = fmax(hi, v), sum += v;
    }
    CHECK(lo >= -bound && hi <= bound);
    if (p->count >= 64) CHECK(lo < -0.8 * bound && hi > 0.8 * bound); /* spans the range */
    CHECK(fabs(sum / p->count) < 0.2 * bound + 2 * bound / sqrt(p->count)); /* centred */
  }
  net_free(&a), net_free(&b), net_free(&c);
}

TEST(flops_per_sample) {
  cddp_model_spec_t s = {.kind = CDDP_MODEL_MLP, .in_c = 1, .in_h = 28, .in_w = 28,
                         .n_classes = 10, .n_hidden = 2, .hidden = {1024, 1024}};
  cddp_model_t *m;
  CHECK_OK(cddp_model_create(&s, 128, &m));
  CHECK_EQ(cddp_model_param_count(m), 784 * 1024 + 1024 + 1024 * 1024 + 1024 + 1024 * 10 + 10);
  /* forward 2*in*out per layer; backward dW 2*in*out and dX 2*in*out but for the first */
  double want = 2.0 * (784 * 1024) * 2 + 2.0 * (1024 * 1024) * 3 + 2.0 * (1024 * 10) * 3;
  CHECK_NEAR(cddp_model_flops_per_sample(m), want, 1);
  cddp_model_destroy(m);
}
