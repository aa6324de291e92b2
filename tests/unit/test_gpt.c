/* test_gpt.c - the byte-level GPT (gpt.c) and its layers: finite-difference gradients of
 * LayerNorm, GELU, causal attention, embeddings and the tied head, and of whole tiny models;
 * PyTorch's loss and gradients (tests/ref/gpt.txt); accumulation, the ready hook, spec
 * errors, B = 0, names, init. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test.h"
#include "trainer/gpt.h"
#include "trainer/layers.h"
#include "trainer/layers_gpt.h"
#include "trainer/ops.h"
#include "unit/test_model_grad.h"

/* ---- layers: each loss is dot(output, r) for a fixed random r, so d loss/d output = r */

/* every vector width this CPU runs: AVX-512, AVX2, SSE (the test's own process) */
#define FOR_EACH_ISA(...)                                       \
  for (int isa_ = cddp__cpu_isa(); isa_ >= 0; isa_--) {         \
    cddp__cpu_isa_limit(isa_);                                  \
    CHECK_EQ(cddp__cpu_isa(), isa_);                            \
    __VA_ARGS__;                                                \
  }

typedef struct {
  float *x, *w, *b, *y, *mean, *rstd, *r;
  int n, c;
} ln_t;
static double ln_loss(void *p) {
  ln_t *t = p;
  cddp__layernorm_forward(t->y, t->mean, t->rstd, t->x, t->w, t->b, t->n, t->c);
  return dot(t->y, t->r, (size_t)t->n * t->c);
}

static void layernorm_check(void) {
  int widths[] = {37, 16, 3}; /* vectors of 16, 8, 4 and a scalar tail */
  for (int k = 0; k < 3; k++) {
    int n = 3, c = widths[k];
    size_t nc = (size_t)n * c;
    ln_t t = {.x = vec(nc, 2), .w = vec(c, 1), .b = vec(c, 1), .y = vec(nc, 0),
              .mean = vec(n, 0), .rstd = vec(n, 0), .r = vec(nc, 1), .n = n, .c = c};
    for (size_t i = 0; i < nc; i++) t.x[i] += (float)(i % c) * 0.3f; /* nonzero row means */
    ln_loss(&t);
    /* torch's definition: (x - mean) / sqrt(var + eps) * w + b, biased variance */
    for (int r = 0; r < n; r++) {
      double m = 0, v = 0;
      for (int j = 0; j < c; j++) m += t.x[r * c + j];
      m /= c;
      for (int j = 0; j < c; j++) v += (t.x[r * c + j] - m) * (t.x[r * c + j] - m);
      v /= c;
      for (int j = 0; j < c; j++)
        CHECK_NEAR(t.y[r * c + j], (t.x[r * c + j] - m) / sqrt(v + 1e-5) * t.w[j] + t.b[j], 1e-5);
    }
    float *dx = vec(nc, 0.5), *dx0 = malloc(nc * sizeof(float)), *dw = vec(c, 0), *db = vec(c, 0);
    memcpy(dx0, dx, nc * sizeof(float));
    cddp__layernorm_backward(dx, dw, db, t.r, t.x, t.w, t.mean, t.rstd, n, c, 0);
    for (size_t i = 0; i < nc; i++) dx[i] -= dx0[i]; /* dx is added to */
    double *gx = numeric_grad(t.x, nc, 1e-2f, ln_loss, &t);
    double *gw = numeric_grad(t.w, c, 1e-2f, ln_loss, &t);
    double *gb = numeric_grad(t.b, c, 1e-2f, ln_loss, &t);
    CHECK_REL("layernorm dx", dx, gx, nc, 2e-3);
    CHECK_REL("layernorm dw", dw, gw, c, 2e-3);
    CHECK_REL("layernorm db", db, gb, c, 2e-3);
    /* accumulate=1 adds the parameter gradients */
    float *dw2 = malloc(c * sizeof(float));
    memcpy(dw2, dw, c * sizeof(float));
    cddp__layernorm_backward(dx, dw, db, t.r, t.x, t.w, t.mean, t.rstd, n, c, 1);
    for (int j = 0; j < c; j++) CHECK_NEAR(dw[j], 2 * dw2[j], 1e-5 + 1e-5 * fabs(dw2[j]));
    free(gx), free(gw), free(gb), free(dx), free(dx0), free(dw), free(db), free(dw2);
    free(t.x), free(t.w), free(t.b), free(t.y), free(t.mean), free(t.rstd), free(t.r);
  }
}

TEST(layernorm_gradients_match_finite_differences) { FOR_EACH_ISA(layernorm_check()); }

TEST(colsum_matches_the_scalar_sum) {
  FOR_EACH_ISA({
    int widths[] = {100, 7};
    for (int k = 0; k < 2; k++) {
      int n = 9, c = widths[k];
      float *x = vec((size_t)n * c, 1), *a = vec(c, 1), *b = vec(c, 0);
      memcpy(b, a, sizeof(float) * c);
      cddp__colsum(a, x, n, c, 1);
      for (int j = 0; j < c; j++) {
        double s = b[j];
        for (int r = 0; r < n; r++) s += x[r * c + j];
        CHECK_NEAR(a[j], s, 1e-5);
      }
      cddp__colsum(a, x, n, c, 0);
      for (int j = 0; j < c; j++) {
        double s = 0;
        for (int r = 0; r < n; r++) s += x[r * c + j];
        CHECK_NEAR(a[j], s, 1e-5);
      }
      free(x), free(a), free(b);
    }
  });
}

