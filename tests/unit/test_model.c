/* test_model.c - both models: finite-difference gradients, PyTorch's forward/backward on tiny
 * models (tests/ref/model.txt), accumulation, the ready hook's order and finality, spec
 * errors, n = 0, names, init. The layers alone: test_model_layers.c. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <cblas.h>
#include <string.h>
#include <strings.h>

#include "test.h"
#include "trainer/layers.h"
#include "trainer/model.h"
#include "trainer/ops.h"
#include "unit/test_model_grad.h"

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
  CHECK_OK(cddp__model_create(&spec, n, &t.m));
  t.np = cddp__model_param_count(t.m);
  t.params = vec(t.np, 0), t.grads = vec(t.np, 0);
  size_t in = (size_t)spec.in_c * spec.in_h * spec.in_w;
  t.x = vec((size_t)n * in, 1);
  t.y = malloc((size_t)n);
  for (int i = 0; i < n; i++) t.y[i] = (uint8_t)(i * 7 % spec.n_classes);
  cddp__model_bind(t.m, t.params, t.grads);
  cddp__model_init_params(t.m, seed);
  return t;
}
static void net_free(net_t *t) {
  cddp__model_destroy(t->m);
  free(t->params), free(t->grads), free(t->x), free(t->y);
}
static double net_loss(void *c) {
  net_t *t = c;
  return cddp__model_forward(t->m, t->x, t->y, t->n, NULL);
}

static void model_fd_check(cddp_model_spec_t spec, const char *what) {
  net_t t = net_make(spec, 3, 99);
  /* larger weights than the default init so that every layer matters in the loss */
  for (size_t i = 0; i < t.np; i++) t.params[i] *= 3.0f;
  net_loss(&t);
  cddp__model_backward(t.m, 1.0f, 0, NULL, NULL);
  double *g = numeric_grad(t.params, t.np, 2e-3f, net_loss, &t);
  for (int i = 0; i < cddp__model_n_params(t.m); i++) {
    const cddp_param_info_t *p = cddp__model_param(t.m, i);
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
  CHECK_OK(cddp__model_create(&s, n, &m));
  size_t np = cddp__model_param_count(m);
  CHECK_EQ(nx, (size_t)n * s.in_c * s.in_h * s.in_w);
  float *params = vec(np, 0), *grads = vec(np, 0);
  cddp__model_bind(m, params, grads);
  /* torch's state_dict order, names and shapes are ours */
  for (int i = 0; i < cddp__model_n_params(m); i++) {
    const cddp_param_info_t *p = cddp__model_param(m, i);
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
  double loss = cddp__model_forward(m, x, y, n, &correct);
  CHECK_NEAR(loss, want_loss, 1e-5 * fabs(want_loss) + 1e-6);
  CHECK_EQ(correct, want_correct);
  for (size_t i = 0; i < np; i++) grads[i] = NAN; /* accumulate=0 must overwrite everything */
  cddp__model_backward(m, scale, 0, NULL, NULL);
  double worst = 0;
  for (int i = 0; i < cddp__model_n_params(m); i++) {
    const cddp_param_info_t *p = cddp__model_param(m, i);
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
  cddp__model_destroy(m);
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
  cddp__model_forward(a.m, a.x, a.y, 5, NULL);
  cddp__model_backward(a.m, 0.5f, 0, NULL, NULL);
  memcpy(g1, a.grads, np * sizeof(float));
  cddp__model_forward(a.m, x2, a.y, 3, NULL); /* a shorter second micro-batch */
  cddp__model_backward(a.m, 0.5f, 0, NULL, NULL);
  memcpy(g2, a.grads, np * sizeof(float));
  /* b: the same two micro-batches, the second accumulated */
  cddp__model_forward(b.m, a.x, b.y, 5, NULL); /* b.x is other random data */
  cddp__model_backward(b.m, 0.5f, 0, NULL, NULL);
  cddp__model_forward(b.m, x2, b.y, 3, NULL);
  cddp__model_backward(b.m, 0.5f, 1, NULL, NULL);
  size_t nonzero = 0;
  for (size_t i = 0; i < np; i++) {
    CHECK_NEAR(b.grads[i], g1[i] + g2[i], 1e-6 + 1e-5 * fabs(g1[i] + g2[i]));
    nonzero += g2[i] != 0;
  }
  CHECK(nonzero > np / 4);
  /* grad_scale is linear: scale 2 = 4 x scale 0.5 */
  cddp__model_backward(b.m, 2.0f, 0, NULL, NULL);
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
  cddp__model_forward(t.m, t.x, t.y, 4, NULL);
  cddp__model_backward(t.m, 1.0f, accumulate, on_ready, &h);
  if (n_calls >= 0) CHECK_EQ(h.calls, n_calls);
  CHECK_EQ(h.offsets[h.calls - 1], 0);
  for (int c = 0; c < h.calls; c++) {
    if (c > 0) CHECK(h.offsets[c] < h.offsets[c - 1]);
    /* each call's offset lies in a weight tensor (a layer's bias is done before its weight) */
    int in_weight = 0;
    for (int i = 0; i < cddp__model_n_params(t.m); i++) {
      const cddp_param_info_t *p = cddp__model_param(t.m, i);
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
  for (int i = 0; i < cddp__model_n_params(t.m); i++) {
    const cddp_param_info_t *p = cddp__model_param(t.m, i);
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
  CHECK_RESULT(cddp__model_create(&s, max_batch, &m), CDDP_INVALID_ARG);
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
  CHECK_RESULT(cddp__model_create(NULL, 4, &(cddp_model_t *){NULL}), CDDP_INVALID_ARG);
}

TEST(zero_rows_forward_and_backward) {
  cddp_model_spec_t specs[2] = {mlp_spec(), cnn_spec()};
  for (int k = 0; k < 2; k++) {
    net_t t = net_make(specs[k], 2, 5);
    int correct = -1;
    CHECK_EQ(cddp__model_forward(t.m, t.x, t.y, 0, &correct), 0);
    CHECK_EQ(correct, 0);
    for (size_t i = 0; i < t.np; i++) t.grads[i] = 1.0f;
    cddp__model_backward(t.m, 1.0f, 1, NULL, NULL); /* adds nothing */
    for (size_t i = 0; i < t.np; i++) CHECK_EQ(t.grads[i], 1.0f);
    hook_t h = {.grads = t.grads, .np = t.np};
    cddp__model_backward(t.m, 1.0f, 0, on_ready, &h); /* zeroes */
    for (size_t i = 0; i < t.np; i++) CHECK_EQ(t.grads[i], 0.0f);
    CHECK(h.calls > 0 && h.offsets[h.calls - 1] == 0);
    for (int c = 0; c < h.calls; c++) free(h.snap[c]);
    /* more rows than max_batch: NAN, not a write past the activations */
    CHECK(isnan(cddp__model_forward(t.m, t.x, t.y, 3, &correct)));
    net_free(&t);
  }
}

TEST(param_names_shapes_and_layout) {
  cddp_model_spec_t s = cnn_spec();
  cddp_model_t *m;
  CHECK_OK(cddp__model_create(&s, 2, &m));
  const char *names[] = {"conv0.weight", "conv0.bias", "conv1.weight", "conv1.bias",
                         "fc0.weight",   "fc0.bias",   "fc1.weight",   "fc1.bias"};
  CHECK_EQ(cddp__model_n_params(m), 8);
  size_t off = 0;
  for (int i = 0; i < 8; i++) {
    const cddp_param_info_t *p = cddp__model_param(m, i);
    CHECK(strcmp(p->name, names[i]) == 0);
    CHECK_EQ(p->offset, off);
    size_t c = 1;
    for (int d = 0; d < p->ndim; d++) c *= (size_t)p->shape[d];
    CHECK_EQ(c, p->count);
    off += p->count;
  }
  CHECK_EQ(off, cddp__model_param_count(m));
  const cddp_param_info_t *c1 = cddp__model_param(m, 2), *f0 = cddp__model_param(m, 4);
  CHECK_EQ(c1->ndim, 4);
  CHECK(c1->shape[0] == 4 && c1->shape[1] == 3 && c1->shape[2] == 3 && c1->shape[3] == 3);
  CHECK(f0->ndim == 2 && f0->shape[0] == 6 && f0->shape[1] == 4 * 2 * 2);
  CHECK(cddp__model_param(m, 8) == NULL && cddp__model_param(m, -1) == NULL);
  cddp__model_destroy(m);
}

TEST(init_is_deterministic_and_pytorch_bounded) {
  cddp_model_spec_t s = {.kind = CDDP_MODEL_MLP, .in_c = 1, .in_h = 28, .in_w = 28,
                         .n_classes = 10, .n_hidden = 1, .hidden = {64}};
  net_t a = net_make(s, 1, 42), b = net_make(s, 1, 42), c = net_make(s, 1, 43);
  CHECK(memcmp(a.params, b.params, a.np * sizeof(float)) == 0);
  CHECK(memcmp(a.params, c.params, a.np * sizeof(float)) != 0);
  for (int i = 0; i < cddp__model_n_params(a.m); i++) {
    const cddp_param_info_t *p = cddp__model_param(a.m, i);
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
  CHECK_OK(cddp__model_create(&s, 128, &m));
  CHECK_EQ(cddp__model_param_count(m), 784 * 1024 + 1024 + 1024 * 1024 + 1024 + 1024 * 10 + 10);
  /* forward 2*in*out per layer; backward dW 2*in*out and dX 2*in*out but for the first */
  double want = 2.0 * (784 * 1024) * 2 + 2.0 * (1024 * 1024) * 3 + 2.0 * (1024 * 10) * 3;
  CHECK_NEAR(cddp__model_flops_per_sample(m), want, 1);
  cddp__model_destroy(m);
}

/* OpenBLAS 0.3.21 takes this CPU for a Prescott (SSE3, 4-5x slower sgemm); layer_blas.c moves
 * it to the kernels the CPU can run, at load. */
/* model.c runs through the device table; on the CPU table its bits must be those of the
 * layer functions called directly (the path model.c took before the table). */
TEST(cpu_table_gives_the_direct_layers_bits) {
  cddp_model_spec_t s = {.kind = CDDP_MODEL_MLP, .in_c = 1, .in_h = 28, .in_w = 28,
                         .n_classes = 10, .n_hidden = 2, .hidden = {64, 48}};
  int n = 16, in = 784;
  net_t t = net_make(s, n, 7);
  double loss = cddp__model_forward(t.m, t.x, t.y, n, NULL);
  cddp__model_backward(t.m, 0.5f, 0, NULL, NULL);
  /* the direct path: fc0 (ReLU), fc1 (ReLU), fc2, softmax cross-entropy */
  const float *P = t.params;
  size_t w0 = 0, b0 = w0 + 64 * 784, w1 = b0 + 64, b1 = w1 + 48 * 64, w2 = b1 + 48, b2 = w2 + 10 * 48;
  float *a0 = vec((size_t)n * 64, 0), *a1 = vec((size_t)n * 48, 0), *a2 = vec((size_t)n * 10, 0);
  float *prob = vec((size_t)n * 10, 0), *d2 = vec((size_t)n * 10, 0), *d1 = vec((size_t)n * 48, 0),
        *d0 = vec((size_t)n * 64, 0), *g = vec(t.np, 0);
  cddp__linear_forward(a0, t.x, P + w0, P + b0, n, in, 64, 1);
  cddp__linear_forward(a1, a0, P + w1, P + b1, n, 64, 48, 1);
  cddp__linear_forward(a2, a1, P + w2, P + b2, n, 48, 10, 0);
  double want = cddp__xent_forward(prob, a2, t.y, n, 10, NULL);
  cddp__xent_backward(d2, prob, t.y, n, 10, 0.5f);
  cddp__sum_rows(g + b2, d2, n, 10, 0);
  cddp__linear_backward_weight_rows(g + w2, d2, a1, n, 48, 10, 0, 10, 0);
  cddp__linear_backward_input(d1, d2, P + w2, a1, n, 48, 10, 1);
  cddp__sum_rows(g + b1, d1, n, 48, 0);
  cddp__linear_backward_weight_rows(g + w1, d1, a0, n, 64, 48, 0, 48, 0);
  cddp__linear_backward_input(d0, d1, P + w1, a0, n, 64, 48, 1);
  cddp__sum_rows(g + b0, d0, n, 64, 0);
  cddp__linear_backward_weight_rows(g + w0, d0, t.x, n, in, 64, 0, 64, 0);
  CHECK(memcmp(&loss, &want, sizeof loss) == 0);
  size_t differ = 0;
  for (size_t i = 0; i < t.np; i++) differ += memcmp(&g[i], &t.grads[i], sizeof(float)) != 0;
  CHECK_EQ(differ, 0);
  free(a0), free(a1), free(a2), free(prob), free(d2), free(d1), free(d0), free(g);
  net_free(&t);
}

/* A table without conv2d (the CUDA one today) refuses the CNN by name, not at its first call. */
TEST(cnn_on_a_table_without_conv_is_refused) {
  cddp_ops_t no_conv = cddp__ops_cpu;
  no_conv.conv2d_forward = NULL;
  cddp_model_spec_t s = cnn_spec();
  cddp_model_t *m = NULL;
  CHECK_RESULT(cddp__model_create_on(&no_conv, &s, 4, &m), CDDP_INVALID_ARG);
  CHECK(m == NULL);
  CHECK(strstr(cddp_last_error(), "model.type: cnn") != NULL);
}

TEST(blas_runs_the_cpus_vector_kernels) {
  const char *env = getenv("OPENBLAS_CORETYPE");
  const char *core = openblas_get_corename();
  fprintf(stderr, "# OpenBLAS core %s (OPENBLAS_CORETYPE %s)\n", core, env ? env : "unset");
  if (env && *env) { /* the user's choice stands: OpenBLAS runs the kernels it names */
    if (strcasecmp(core, env) != 0) TEST_FAIL("OPENBLAS_CORETYPE=%s, yet OpenBLAS runs %s", env, core);
    return;
  }
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq"))
    CHECK(strcasecmp(core, "skylakex") == 0 || strcasecmp(core, "cooperlake") == 0 ||
          strcasecmp(core, "sapphirerapids") == 0);
  else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
    CHECK(strcasecmp(core, "prescott") != 0 && strcasecmp(core, "core2") != 0 &&
          strcasecmp(core, "nehalem") != 0 && strcasecmp(core, "sandybridge") != 0);
}