static double gelu_ref(double x) {
  return 0.5 * x * (1 + tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));
}
typedef struct {
  float *x, *pre, *b, *y, *r;
  int n, c;
} gelu_t;
static double gelu_loss(void *p) {
  gelu_t *t = p;
  memcpy(t->pre, t->x, sizeof(float) * (size_t)t->n * t->c);
  cddp__bias_gelu_forward(t->y, t->pre, t->b, t->n, t->c);
  return dot(t->y, t->r, (size_t)t->n * t->c);
}

static void gelu_check(void) {
  int n = 2, c = 37; /* two 16-lane vectors (or 4 of 8, 9 of 4) and a scalar tail per row */
  size_t nc = (size_t)n * c;
  gelu_t t = {.x = vec(nc, 4), .pre = vec(nc, 0), .b = vec(c, 0.5), .y = vec(nc, 0),
              .r = vec(nc, 1), .n = n, .c = c};
  float extremes[] = {-30, -9, -4, -1e-3f, 0, 1e-4f, 2.5f, 9, 30, 100};
  for (int i = 0; i < 10; i++) t.x[i] = extremes[i] - t.b[i];
  gelu_loss(&t);
  for (size_t i = 0; i < nc; i++) {
    CHECK(isfinite(t.y[i]));
    CHECK_NEAR(t.y[i], gelu_ref(t.pre[i]), 2e-6 * (1 + fabs(t.pre[i])));
  }
  float *d = malloc(nc * sizeof(float));
  memcpy(d, t.r, nc * sizeof(float));
  cddp__gelu_backward(d, t.pre, nc);
  double *g = numeric_grad(t.x, nc, 1e-2f, gelu_loss, &t);
  CHECK_REL("gelu dx", d, g, nc, 2e-3);
  free(g), free(d), free(t.x), free(t.pre), free(t.b), free(t.y), free(t.r);
}

TEST(gelu_matches_tanh_formula_and_finite_differences) { FOR_EACH_ISA(gelu_check()); }

typedef struct {
  float *qkv, *y, *att, *r;
  int B, T, C, H;
} attn_t;
static double attn_loss(void *p) {
  attn_t *t = p;
  cddp__attn_forward(t->y, t->att, t->qkv, t->B, t->T, t->C, t->H);
  return dot(t->y, t->r, (size_t)t->B * t->T * t->C);
}

static void attn_check(int n_shapes) {
  /* T, C, heads; T = 70 and 130 cross layer_attn.c's causal blocks of 64 rows */
  int shapes[][3] = {{5, 8, 2}, {7, 12, 3}, {1, 4, 1}, {70, 4, 2}, {130, 4, 1}};
  for (int k = 0; k < n_shapes; k++) {
    int B = k < 3 ? 2 : 1, T = shapes[k][0], C = shapes[k][1], H = shapes[k][2];
    size_t nq = (size_t)B * T * 3 * C, ny = (size_t)B * T * C;
    attn_t t = {.qkv = vec(nq, 1.5), .y = vec(ny, 0), .att = vec((size_t)B * H * T * T, 0),
                .r = vec(ny, 1), .B = B, .T = T, .C = C, .H = H};
    attn_loss(&t);
    /* rows of P sum to 1, zero above the diagonal */
    for (int bh = 0; bh < B * H; bh++)
      for (int i = 0; i < T; i++) {
        double s = 0;
        for (int j = 0; j < T; j++) {
          float pij = t.att[((size_t)bh * T + i) * T + j];
          if (j > i) CHECK(pij == 0.0f);
          s += pij;
        }
        CHECK_NEAR(s, 1.0, 1e-5);
      }
    float *dqkv = vec(nq, 0), *scratch = vec((size_t)T * T, 0);
    cddp__attn_backward(dqkv, t.r, t.qkv, t.att, scratch, B, T, C, H);
    double *g = numeric_grad(t.qkv, nq, 1e-2f, attn_loss, &t);
    CHECK_REL("attention dqkv", dqkv, g, nq, 3e-3);
    /* causal: a change at position T-1 leaves every earlier output bit for bit */
    float *y0 = malloc(ny * sizeof(float));
    memcpy(y0, t.y, ny * sizeof(float));
    for (int j = 0; j < 3 * C; j++) t.qkv[(size_t)(T - 1) * 3 * C + j] += 0.5f;
    attn_loss(&t);
    CHECK(memcmp(y0, t.y, (size_t)(T - 1) * C * sizeof(float)) == 0);
    CHECK(memcmp(y0, t.y, (size_t)T * C * sizeof(float)) != 0);
    free(y0), free(g), free(dqkv), free(scratch), free(t.qkv), free(t.y), free(t.att), free(t.r);
  }
}

TEST(attention_gradients_match_finite_differences_and_mask_is_causal) {
  FOR_EACH_ISA(attn_check(isa_ == 0 ? 5 : 4));
}

typedef struct {
  float *wte, *wpe, *x, *h, *logits, *r, *rl;
  uint8_t *tok;
  int B, T, C, V;
} emb_t;
static double emb_loss(void *p) {
  emb_t *t = p;
  cddp__embed_forward(t->x, t->tok, t->wte, t->wpe, t->B, t->T, t->C);
  return dot(t->x, t->r, (size_t)t->B * t->T * t->C);
}
static double head_loss(void *p) {
  emb_t *t = p;
  int n = t->B * t->T;
  cddp__head_forward(t->logits, t->h, t->wte, n, t->C, t->V);
  return dot(t->logits, t->rl, (size_t)n * t->V);
}

TEST(embedding_and_tied_head_gradients_match_finite_differences) {
  int B = 2, T = 4, C = 6, V = 5, n = B * T;
  emb_t t = {.wte = vec((size_t)V * C, 1), .wpe = vec((size_t)T * C, 1), .x = vec((size_t)n * C, 0),
             .h = vec((size_t)n * C, 1), .logits = vec((size_t)n * V, 0), .r = vec((size_t)n * C, 1),
             .rl = vec((size_t)n * V, 1), .tok = malloc(n), .B = B, .T = T, .C = C, .V = V};
  for (int i = 0; i < n; i++) t.tok[i] = (uint8_t)(i * 3 % V); /* token 0 twice, 1 and 4 too */
  emb_loss(&t);
  float *dwte = vec((size_t)V * C, 0), *dwpe = vec((size_t)T * C, 0), *dh = vec((size_t)n * C, 0);
  memset(dwte, 0, sizeof(float) * V * C);
  cddp__embed_backward(dwte, dwpe, t.r, t.tok, B, T, C, 0);
  double *gte = numeric_grad(t.wte, (size_t)V * C, 1e-2f, emb_loss, &t);
  double *gpe = numeric_grad(t.wpe, (size_t)T * C, 1e-2f, emb_loss, &t);
  CHECK_REL("embedding dwte", dwte, gte, (size_t)V * C, 1e-3);
  CHECK_REL("embedding dwpe", dwpe, gpe, (size_t)T * C, 1e-3);
  free(gte), free(gpe);
  head_loss(&t);
  cddp__head_backward(dh, dwte, t.rl, t.h, t.wte, n, C, V, 0);
  double *gh = numeric_grad(t.h, (size_t)n * C, 1e-2f, head_loss, &t);
  gte = numeric_grad(t.wte, (size_t)V * C, 1e-2f, head_loss, &t);
  CHECK_REL("head dh", dh, gh, (size_t)n * C, 1e-3);
  CHECK_REL("head dwte", dwte, gte, (size_t)V * C, 1e-3);
  free(gte), free(gh), free(dwte), free(dwpe), free(dh);
  free(t.wte), free(t.wpe), free(t.x), free(t.h), free(t.logits), free(t.r), free(t.rl), free(t.tok);
}

TEST(softmax_xent_matches_the_scalar_one) {
  int Vs[] = {256, 7};
  for (int k = 0; k < 2; k++) {
    int n = 5, V = Vs[k];
    float *z = vec((size_t)n * V, 8), *p1 = vec((size_t)n * V, 0), *p2 = vec((size_t)n * V, 0);
    uint8_t y[5] = {0, 3, 6, 1, 2};
    double a = cddp__softmax_xent(p1, z, y, n, V), b = cddp__xent_forward(p2, z, y, n, V, NULL);
    CHECK_NEAR(a, b, 1e-5 * fabs(b));
    for (size_t i = 0; i < (size_t)n * V; i++) CHECK_NEAR(p1[i], p2[i], 1e-7 + 1e-6 * p2[i]);
    double c = cddp__softmax_xent(z, z, y, n, V); /* in place */
    CHECK_NEAR(c, b, 1e-5 * fabs(b));
    if (V < 256) {
      y[2] = (uint8_t)V;
      CHECK(isnan(cddp__softmax_xent(p1, p2, y, n, V)));
    }
    free(z), free(p1), free(p2);
  }
}

/* ---- whole models */

typedef struct {
  cddp_gpt_t *m;
  float *params, *grads;
  uint8_t *tok, *tgt;
  int B, T;
  size_t np;
} gnet_t;

static gnet_t gnet_make(cddp_gpt_spec_t s, int B, int T, uint64_t seed) {
  gnet_t t = {.B = B, .T = T};
  CHECK_OK(cddp__gpt_create(&s, B, &t.m));
  t.np = cddp__gpt_param_count(t.m);
  t.params = vec(t.np, 0), t.grads = vec(t.np, 0);
  t.tok = malloc((size_t)B * T), t.tgt = malloc((size_t)B * T);
  for (int i = 0; i < B * T; i++)
    t.tok[i] = (uint8_t)((i * 7 + seed) % s.vocab), t.tgt[i] = (uint8_t)((i * 5 + 3) % s.vocab);
  cddp__gpt_bind(t.m, t.params, t.grads);
  cddp__gpt_init_params(t.m, seed);
  return t;
}
static void gnet_free(gnet_t *t) {
  cddp__gpt_destroy(t->m);
  free(t->params), free(t->grads), free(t->tok), free(t->tgt);
}
static double gnet_loss(void *c) {
  gnet_t *t = c;
  return cddp__gpt_forward(t->m, t->tok, t->tgt, t->B, t->T);
}
static cddp_gpt_spec_t tiny(void) {
  cddp_gpt_spec_t s = {.n_layer = 2, .n_head = 2, .d_model = 8, .context = 5, .vocab = 11};
  return s;
}

static void gpt_fd_check(cddp_gpt_spec_t s, int B, int T) {
  gnet_t t = gnet_make(s, B, T, 5);
  /* weights far larger than GPT-2's init so that every part matters in the loss */
  for (size_t i = 0; i < t.np; i++) t.params[i] = 0.4f * frand();
  for (int i = 0; i < cddp__gpt_n_params(t.m); i++) {
    const cddp_param_info_t *p = cddp__gpt_param(t.m, i);
    if (strstr(p->name, "ln_") && strstr(p->name, ".weight"))
      for (size_t j = 0; j < p->count; j++) t.params[p->offset + j] += 1.0f;
  }
  gnet_loss(&t);
  cddp__gpt_backward(t.m, 1.0f, 0, NULL, NULL);
  double *g = numeric_grad(t.params, t.np, 1e-2f, gnet_loss, &t);
  for (int i = 0; i < cddp__gpt_n_params(t.m); i++) {
    const cddp_param_info_t *p = cddp__gpt_param(t.m, i);
    char name[96];
    snprintf(name, sizeof name, "gpt T=%d %s", T, p->name);
    CHECK_REL(name, t.grads + p->offset, g + p->offset, p->count, 1e-2);
  }
  free(g);
  gnet_free(&t);
}

TEST(gpt_gradients_match_finite_differences) {
  gpt_fd_check(tiny(), 2, 5);
  gpt_fd_check(tiny(), 3, 3); /* T < context */
  cddp_gpt_spec_t one = {.n_layer = 1, .n_head = 4, .d_model = 12, .context = 4, .vocab = 6};
  gpt_fd_check(one, 2, 4);
  cddp_gpt_spec_t fused = tiny();
  fused.attention = CDDP_GPT_ATTN_FUSED;
  gpt_fd_check(fused, 2, 5);
}

/* model.attention fused: the materialised model's loss and gradients within float rounding
 * (the sums in another order), resolved per table under auto, a bad value named */
TEST(gpt_fused_attention_matches_the_materialised_one) {
  cddp_gpt_spec_t s = {.n_layer = 3, .n_head = 2, .d_model = 32, .context = 16, .vocab = 40};
  int B = 3;
  gnet_t ref = gnet_make(s, B, 16, 9);
  CHECK_EQ(cddp__gpt_attention_fused(ref.m), 0); /* auto on the CPU table */
  s.attention = CDDP_GPT_ATTN_FUSED;
  gnet_t t = gnet_make(s, B, 16, 9);
  CHECK_EQ(cddp__gpt_attention_fused(t.m), 1);
  for (int T = 16; T >= 7; T -= 9) {
    double l_ref = cddp__gpt_forward(ref.m, ref.tok, ref.tgt, B, T);
    cddp__gpt_backward(ref.m, 0.5f, 0, NULL, NULL);
    double l = cddp__gpt_forward(t.m, t.tok, t.tgt, B, T);
    cddp__gpt_backward(t.m, 0.5f, 0, NULL, NULL);
    CHECK_NEAR(l, l_ref, 1e-6 * fabs(l_ref));
    double *g = malloc(t.np * sizeof *g), worst = 0;
    for (size_t i = 0; i < t.np; i++) g[i] = ref.grads[i], worst = fmax(worst, fabs(t.grads[i] - g[i]));
    fprintf(stderr, "# fused vs materialised, T %d: loss %.9g vs %.9g, largest gradient difference %.3g\n", T, l,
            l_ref, worst);
    CHECK_REL("fused attention's gradients", t.grads, g, t.np, 1e-5);
    free(g);
  }
  gnet_free(&t), gnet_free(&ref);
  s.attention = CDDP_GPT_ATTN_AUTO; /* auto on the emulated device: fused, as on CUDA */
  cddp_gpt_t *m;
  CHECK_OK(cddp__gpt_create_on(&cddp__ops_emu, &s, 1, &m));
  CHECK_EQ(cddp__gpt_attention_fused(m), 1);
  cddp__gpt_destroy(m);
  s.attention = 3;
  CHECK_RESULT(cddp__gpt_create(&s, 1, &m), CDDP_INVALID_ARG);
  CHECK(strstr(cddp_last_error(), "attention") != NULL);
}

/* ---- PyTorch reference (tests/ref/gen_gpt.py) */

static FILE *open_ref(void) {
  const char *paths[] = {"tests/ref/gpt.txt", "../tests/ref/gpt.txt"};
  for (size_t i = 0; i < sizeof paths / sizeof paths[0]; i++) {
    FILE *f = fopen(paths[i], "r");
    if (f) return f;
  }
  TEST_FAIL("tests/ref/gpt.txt not found (run from the repository root)");
}
static float *read_floats(FILE *f, size_t *n) {
  CHECK(fscanf(f, "%zu", n) == 1);
  float *v = malloc((*n ? *n : 1) * sizeof(float));
  for (size_t i = 0; i < *n; i++) CHECK(fscanf(f, "%f", &v[i]) == 1);
  return v;
}
static uint8_t *read_bytes(FILE *f, const char *what, size_t want) {
  char w[32];
  size_t n;
  CHECK(fscanf(f, "%31s %zu", w, &n) == 2 && strcmp(w, what) == 0 && n == want);
  uint8_t *v = malloc(n);
  for (size_t i = 0; i < n; i++) {
    unsigned x;
    CHECK(fscanf(f, "%u", &x) == 1);
    v[i] = (uint8_t)x;
  }
  return v;
}

/* One model of the file: returns 0 at its end. The bar: the loss within 1e-5 relative, each
 * gradient element within 1e-4 of torch's (float64) value relative to its tensor's largest. */
static int ref_case(FILE *f) {
  cddp_gpt_spec_t s = {0};
  if (fscanf(f, " gpt %d %d %d %d %d", &s.n_layer, &s.n_head, &s.d_model, &s.context, &s.vocab) != 5)
    return 0;
  int B, T;
  float scale;
  CHECK(fscanf(f, " batch %d %d scale %f", &B, &T, &scale) == 3);
  uint8_t *tok = read_bytes(f, "tokens", (size_t)B * T), *tgt = read_bytes(f, "targets", (size_t)B * T);
  cddp_gpt_t *m;
  CHECK_OK(cddp__gpt_create(&s, B, &m));
  size_t np = cddp__gpt_param_count(m);
  float *params = vec(np, 0), *grads = vec(np, 0);
  cddp__gpt_bind(m, params, grads);
  for (int i = 0; i < cddp__gpt_n_params(m); i++) { /* torch's state_dict: our names and order */
    const cddp_param_info_t *p = cddp__gpt_param(m, i);
    char name[64];
    int ndim;
    CHECK(fscanf(f, " param %63s %d", name, &ndim) == 2);
    if (strcmp(name, p->name) != 0) TEST_FAIL("param %d: torch %s, ours %s", i, name, p->name);
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
  double want;
  CHECK(fscanf(f, " loss %lf", &want) == 1);
  double loss = cddp__gpt_forward(m, tok, tgt, B, T);
  CHECK_NEAR(loss, want, 1e-5 * fabs(want));
  for (size_t i = 0; i < np; i++) grads[i] = NAN; /* accumulate=0 must overwrite everything */
  cddp__gpt_backward(m, scale, 0, NULL, NULL);
  double worst = 0;
  for (int i = 0; i < cddp__gpt_n_params(m); i++) {
    const cddp_param_info_t *p = cddp__gpt_param(m, i);
    char name[64];
    CHECK(fscanf(f, " grad %63s", name) == 1);
    CHECK(strcmp(name, p->name) == 0);
    size_t cnt;
    float *v = read_floats(f, &cnt);
    CHECK_EQ(cnt, p->count);
    double big = 0;
    for (size_t j = 0; j < cnt; j++) big = fmax(big, fabs(v[j]));
    for (size_t j = 0; j < cnt; j++) {
      double d = fabs((double)grads[p->offset + j] - v[j]) / fmax(big, 1e-30);
      worst = fmax(worst, d);
      if (!(d <= 1e-4))
        TEST_FAIL("%s[%zu]: ours %.9g, torch %.9g (tensor max %.3g)", name, j,
                  grads[p->offset + j], v[j], big);
    }
    free(v);
  }
  char w[16];
  CHECK(fscanf(f, "%15s", w) == 1 && strcmp(w, "end") == 0);
  fprintf(stderr, "# gpt %d layers d %d vocab %d vs torch: loss %.9g (torch %.9g), largest grad "
                  "difference %.3g of its tensor's largest\n",
          s.n_layer, s.d_model, s.vocab, loss, want, worst);
  cddp__gpt_destroy(m);
  free(tok), free(tgt), free(params), free(grads);
  return 1;
}

TEST(gpt_forward_backward_match_pytorch) {
  FOR_EACH_ISA({
    FILE *f = open_ref();
    int cases = 0;
    while (ref_case(f)) cases++;
    fclose(f);
    CHECK_EQ(cases, 2);
  });
}

/* ---- accumulation, scale, the ready hook */

TEST(gpt_accumulate_adds_to_separate_backwards) {
  gnet_t a = gnet_make(tiny(), 3, 5, 7), b = gnet_make(tiny(), 3, 5, 7);
  size_t np = a.np;
  uint8_t tok2[15], tgt2[15];
  for (int i = 0; i < 15; i++) tok2[i] = (uint8_t)(i * 3 % 11), tgt2[i] = (uint8_t)(i % 11);
  float *g1 = vec(np, 0), *g2 = vec(np, 0);
  cddp__gpt_forward(a.m, a.tok, a.tgt, 3, 5);
  cddp__gpt_backward(a.m, 0.5f, 0, NULL, NULL);
  memcpy(g1, a.grads, np * sizeof(float));
  cddp__gpt_forward(a.m, tok2, tgt2, 2, 4); /* a smaller second micro-batch */
  cddp__gpt_backward(a.m, 0.5f, 0, NULL, NULL);
  memcpy(g2, a.grads, np * sizeof(float));
  cddp__gpt_forward(b.m, a.tok, a.tgt, 3, 5);
  cddp__gpt_backward(b.m, 0.5f, 0, NULL, NULL);
  cddp__gpt_forward(b.m, tok2, tgt2, 2, 4);
  cddp__gpt_backward(b.m, 0.5f, 1, NULL, NULL);
  size_t nonzero = 0;
  for (size_t i = 0; i < np; i++) {
    if (!(fabs(b.grads[i] - g1[i] - g2[i]) <= 1e-7 + 1e-5 * fabs(g1[i] + g2[i])))
      TEST_FAIL("grad %zu: %g vs %g + %g", i, b.grads[i], g1[i], g2[i]);
    nonzero += g2[i] != 0;
  }
  CHECK(nonzero > np / 2);
  cddp__gpt_backward(b.m, 2.0f, 0, NULL, NULL); /* again after one forward; scale is linear */
  for (size_t i = 0; i < np; i++) CHECK_NEAR(b.grads[i], 4.0f * g2[i], 1e-7 + 1e-5 * fabs(g2[i]));
  free(g1), free(g2);
  gnet_free(&a), gnet_free(&b);
}

typedef struct {
  const float *grads;
  size_t np;
  int calls;
  size_t offsets[64];
  float *snap[64];
} hook_t;
static void on_ready(void *ctx, size_t offset) {
  hook_t *h = ctx;
  CHECK(h->calls < 64);
  h->offsets[h->calls] = offset;
  h->snap[h->calls] = malloc((h->np - offset + 1) * sizeof(float));
  memcpy(h->snap[h->calls], h->grads + offset, (h->np - offset) * sizeof(float));
  h->calls++;
}

TEST(gpt_ready_hook_offsets_decrease_to_zero_and_are_final) {
  for (int accumulate = 0; accumulate < 2; accumulate++) {
    gnet_t t = gnet_make(tiny(), 2, 5, 3);
    for (size_t i = 0; i < t.np; i++) t.grads[i] = accumulate ? 0.25f : NAN;
    hook_t h = {.grads = t.grads, .np = t.np};
    cddp__gpt_forward(t.m, t.tok, t.tgt, 2, 5);
    cddp__gpt_backward(t.m, 1.0f, accumulate, on_ready, &h);
    CHECK_EQ(h.calls, 6 * 2 + 3); /* ln_f; per block 6; wpe; wte */
    CHECK_EQ(h.offsets[h.calls - 1], 0);
    for (int c = 0; c < h.calls; c++) {
      if (c > 0) CHECK(h.offsets[c] < h.offsets[c - 1]);
      int starts_tensor = 0; /* each offset is some tensor's first element */
      for (int i = 0; i < cddp__gpt_n_params(t.m); i++)
        starts_tensor |= cddp__gpt_param(t.m, i)->offset == h.offsets[c];
      CHECK(starts_tensor);
      CHECK(memcmp(h.snap[c], t.grads + h.offsets[c], (t.np - h.offsets[c]) * sizeof(float)) == 0);
      free(h.snap[c]);
    }
    for (size_t i = 0; i < t.np; i++) CHECK(isfinite(t.grads[i]));
    gnet_free(&t);
  }
}

/* ---- spec errors, bad input, B = 0, names, init, FLOPs */

static void expect_bad(cddp_gpt_spec_t s, int max_batch, const char *field) {
  cddp_gpt_t *m = (cddp_gpt_t *)&s; /* must be reset to NULL */
  CHECK_RESULT(cddp__gpt_create(&s, max_batch, &m), CDDP_INVALID_ARG);
  CHECK(m == NULL);
  if (!strstr(cddp_last_error(), field))
    TEST_FAIL("error '%s' does not name '%s'", cddp_last_error(), field);
  fprintf(stderr, "# %s\n", cddp_last_error());
}

TEST(gpt_bad_spec_fields_are_named) {
  cddp_gpt_spec_t s = tiny();
  s.n_head = 3;
  expect_bad(s, 4, "not a multiple of n_head");
  s = tiny(), s.n_head = 0;
  expect_bad(s, 4, "n_head");
  s = tiny(), s.n_layer = 0;
  expect_bad(s, 4, "n_layer");
  s = tiny(), s.n_layer = 65;
  expect_bad(s, 4, "n_layer");
  s = tiny(), s.d_model = 0;
  expect_bad(s, 4, "d_model");
  s = tiny(), s.context = 0;
  expect_bad(s, 4, "context");
  s = tiny(), s.vocab = 257;
  expect_bad(s, 4, "vocab");
  expect_bad(tiny(), 0, "max_batch");
  s = tiny(), s.d_model = 8192, s.n_head = 8, s.n_layer = 64; /* 51e9 parameters */
  expect_bad(s, 4, "parameters");
  s = tiny(), s.context = 65536, s.n_head = 8;
  expect_bad(s, 64, "activations");
  CHECK_RESULT(cddp__gpt_create(NULL, 4, &(cddp_gpt_t *){NULL}), CDDP_INVALID_ARG);
}

TEST(gpt_bad_forward_input_gives_nan_and_zero_rows_work) {
  gnet_t t = gnet_make(tiny(), 2, 5, 1);
  CHECK(isnan(cddp__gpt_forward(t.m, t.tok, t.tgt, 2, 6)));  /* T > context */
  CHECK(isnan(cddp__gpt_forward(t.m, t.tok, t.tgt, 3, 5)));  /* B > max_batch */
  CHECK(isnan(cddp__gpt_forward(t.m, t.tok, t.tgt, 2, 0)));
  t.tok[3] = 11; /* >= vocab */
  CHECK(isnan(cddp__gpt_forward(t.m, t.tok, t.tgt, 2, 5)));
  t.tok[3] = 0, t.tgt[4] = 200;
  CHECK(isnan(cddp__gpt_forward(t.m, t.tok, t.tgt, 2, 5)));
  t.tgt[4] = 1;
  CHECK(isfinite(cddp__gpt_forward(t.m, t.tok, t.tgt, 2, 5)));
  /* no targets: logits only; they match the logits of a forward with targets */
  float *lg = malloc(10 * 11 * sizeof(float));
  memcpy(lg, cddp__gpt_logits(t.m), 10 * 11 * sizeof(float));
  CHECK(cddp__gpt_forward(t.m, t.tok, NULL, 2, 5) == 0.0);
  CHECK(memcmp(lg, cddp__gpt_logits(t.m), 10 * 11 * sizeof(float)) == 0);
  /* B = 0 */
  CHECK(cddp__gpt_forward(t.m, t.tok, t.tgt, 0, 5) == 0.0);
  for (size_t i = 0; i < t.np; i++) t.grads[i] = 1.0f;
  cddp__gpt_backward(t.m, 1.0f, 1, NULL, NULL);
  for (size_t i = 0; i < t.np; i++) CHECK(t.grads[i] == 1.0f);
  cddp__gpt_backward(t.m, 1.0f, 0, NULL, NULL);
  for (size_t i = 0; i < t.np; i++) CHECK(t.grads[i] == 0.0f);
  free(lg);
  gnet_free(&t);
}

TEST(gpt_names_shapes_init_and_flops) {
  cddp_gpt_spec_t s = {.n_layer = 4, .n_head = 4, .d_model = 256, .context = 128, .vocab = 256};
  gnet_t t = gnet_make(s, 2, 128, 42);
  size_t C = 256;
  CHECK_EQ(t.np, 256 * C + 128 * C + 4 * (12 * C * C + 13 * C) + 2 * C);
  CHECK_EQ(cddp__gpt_n_params(t.m), 2 + 12 * 4 + 2);
  const char *want[] = {"wte.weight", "wpe.weight", "h.0.ln_1.weight", "h.0.ln_1.bias",
                        "h.0.attn.c_attn.weight", "h.0.attn.c_attn.bias",
                        "h.0.attn.c_proj.weight", "h.0.attn.c_proj.bias", "h.0.ln_2.weight",
                        "h.0.ln_2.bias", "h.0.mlp.c_fc.weight", "h.0.mlp.c_fc.bias",
                        "h.0.mlp.c_proj.weight", "h.0.mlp.c_proj.bias", "h.1.ln_1.weight"};
  size_t off = 0;
  for (int i = 0; i < cddp__gpt_n_params(t.m); i++) {
    const cddp_param_info_t *p = cddp__gpt_param(t.m, i);
    if (i < 15) CHECK(strcmp(p->name, want[i]) == 0);
    CHECK_EQ(p->offset, off);
    off += p->count;
    double sum = 0, sq = 0;
    for (size_t j = 0; j < p->count; j++) sum += t.params[p->offset + j], sq += t.params[p->offset + j] * t.params[p->offset + j];
    double mean = sum / p->count, sd = sqrt(sq / p->count - mean * mean);
    if (strstr(p->name, "ln_") && strstr(p->name, "weight")) CHECK(mean == 1.0 && sd == 0);
    else if (strstr(p->name, "bias")) CHECK(mean == 0.0 && sd == 0);
    else if (strstr(p->name, "c_proj.weight")) CHECK_NEAR(sd, 0.02 / sqrt(8.0), 0.0005);
    else CHECK_NEAR(sd, 0.02, 0.001);
    if (!strstr(p->name, "ln_") && !strstr(p->name, "bias")) CHECK(fabs(mean) < 0.002);
  }
  CHECK(strcmp(cddp__gpt_param(t.m, cddp__gpt_n_params(t.m) - 1)->name, "ln_f.bias") == 0);
  CHECK(cddp__gpt_param(t.m, cddp__gpt_n_params(t.m)) == NULL);
  CHECK_EQ(off, t.np);
  /* deterministic in the seed */
  float *p2 = vec(t.np, 0);
  cddp__gpt_bind(t.m, p2, t.grads);
  cddp__gpt_init_params(t.m, 42);
  CHECK(memcmp(p2, t.params, t.np * sizeof(float)) == 0);
  cddp__gpt_init_params(t.m, 43);
  CHECK(memcmp(p2, t.params, t.np * sizeof(float)) != 0);
  cddp__gpt_bind(t.m, t.params, t.grads);
  /* at init the prediction is near uniform: loss per token near log 256 */
  double loss = gnet_loss(&t) / (2 * 128);
  CHECK_NEAR(loss, log(256.0), 0.1);
  double fwd = 4 * (24.0 * C * C + 4.0 * 128 * C) + 2.0 * C * 256;
  CHECK_NEAR(cddp__gpt_flops_per_token(t.m), 3 * fwd, 1);
  free(p2);
  gnet_free(&t);
}

/* ---- model.recompute: the same loss and gradient bits as none, with fewer activation bytes,
 * over a second micro-step (accumulate), a shorter T, and the ready hook's offsets */
typedef struct {
  size_t offsets[512];
  int n;
} offsets_t;
static void note_offset(void *ctx, size_t off) {
  offsets_t *o = ctx;
  if (o->n < 512) o->offsets[o->n++] = off;
}

static void recompute_check(int attention) {
  cddp_gpt_spec_t s = {.n_layer = 3, .n_head = 2, .d_model = 32, .context = 16, .vocab = 40, .attention = attention};
  int B = 3, kept = attention == CDDP_GPT_ATTN_FUSED ? 16 : 16 * 16; /* a row's lse, or its probabilities */
  gnet_t ref = gnet_make(s, B, 16, 9);
  size_t bytes_none = cddp__gpt_activation_bytes(ref.m), bytes_attn = 0;
  for (int mode = CDDP_GPT_RECOMPUTE_ATTN; mode <= CDDP_GPT_RECOMPUTE_BLOCK; mode++) {
    s.recompute = mode;
    gnet_t t = gnet_make(s, B, 16, 9);
    CHECK(memcmp(t.params, ref.params, t.np * sizeof(float)) == 0);
    size_t bytes = cddp__gpt_activation_bytes(t.m);
    if (mode == CDDP_GPT_RECOMPUTE_ATTN) { /* 2 of the 3 blocks' [B, heads, T, T] (or [B, heads, T]) fewer */
      CHECK_EQ(bytes_none - bytes, 2 * (size_t)B * 2 * kept * sizeof(float));
      bytes_attn = bytes;
    } else {
      CHECK(bytes < bytes_attn && bytes < bytes_none * 6 / 10);
    }
    for (int T = 16; T >= 7; T -= 9) {
      for (int acc = 0; acc < 2; acc++) { /* two micro-steps: overwrite, then add */
        offsets_t o_ref = {0}, o = {0};
        double l_ref = cddp__gpt_forward(ref.m, ref.tok, ref.tgt, B, T);
        cddp__gpt_backward(ref.m, 0.5f, acc, note_offset, &o_ref);
        double l = cddp__gpt_forward(t.m, t.tok, t.tgt, B, T);
        cddp__gpt_backward(t.m, 0.5f, acc, note_offset, &o);
        CHECK(l == l_ref);
        if (memcmp(t.grads, ref.grads, t.np * sizeof(float)) != 0)
          TEST_FAIL("recompute %d, T %d, accumulate %d: gradients differ from none's", mode, T, acc);
        CHECK_EQ(o.n, o_ref.n);
        CHECK(memcmp(o.offsets, o_ref.offsets, (size_t)o.n * sizeof(size_t)) == 0);
      }
      /* the logits of a forward without targets (eval) are the same bits too */
      cddp__gpt_forward(ref.m, ref.tok, NULL, B, T);
      cddp__gpt_forward(t.m, t.tok, NULL, B, T);
      CHECK(memcmp(cddp__gpt_logits(t.m), cddp__gpt_logits(ref.m),
                   (size_t)B * T * s.vocab * sizeof(float)) == 0);
    }
    gnet_free(&t);
  }
  s.recompute = 3;
  cddp_gpt_t *m;
  CHECK_RESULT(cddp__gpt_create(&s, 1, &m), CDDP_INVALID_ARG);
  CHECK(strstr(cddp_last_error(), "recompute") != NULL);
  gnet_free(&ref);
}

TEST(gpt_recompute_gives_the_same_gradient_bits_with_less_memory) {
  recompute_check(CDDP_GPT_ATTN_MATERIALISED);
  recompute_check(CDDP_GPT_ATTN_FUSED);
}
