/* test_kernels.c - every entry of the CUDA device table (trainer/ops.h) against the CPU
 * table on the same inputs: float32 within 1e-4 relative (the largest difference over the
 * largest reference magnitude), bf16 within its own tolerance. TAP output; exit 77 when there
 * is no GPU (tests/gpu/run.sh says so). --self compares the CPU table with itself: the
 * harness's own check, which runs anywhere (tests/sh/test_gpu.sh). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu/gpu_main.h"
#include "trainer/gemm.h"
#include "trainer/gpt.h"

#define TOL_F32 1e-4
#define TOL_BF16 1e-2 /* 8 bits of mantissa: 2^-8 relative per operand */
#define TOL_BF16_SAME 3e-3 /* bf16 on both sides, rounded at the same places: sums in another order flip a rare p or ds over a rounding edge (2^-8 of it) */

static const cddp_ops_t *cpu, *dev;
static int n_test, n_failed;

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static float frand(void) { /* uniform in [-1, 1) */
  rng = rng * 6364136223846793005ull + 1442695040888963407ull;
  return (float)((rng >> 40) / (double)(1ull << 24)) * 2.0f - 1.0f;
}
static float *rand_f(size_t n, float scale) {
  float *p = malloc(n * sizeof(float) + 1);
  for (size_t i = 0; i < n; i++) p[i] = frand() * scale;
  return p;
}
static uint8_t *rand_u8(size_t n, int below) {
  uint8_t *p = malloc(n + 1);
  for (size_t i = 0; i < n; i++) p[i] = (uint8_t)((frand() + 1.0f) * 0.5f * below) % below;
  return p;
}
static void *up(const void *host, size_t bytes) {
  void *d = dev->alloc(bytes);
  if (!d) {
    fprintf(stderr, "out of device memory for %zu bytes\n", bytes);
    exit(1);
  }
  dev->to_device(d, host, bytes);
  return d;
}
static float *upf(const float *host, size_t n) { return up(host, n * sizeof(float)); }
static float *down(const float *d, size_t n) {
  float *h = malloc(n * sizeof(float) + 1);
  dev->to_host(h, d, n * sizeof(float));
  return h;
}

static void result(const char *name, int pass, const char *detail) {
  n_test++;
  if (!pass) n_failed++;
  printf("%s %d - %s%s%s\n", pass ? "ok" : "not ok", n_test, name, detail[0] ? ": " : "", detail);
  fflush(stdout);
}

/* max |ref - got| / max |ref| over n, and whether it is within tol (NaN fails) */
static void same(const char *name, const float *ref, const float *dgot, size_t n, double tol) {
  float *got = down(dgot, n);
  double diff = 0, mag = 1e-30;
  size_t worst = 0;
  for (size_t i = 0; i < n; i++) {
    double d = fabs((double)ref[i] - got[i]);
    if (!(d <= diff)) diff = d, worst = i; /* NaN lands here too */
    if (fabs(ref[i]) > mag) mag = fabs(ref[i]);
  }
  double rel = diff / mag;
  char detail[160];
  snprintf(detail, sizeof detail, "max rel diff %.2e (tol %.0e; worst [%zu] %g vs %g)", rel, tol, worst,
           (double)ref[worst], (double)got[worst]);
  result(name, rel <= tol, detail);
  free(got);
}
static void same_num(const char *name, double ref, double got, double tol) {
  double rel = fabs(ref - got) / (fabs(ref) > 1e-30 ? fabs(ref) : 1e-30);
  char detail[120];
  snprintf(detail, sizeof detail, "%.9g vs %.9g, rel %.2e (tol %.0e)", ref, got, rel, tol);
  result(name, rel <= tol, detail);
}

static void test_gemm(void) {
  const int m = 67, n = 45, k = 33;
  for (int ta = 0; ta < 2; ta++)
    for (int tb = 0; tb < 2; tb++) {
      float *A = rand_f((size_t)m * k, 1), *B = rand_f((size_t)k * n, 1), *C = rand_f((size_t)m * n, 1);
      float *dA = upf(A, (size_t)m * k), *dB = upf(B, (size_t)k * n), *dC = upf(C, (size_t)m * n);
      cpu->gemm(ta, tb, m, n, k, 0.5f, A, B, 0.25f, C);
      dev->gemm(ta, tb, m, n, k, 0.5f, dA, dB, 0.25f, dC);
      char name[64];
      snprintf(name, sizeof name, "gemm f32 ta=%d tb=%d (alpha, beta)", ta, tb);
      same(name, C, dC, (size_t)m * n, TOL_F32);
      free(A), free(B), free(C), dev->release(dA), dev->release(dB), dev->release(dC);
    }
}

static void test_bf16(void) {
  const int m = 128, n = 96, k = 256;
  size_t na = (size_t)m * k, nb = (size_t)k * n, nc = (size_t)m * n;
  float *A = rand_f(na, 1), *B = rand_f(nb, 1), *C = calloc(nc, sizeof(float)), *C32 = calloc(nc, sizeof(float));
  uint16_t *a16 = malloc(na * 2), *b16 = malloc(nb * 2), *g16 = malloc(na * 2);
  cpu->to_bf16(a16, A, na);
  cpu->to_bf16(b16, B, nb);
  float *dA = upf(A, na);
  uint16_t *dA16 = dev->alloc(na * 2), *dB16 = up(b16, nb * 2);
  dev->to_bf16(dA16, dA, na);
  dev->to_host(g16, dA16, na * 2);
  result("to_bf16 rounds as the CPU does (bit for bit)", memcmp(a16, g16, na * 2) == 0, "");
  float *back = malloc(na * sizeof(float)), *dback = dev->alloc(na * sizeof(float));
  cpu->from_bf16(back, a16, na);
  dev->from_bf16(dback, dA16, na);
  same("from_bf16", back, dback, na, 0);
  float *dC = dev->alloc(nc * sizeof(float));
  cpu->gemm_bf16(0, 1, m, n, k, 1.0f, a16, b16, 0.0f, C);
  dev->gemm_bf16(0, 1, m, n, k, 1.0f, dA16, dB16, 0.0f, dC);
  same("gemm bf16 in, f32 out vs the CPU on the same bf16 operands", C, dC, nc, TOL_F32);
  cpu->gemm(0, 1, m, n, k, 1.0f, A, B, 0.0f, C32);
  same("gemm bf16 vs f32 operands (bf16's tolerance)", C32, dC, nc, TOL_BF16);
  free(A), free(B), free(C), free(C32), free(a16), free(b16), free(g16), free(back);
  dev->release(dA), dev->release(dA16), dev->release(dB16), dev->release(dback), dev->release(dC);
}

static void test_mlp_layers(void) {
  const int n = 37, in = 50, out = 23;
  float *x = rand_f((size_t)n * in, 1), *w = rand_f((size_t)out * in, 0.3f), *b = rand_f(out, 0.1f);
  float *dx_ = upf(x, (size_t)n * in), *dw_ = upf(w, (size_t)out * in), *db_ = upf(b, out);
  for (int relu = 0; relu < 2; relu++) {
    float *y = malloc((size_t)n * out * 4), *dy = dev->alloc((size_t)n * out * 4);
    cpu->linear_forward(y, x, w, b, n, in, out, relu);
    dev->linear_forward(dy, dx_, dw_, db_, n, in, out, relu);
    same(relu ? "linear_forward + ReLU" : "linear_forward", y, dy, (size_t)n * out, TOL_F32);
    free(y), dev->release(dy);
  }
  float *g = rand_f((size_t)n * out, 1), *dg = upf(g, (size_t)n * out);
  float *gw = rand_f((size_t)out * in, 1), *gb = rand_f(out, 1), *dgw = upf(gw, (size_t)out * in), *dgb = upf(gb, out);
  cpu->linear_backward_params(gw, gb, g, x, n, in, out, 1);
  dev->linear_backward_params(dgw, dgb, dg, dx_, n, in, out, 1);
  same("linear_backward_params dw (accumulate)", gw, dgw, (size_t)out * in, TOL_F32);
  same("linear_backward_params db (accumulate)", gb, dgb, out, TOL_F32);
  /* a panel of rows [5, 17) of dw, accumulated, as the model hands DDP its gradients */
  cpu->linear_backward_weight_rows(gw, g, x, n, in, out, 5, 17, 1);
  dev->linear_backward_weight_rows(dgw, dg, dx_, n, in, out, 5, 17, 1);
  same("linear_backward_weight_rows, rows 5..17 (accumulate)", gw, dgw, (size_t)out * in, TOL_F32);
  /* bias + residual into y, then a GEMM with beta 1 adds x W^T (gpt.c's linear_into) */
  float *res = rand_f((size_t)n * out, 1), *dres = upf(res, (size_t)n * out);
  float *yb = malloc((size_t)n * out * 4), *dyb = dev->alloc((size_t)n * out * 4);
  cpu->bias_rows(yb, b, res, n, out);
  dev->bias_rows(dyb, db_, dres, n, out);
  cpu->gemm(0, 1, n, out, in, 1.0f, x, w, 1.0f, yb);
  dev->gemm(0, 1, n, out, in, 1.0f, dx_, dw_, 1.0f, dyb);
  same("bias_rows + residual, then gemm beta 1", yb, dyb, (size_t)n * out, TOL_F32);
  cpu->bias_rows(yb, b, NULL, n, out);
  dev->bias_rows(dyb, db_, NULL, n, out);
  same("bias_rows without a residual", yb, dyb, (size_t)n * out, TOL_F32);
  /* gpt.c's linear: the same, as one entry; with a residual, with the bias alone */
  cpu->linear_xwt(yb, x, w, b, res, n, in, out);
  dev->linear_xwt(dyb, dx_, dw_, db_, dres, n, in, out);
  same("linear_xwt with bias and residual", yb, dyb, (size_t)n * out, TOL_F32);
  cpu->linear_xwt(yb, x, w, b, NULL, n, in, out);
  dev->linear_xwt(dyb, dx_, dw_, db_, NULL, n, in, out);
  same("linear_xwt with the bias alone", yb, dyb, (size_t)n * out, TOL_F32);
  dev->fill_zero(dyb, (size_t)n * out * 4);
  memset(yb, 0, (size_t)n * out * 4);
  same("fill_zero", yb, dyb, (size_t)n * out, 0);
  free(res), free(yb), dev->release(dres), dev->release(dyb);
  float *gx = malloc((size_t)n * in * 4), *dgx = dev->alloc((size_t)n * in * 4);
  cpu->linear_backward_input(gx, g, w, x, n, in, out, 1);
  dev->linear_backward_input(dgx, dg, dw_, dx_, n, in, out, 1);
  same("linear_backward_input with the ReLU mask", gx, dgx, (size_t)n * in, TOL_F32);
  /* cross-entropy over 10 classes */
  const int k = 10;
  float *z = rand_f((size_t)n * k, 4), *p = malloc((size_t)n * k * 4), *dz = upf(z, (size_t)n * k);
  uint8_t *lab = rand_u8(n, k), *dlab = up(lab, n);
  float *dp = dev->alloc((size_t)n * k * 4);
  int hits = -1, dhits = -2;
  double loss = cpu->xent_forward(p, z, lab, n, k, &hits), dloss = dev->xent_forward(dp, dz, dlab, n, k, &dhits);
  same_num("xent_forward loss sum", loss, dloss, TOL_F32);
  result("xent_forward argmax hits", hits == dhits, "");
  same("xent_forward probabilities", p, dp, (size_t)n * k, TOL_F32);
  cpu->xent_backward(p, p, lab, n, k, 1.0f / n);
  dev->xent_backward(dp, dp, dlab, n, k, 1.0f / n);
  same("xent_backward (in place)", p, dp, (size_t)n * k, TOL_F32);
  free(x), free(w), free(b), free(g), free(gw), free(gb), free(gx), free(z), free(p), free(lab);
  dev->release(dx_), dev->release(dw_), dev->release(db_), dev->release(dg), dev->release(dgw);
  dev->release(dgb), dev->release(dgx), dev->release(dz), dev->release(dlab), dev->release(dp);
}

static void test_gpt_layers(void) {
  const int B = 2, T = 64, C = 64, nh = 4, V = 256, n = B * T;
  const size_t nc = (size_t)n * C;
  /* LayerNorm */
  float *x = rand_f(nc, 2), *w = rand_f(C, 1), *b = rand_f(C, 0.5f);
  float *y = malloc(nc * 4), *mean = malloc(n * 4), *rstd = malloc(n * 4);
  float *dx_ = upf(x, nc), *dw_ = upf(w, C), *db_ = upf(b, C), *dy = dev->alloc(nc * 4), *dmean = dev->alloc(n * 4),
        *drstd = dev->alloc(n * 4);
  cpu->layernorm_forward(y, mean, rstd, x, w, b, n, C);
  dev->layernorm_forward(dy, dmean, drstd, dx_, dw_, db_, n, C);
  same("layernorm_forward y", y, dy, nc, TOL_F32);
  same("layernorm_forward mean", mean, dmean, n, TOL_F32);
  same("layernorm_forward rstd", rstd, drstd, n, TOL_F32);
  float *g = rand_f(nc, 1), *gx = rand_f(nc, 1), *gw = rand_f(C, 1), *gb = rand_f(C, 1);
  float *dg = upf(g, nc), *dgx = upf(gx, nc), *dgw = upf(gw, C), *dgb = upf(gb, C);
  cpu->layernorm_backward(gx, gw, gb, g, x, w, mean, rstd, n, C, 1);
  dev->layernorm_backward(dgx, dgw, dgb, dg, dx_, dw_, dmean, drstd, n, C, 1);
  same("layernorm_backward dx (adds to the residual's)", gx, dgx, nc, TOL_F32);
  same("layernorm_backward dw (accumulate)", gw, dgw, C, TOL_F32);
  same("layernorm_backward db (accumulate)", gb, dgb, C, TOL_F32);
  float *cs = rand_f(C, 1), *dcs = upf(cs, C);
  cpu->colsum(cs, g, n, C, 0);
  dev->colsum(dcs, dg, n, C, 0);
  same("colsum", cs, dcs, C, TOL_F32);
  /* bias + GELU, GELU backward */
  float *pre = rand_f(nc, 3), *dpre = upf(pre, nc), *act = malloc(nc * 4), *dact = dev->alloc(nc * 4);
  cpu->bias_gelu_forward(act, pre, b, n, C);
  dev->bias_gelu_forward(dact, dpre, db_, n, C);
  same("bias_gelu_forward y", act, dact, nc, TOL_F32);
  same("bias_gelu_forward keeps x + b", pre, dpre, nc, TOL_F32);
  float *gg = rand_f(nc, 1), *dgg = upf(gg, nc);
  cpu->gelu_backward(gg, pre, nc);
  dev->gelu_backward(dgg, dpre, nc);
  same("gelu_backward", gg, dgg, nc, TOL_F32);
  /* attention */
  size_t n3 = 3 * nc, na = (size_t)B * nh * T * T;
  float *qkv = rand_f(n3, 1), *dqkv_in = upf(qkv, n3), *att = malloc(na * 4), *datt = dev->alloc(na * 4);
  float *ay = malloc(nc * 4), *day = dev->alloc(nc * 4);
  cpu->attn_forward(ay, att, qkv, B, T, C, nh);
  dev->attn_forward(day, datt, dqkv_in, B, T, C, nh);
  same("attn_forward y", ay, day, nc, TOL_F32);
  same("attn_forward probabilities (causal)", att, datt, na, TOL_F32);
  float *gy = rand_f(nc, 1), *dgy = upf(gy, nc), *gq = malloc(n3 * 4), *dgq = dev->alloc(n3 * 4);
  float *scratch = malloc((size_t)T * T * 4);
  cpu->attn_backward(gq, gy, qkv, att, scratch, B, T, C, nh);
  dev->attn_backward(dgq, dgy, dqkv_in, datt, scratch, B, T, C, nh); /* CUDA: unused */
  same("attn_backward dqkv", gq, dgq, n3, TOL_F32);
  /* embeddings and the tied head */
  float *wte = rand_f((size_t)V * C, 0.5f), *wpe = rand_f((size_t)T * C, 0.5f);
  float *dwte_ = upf(wte, (size_t)V * C), *dwpe_ = upf(wpe, (size_t)T * C);
  uint8_t *tok = rand_u8((size_t)n, V), *dtok = up(tok, (size_t)n);
  float *e = malloc(nc * 4), *de = dev->alloc(nc * 4);
  cpu->embed_forward(e, tok, wte, wpe, B, T, C);
  dev->embed_forward(de, dtok, dwte_, dwpe_, B, T, C);
  same("embed_forward", e, de, nc, TOL_F32);
  float *gte = rand_f((size_t)V * C, 1), *gpe = rand_f((size_t)T * C, 1);
  float *dgte = upf(gte, (size_t)V * C), *dgpe = upf(gpe, (size_t)T * C);
  cpu->embed_backward(gte, gpe, g, tok, B, T, C, 1);
  dev->embed_backward(dgte, dgpe, dg, dtok, B, T, C, 1);
  same("embed_backward dwte (adds)", gte, dgte, (size_t)V * C, TOL_F32);
  same("embed_backward dwpe (accumulate)", gpe, dgpe, (size_t)T * C, TOL_F32);
  size_t nv = (size_t)n * V;
  float *lg = malloc(nv * 4), *dlg = dev->alloc(nv * 4);
  cpu->head_forward(lg, x, wte, n, C, V);
  dev->head_forward(dlg, dx_, dwte_, n, C, V);
  same("head_forward logits", lg, dlg, nv, TOL_F32);
  uint8_t *tgt = rand_u8((size_t)n, V), *dtgt = up(tgt, (size_t)n);
  double l = cpu->softmax_xent(lg, lg, tgt, n, V), dl = dev->softmax_xent(dlg, dlg, dtgt, n, V);
  same_num("softmax_xent loss sum (in place)", l, dl, TOL_F32);
  same("softmax_xent probabilities", lg, dlg, nv, TOL_F32);
  cpu->xent_backward(lg, lg, tgt, n, V, 1.0f / n);
  dev->xent_backward(dlg, dlg, dtgt, n, V, 1.0f / n);
  float *gh = malloc(nc * 4), *dgh = dev->alloc(nc * 4);
  cpu->head_backward(gh, gte, lg, x, wte, n, C, V, 1);
  dev->head_backward(dgh, dgte, dlg, dx_, dwte_, n, C, V, 1);
  same("head_backward dh", gh, dgh, nc, TOL_F32);
  same("head_backward dwte (accumulate)", gte, dgte, (size_t)V * C, TOL_F32);
  /* host buffers are left to the exit; device ones too (the process ends here) */
}

/* Each row's log-sum-exp of its causal scores, directly and in double: lse [B, nh, T]. */
static void lse_direct(float *lse, const float *qkv, int B, int T, int C, int nh) {
  int hs = C / nh, ld = 3 * C;
  double scale = 1.0 / sqrt((double)hs), *sc = malloc((size_t)T * sizeof *sc);
  for (int b = 0; b < B; b++)
    for (int h = 0; h < nh; h++)
      for (int t = 0; t < T; t++) {
        const float *q = qkv + ((size_t)b * T + t) * ld + (size_t)h * hs;
        double mx = -INFINITY, sum = 0;
        for (int j = 0; j <= t; j++) {
          const float *k = qkv + ((size_t)b * T + j) * ld + C + (size_t)h * hs;
          double d = 0;
          for (int i = 0; i < hs; i++) d += (double)q[i] * k[i];
          sc[j] = d * scale;
          if (sc[j] > mx) mx = sc[j];
        }
        for (int j = 0; j <= t; j++) sum += exp(sc[j] - mx);
        lse[((size_t)b * nh + h) * T + t] = (float)(mx + log(sum));
      }
  free(sc);
}

/* The fused attention (no T x T scores), forward and backward, against the CPU's GEMM form and
 * its own reference, at shapes that end mid-tile and cross several key tiles, up to GPT-2
 * small's head width 64 and one of 128; bf16 inputs against the reference on the same bf16
 * bits, and against float32. */
static void test_flash(void) {
  static const struct { int B, T, C, nh; } shapes[] = {{2, 64, 64, 4}, {1, 100, 96, 3}, {2, 257, 128, 2}, {1, 130, 256, 2}};
  for (size_t c = 0; c < sizeof shapes / sizeof shapes[0]; c++) {
    int B = shapes[c].B, T = shapes[c].T, C = shapes[c].C, nh = shapes[c].nh;
    size_t nc = (size_t)B * T * C, n3 = 3 * nc, nl = (size_t)B * nh * T, na = (size_t)B * nh * T * T;
    float *qkv = rand_f(n3, 1.5f), *y = malloc(nc * 4), *att = malloc(na * 4), *fy = malloc(nc * 4), *lse = malloc(nl * 4);
    float *dqkv = upf(qkv, n3), *dy = dev->alloc(nc * 4), *dlse = dev->alloc(nl * 4);
    char name[120];
    cpu->attn_forward(y, att, qkv, B, T, C, nh); /* the materialised form */
    cpu->attn_flash_forward(fy, lse, qkv, B, T, C, nh);
    dev->attn_flash_forward(dy, dlse, dqkv, B, T, C, nh);
    snprintf(name, sizeof name, "attn_flash_forward y vs the materialised softmax (B %d T %d C %d heads %d)", B, T, C, nh);
    same(name, y, dy, nc, TOL_F32);
    lse_direct(lse, qkv, B, T, C, nh);
    snprintf(name, sizeof name, "attn_flash_forward log-sum-exp vs direct, in double (T %d, hs %d)", T, C / nh);
    same(name, lse, dlse, nl, TOL_F32);
    { /* the tensor cores' forward (train.precision bf16): against float32's within bf16's
       * tolerance, and against its reference, which rounds at the same places */
      float *ty = malloc(nc * 4), *tl = malloc(nl * 4), *dty = dev->alloc(nc * 4), *dtl = dev->alloc(nl * 4);
      cpu->attn_flash_forward_tc(ty, tl, qkv, B, T, C, nh);
      dev->attn_flash_forward_tc(dty, dtl, dqkv, B, T, C, nh);
      snprintf(name, sizeof name, "attn_flash_forward_tc y vs the float32 forward (bf16's tolerance, T %d, hs %d)", T, C / nh);
      same(name, fy, dty, nc, TOL_BF16);
      snprintf(name, sizeof name, "attn_flash_forward_tc y vs its reference (T %d, hs %d)", T, C / nh);
      same(name, ty, dty, nc, TOL_BF16_SAME);
      snprintf(name, sizeof name, "attn_flash_forward_tc log-sum-exp vs its reference (T %d, hs %d)", T, C / nh);
      same(name, tl, dtl, nl, TOL_BF16_SAME);
      free(ty), free(tl);
      dev->release(dty), dev->release(dtl);
    }
    { /* the backward: the materialised form's dqkv, from each side's own y and lse */
      float *g = rand_f(nc, 1.0f), *want = malloc(n3 * 4), *scratch = malloc((size_t)T * T * 4);
      float *dg = upf(g, nc), *dgot = dev->alloc(n3 * 4);
      cpu->attn_backward(want, g, qkv, att, scratch, B, T, C, nh);
      dev->attn_flash_backward(dgot, dg, dqkv, dy, dlse, B, T, C, nh);
      snprintf(name, sizeof name, "attn_flash_backward dqkv vs the materialised backward (T %d, hs %d)", T, C / nh);
      same(name, want, dgot, n3, TOL_F32);
      cpu->attn_flash_forward(fy, lse, qkv, B, T, C, nh);
      cpu->attn_flash_backward(want, g, qkv, fy, lse, B, T, C, nh);
      snprintf(name, sizeof name, "attn_flash_backward dqkv vs its reference (T %d, hs %d)", T, C / nh);
      same(name, want, dgot, n3, TOL_F32);
      /* the tensor cores' bf16 backward (train.precision bf16): against the float32 backward
       * within bf16's tolerance, and against its reference, which rounds at the same places */
      dev->attn_flash_backward_bf16(dgot, dg, dqkv, dy, dlse, B, T, C, nh);
      snprintf(name, sizeof name, "attn_flash_backward_bf16 dqkv vs the float32 backward (bf16's tolerance, T %d, hs %d)",
               T, C / nh);
      same(name, want, dgot, n3, TOL_BF16);
      cpu->attn_flash_backward_bf16(want, g, qkv, fy, lse, B, T, C, nh);
      snprintf(name, sizeof name, "attn_flash_backward_bf16 dqkv vs its reference (T %d, hs %d)", T, C / nh);
      same(name, want, dgot, n3, TOL_BF16_SAME);
      free(g), free(want), free(scratch);
      dev->release(dg), dev->release(dgot);
    }
    uint16_t *q16 = malloc(n3 * 2), *dq16 = dev->alloc(n3 * 2);
    cpu->to_bf16(q16, qkv, n3);
    dev->to_device(dq16, q16, n3 * 2);
    cpu->attn_flash_forward_bf16(fy, lse, q16, B, T, C, nh);
    dev->attn_flash_forward_bf16(dy, dlse, dq16, B, T, C, nh);
    snprintf(name, sizeof name, "attn_flash_forward_bf16 y vs the reference on the same bf16 inputs (T %d, hs %d)", T, C / nh);
    same(name, fy, dy, nc, TOL_F32);
    snprintf(name, sizeof name, "attn_flash_forward_bf16 y vs float32 inputs (bf16's tolerance, T %d)", T);
    same(name, y, dy, nc, TOL_BF16);
    free(qkv), free(y), free(att), free(fy), free(lse), free(q16);
    dev->release(dqkv), dev->release(dy), dev->release(dlse), dev->release(dq16);
  }
}

static void test_optim(void) {
  const size_t n = 10007;
  static const struct { const char *name; cddp_optim_spec_t s; } cases[] = {
      {"sgd plain, weight decay", {.kind = CDDP_OPTIM_SGD, .weight_decay = 0.01f}},
      {"sgd momentum nesterov, clipped", {.kind = CDDP_OPTIM_SGD, .momentum = 0.9f, .nesterov = 1, .grad_clip = 1.0f}},
      {"adamw, weight decay, clipped",
       {.kind = CDDP_OPTIM_ADAMW, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.1f, .grad_clip = 1.0f}},
  };
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    cddp_optim_t oc, od;
    if (cddp__ops_optim_init(cpu, &oc, &cases[c].s, n) != CDDP_OK || cddp__ops_optim_init(dev, &od, &cases[c].s, n) != CDDP_OK) {
      result(cases[c].name, 0, cddp_last_error());
      continue;
    }
    float *p = rand_f(n, 1), *dp = upf(p, n);
    double nc = 0, nd = 0;
    for (int step = 0; step < 3; step++) {
      float *g = rand_f(n, 0.05f), *dg = upf(g, n);
      nc = cpu->optim_step(&oc, p, g, 1e-2f);
      nd = dev->optim_step(&od, dp, dg, 1e-2f);
      free(g), dev->release(dg);
    }
    char name[96];
    snprintf(name, sizeof name, "optim_step %s: parameters after 3 steps", cases[c].name);
    same(name, p, dp, n, TOL_F32);
    snprintf(name, sizeof name, "optim_step %s: gradient norm", cases[c].name);
    same_num(name, nc, nd, TOL_F32);
    cddp__ops_optim_free(cpu, &oc), cddp__ops_optim_free(dev, &od), free(p), dev->release(dp);
  }
  float *x = rand_f(n, 3), *dx = upf(x, n);
  same_num("sumsq", cpu->sumsq(x, n), dev->sumsq(dx, n), 1e-6);
  free(x), dev->release(dx);
}

/* One MLP training step (784-128-10, ReLU, softmax cross-entropy, SGD) composed from a
 * table's entries, as the models will compose them: the same code on both tables, on device
 * buffers from each table's alloc. params: [w1 b1 w2 b2]; grads and params come back. */
enum { MB = 64, IN = 784, HID = 128, OUT = 10 };
#define MLP_PARAMS ((size_t)HID * IN + HID + (size_t)OUT * HID + OUT)

static double mlp_step(const cddp_ops_t *o, const float *hx, const uint8_t *hy, const float *hp, float *p_out,
                       float *g_out) {
  float *x = o->alloc((size_t)MB * IN * 4), *p = o->alloc(MLP_PARAMS * 4), *g = o->alloc(MLP_PARAMS * 4);
  float *h = o->alloc((size_t)MB * HID * 4), *z = o->alloc((size_t)MB * OUT * 4), *dh = o->alloc((size_t)MB * HID * 4);
  uint8_t *y = o->alloc(MB);
  o->to_device(x, hx, (size_t)MB * IN * 4);
  o->to_device(p, hp, MLP_PARAMS * 4);
  o->to_device(y, hy, MB);
  float *w1 = p, *b1 = w1 + (size_t)HID * IN, *w2 = b1 + HID, *b2 = w2 + (size_t)OUT * HID;
  float *gw1 = g, *gb1 = gw1 + (size_t)HID * IN, *gw2 = gb1 + HID, *gb2 = gw2 + (size_t)OUT * HID;
  o->linear_forward(h, x, w1, b1, MB, IN, HID, 1);
  o->linear_forward(z, h, w2, b2, MB, HID, OUT, 0);
  double loss = o->xent_forward(z, z, y, MB, OUT, NULL) / MB;
  o->xent_backward(z, z, y, MB, OUT, 1.0f / MB);
  o->linear_backward_params(gw2, gb2, z, h, MB, HID, OUT, 0);
  o->linear_backward_input(dh, z, w2, h, MB, HID, OUT, 1);
  o->linear_backward_params(gw1, gb1, dh, x, MB, IN, HID, 0);
  o->to_host(g_out, g, MLP_PARAMS * 4);
  /* SGD: linear in the gradient (Adam's first step is nearly sign(g): rounding noise on a zero
   * gradient would move a parameter by a whole step; test_optim covers AdamW) */
  cddp_optim_spec_t spec = {.kind = CDDP_OPTIM_SGD, .momentum = 0.9f, .weight_decay = 0.01f};
  cddp_optim_t opt;
  if (cddp__ops_optim_init(o, &opt, &spec, MLP_PARAMS) == CDDP_OK) {
    o->optim_step(&opt, p, g, 0.1f);
    cddp__ops_optim_free(o, &opt);
  }
  o->to_host(p_out, p, MLP_PARAMS * 4);
  o->release(x), o->release(p), o->release(g), o->release(h), o->release(z), o->release(dh), o->release(y);
  return loss;
}

static void test_mlp_step(void) {
  float *x = rand_f((size_t)MB * IN, 1), *p = rand_f(MLP_PARAMS, 0.05f);
  uint8_t *y = rand_u8(MB, OUT);
  float *pc = malloc(MLP_PARAMS * 4), *gc = malloc(MLP_PARAMS * 4), *pd = malloc(MLP_PARAMS * 4), *gd = malloc(MLP_PARAMS * 4);
  double lc = mlp_step(cpu, x, y, p, pc, gc), ld = mlp_step(dev, x, y, p, pd, gd);
  same_num("MLP step composed from the table: loss", lc, ld, TOL_F32);
  float *dgd = upf(gd, MLP_PARAMS), *dpd = upf(pd, MLP_PARAMS); /* same() reads its candidate from the device */
  same("MLP step: gradients", gc, dgd, MLP_PARAMS, TOL_F32);
  same("MLP step: parameters after SGD", pc, dpd, MLP_PARAMS, TOL_F32);
  dev->release(dgd), dev->release(dpd);
  free(x), free(p), free(y), free(pc), free(gc), free(pd), free(gd);
}

/* One step of a one-block GPT (byte vocabulary) through a table, in gpt.c's order: embeddings,
 * LN, c_attn, attention, c_proj + residual, LN, c_fc, GELU, c_proj + residual, LN, tied head,
 * cross-entropy, then the whole backward. The parameters' gradients and the loss come back. */
enum { GB = 2, GT = 32, GC = 64, GH = 4, GV = 256, GN = GB * GT };
enum { P_WTE = 0, P_WPE = P_WTE + GV * GC, P_LN1W = P_WPE + GT * GC, P_LN1B = P_LN1W + GC, P_AW = P_LN1B + GC,
       P_AB = P_AW + 3 * GC * GC, P_PW = P_AB + 3 * GC, P_PB = P_PW + GC * GC, P_LN2W = P_PB + GC, P_LN2B = P_LN2W + GC,
       P_FW = P_LN2B + GC, P_FB = P_FW + 4 * GC * GC, P_MW = P_FB + 4 * GC, P_MB = P_MW + 4 * GC * GC,
       P_LNFW = P_MB + GC, P_LNFB = P_LNFW + GC, P_COUNT = P_LNFB + GC };

static double gpt_step(const cddp_ops_t *o, const uint8_t *htok, const uint8_t *htgt, const float *hp, float *g_out) {
  const size_t nc = (size_t)GN * GC;
  float *P = o->alloc(P_COUNT * 4), *G = o->alloc(P_COUNT * 4);
  uint8_t *tok = o->alloc(GN), *tgt = o->alloc(GN);
  o->to_device(P, hp, P_COUNT * 4);
  o->to_device(tok, htok, GN);
  o->to_device(tgt, htgt, GN);
  float *x0 = o->alloc(nc * 4), *ln1 = o->alloc(nc * 4), *qkv = o->alloc(3 * nc * 4), *y = o->alloc(nc * 4);
  float *att = o->alloc((size_t)GB * GH * GT * GT * 4), *res1 = o->alloc(nc * 4), *ln2 = o->alloc(nc * 4);
  float *fc = o->alloc(4 * nc * 4), *ge = o->alloc(4 * nc * 4), *res2 = o->alloc(nc * 4), *lnf = o->alloc(nc * 4);
  float *logits = o->alloc((size_t)GN * GV * 4), *st = o->alloc(6 * GN * 4); /* mean, rstd of the 3 LNs */
  float *dres = o->alloc(nc * 4), *dsmall = o->alloc(nc * 4), *dbig = o->alloc(4 * nc * 4);
  float *scratch = malloc((size_t)GT * GT * 4);
  o->embed_forward(x0, tok, P + P_WTE, P + P_WPE, GB, GT, GC);
  o->layernorm_forward(ln1, st, st + GN, x0, P + P_LN1W, P + P_LN1B, GN, GC);
  o->bias_rows(qkv, P + P_AB, NULL, GN, 3 * GC);
  o->gemm(0, 1, GN, 3 * GC, GC, 1.0f, ln1, P + P_AW, 1.0f, qkv);
  o->attn_forward(y, att, qkv, GB, GT, GC, GH);
  o->bias_rows(res1, P + P_PB, x0, GN, GC);
  o->gemm(0, 1, GN, GC, GC, 1.0f, y, P + P_PW, 1.0f, res1);
  o->layernorm_forward(ln2, st + 2 * GN, st + 3 * GN, res1, P + P_LN2W, P + P_LN2B, GN, GC);
  o->bias_rows(fc, P + P_FB, NULL, GN, 4 * GC);
  o->gemm(0, 1, GN, 4 * GC, GC, 1.0f, ln2, P + P_FW, 1.0f, fc);
  o->bias_gelu_forward(ge, fc, NULL, GN, 4 * GC);
  o->bias_rows(res2, P + P_MB, res1, GN, GC);
  o->gemm(0, 1, GN, GC, 4 * GC, 1.0f, ge, P + P_MW, 1.0f, res2);
  o->layernorm_forward(lnf, st + 4 * GN, st + 5 * GN, res2, P + P_LNFW, P + P_LNFB, GN, GC);
  o->head_forward(logits, lnf, P + P_WTE, GN, GC, GV);
  double loss = o->softmax_xent(logits, logits, tgt, GN, GV) / GN;
  o->xent_backward(logits, logits, tgt, GN, GV, 1.0f / GN);
  o->head_backward(dsmall, G + P_WTE, logits, lnf, P + P_WTE, GN, GC, GV, 0);
  o->fill_zero(dres, nc * 4);
  o->layernorm_backward(dres, G + P_LNFW, G + P_LNFB, dsmall, res2, P + P_LNFW, st + 4 * GN, st + 5 * GN, GN, GC, 0);
  o->linear_backward_params(G + P_MW, G + P_MB, dres, ge, GN, 4 * GC, GC, 0);
  o->linear_backward_input(dbig, dres, P + P_MW, NULL, GN, 4 * GC, GC, 0);
  o->gelu_backward(dbig, fc, 4 * nc);
  o->linear_backward_params(G + P_FW, G + P_FB, dbig, ln2, GN, GC, 4 * GC, 0);
  o->linear_backward_input(dsmall, dbig, P + P_FW, NULL, GN, GC, 4 * GC, 0);
  o->layernorm_backward(dres, G + P_LN2W, G + P_LN2B, dsmall, res1, P + P_LN2W, st + 2 * GN, st + 3 * GN, GN, GC, 0);
  o->linear_backward_params(G + P_PW, G + P_PB, dres, y, GN, GC, GC, 0);
  o->linear_backward_input(dsmall, dres, P + P_PW, NULL, GN, GC, GC, 0);
  o->attn_backward(dbig, dsmall, qkv, att, scratch, GB, GT, GC, GH);
  o->linear_backward_params(G + P_AW, G + P_AB, dbig, ln1, GN, GC, 3 * GC, 0);
  o->linear_backward_input(dsmall, dbig, P + P_AW, NULL, GN, GC, 3 * GC, 0);
  o->layernorm_backward(dres, G + P_LN1W, G + P_LN1B, dsmall, x0, P + P_LN1W, st, st + GN, GN, GC, 0);
  o->fill_zero(G + P_WPE, (size_t)GT * GC * 4);
  o->embed_backward(G + P_WTE, G + P_WPE, dres, tok, GB, GT, GC, 1);
  o->to_host(g_out, G, P_COUNT * 4);
  void *bufs[] = {P, G, tok, tgt, x0, ln1, qkv, y, att, res1, ln2, fc, ge, res2, lnf, logits, st, dres, dsmall, dbig};
  for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) o->release(bufs[i]);
  free(scratch);
  return loss;
}

static void test_gpt_step(void) {
  float *p = rand_f(P_COUNT, 0.1f), *gc = malloc(P_COUNT * 4), *gd = malloc(P_COUNT * 4);
  for (int j = 0; j < GC; j++) /* LayerNorm weights near 1, as initialised */
    p[P_LN1W + j] += 1.0f, p[P_LN2W + j] += 1.0f, p[P_LNFW + j] += 1.0f;
  uint8_t *tok = rand_u8(GN, GV), *tgt = rand_u8(GN, GV);
  double lc = gpt_step(cpu, tok, tgt, p, gc), ld = gpt_step(dev, tok, tgt, p, gd);
  same_num("GPT block step composed from the table: loss", lc, ld, TOL_F32);
  float *dgd = upf(gd, P_COUNT);
  same("GPT block step: every parameter's gradient", gc, dgd, P_COUNT, TOL_F32);
  dev->release(dgd);
  free(p), free(gc), free(gd), free(tok), free(tgt);
}

/* gpt.c itself on a table (cddp__gpt_create_on): two micro-steps, the second accumulating
 * into the first's gradients; loss sums out and the gradients to the host. */
static void gpt_model_run(const cddp_ops_t *o, int recompute, double loss[2], float **g_host, size_t *np) {
  cddp_gpt_spec_t s = {.n_layer = 2, .n_head = 4, .d_model = 64, .context = 32, .vocab = 256, .recompute = recompute};
  const int B = 3;
  cddp_gpt_t *m;
  *g_host = NULL, *np = 0, loss[0] = loss[1] = NAN;
  if (cddp__gpt_create_on(o, &s, B, &m) != CDDP_OK) {
    result("gpt.c on the table: create", 0, cddp_last_error());
    return;
  }
  *np = cddp__gpt_param_count(m);
  float *params = o->alloc(*np * 4), *grads = o->alloc(*np * 4);
  cddp__gpt_bind(m, params, grads);
  cddp__gpt_init_params(m, 3);
  uint64_t keep = rng;
  rng = 12345; /* the same tokens on both tables */
  uint8_t *tok = rand_u8((size_t)B * s.context, s.vocab), *tgt = rand_u8((size_t)B * s.context, s.vocab);
  rng = keep;
  for (int k = 0; k < 2; k++) {
    loss[k] = cddp__gpt_forward(m, tok, tgt, B, k ? s.context - 5 : s.context);
    cddp__gpt_backward(m, 0.25f, k, NULL, NULL);
  }
  *g_host = malloc(*np * 4);
  o->to_host(*g_host, grads, *np * 4);
  cddp__gpt_destroy(m);
  o->release(params), o->release(grads);
  free(tok), free(tgt);
}

static void test_gpt_model(void) {
  for (int recompute = 0; recompute <= 2; recompute += 2) {
    double lc[2], ld[2];
    float *gc, *gd;
    size_t nc, nd;
    char name[96];
    gpt_model_run(cpu, recompute, lc, &gc, &nc);
    gpt_model_run(dev, recompute, ld, &gd, &nd);
    snprintf(name, sizeof name, "gpt.c on the table (recompute %s): loss of two micro-steps",
             recompute ? "block" : "none");
    same_num(name, lc[0] + lc[1], ld[0] + ld[1], TOL_F32);
    snprintf(name, sizeof name, "gpt.c on the table (recompute %s): accumulated gradients", recompute ? "block" : "none");
    if (gc && gd && nc == nd) {
      float *dgd = upf(gd, nd);
      same(name, gc, dgd, nc, TOL_F32);
      dev->release(dgd);
    } else {
      result(name, 0, "no gradients");
    }
    free(gc), free(gd);
  }
}

/* A batch's copy on the copy stream: the compute stream's next kernel, ordered by the event
 * only (no host wait), must read the new bytes. 64 MiB from pinned memory, so a kernel that
 * did not wait would start while the copy still runs. */
static void test_async_copy(void) {
  size_t n = (size_t)16 << 20;
  float *h = dev->host_alloc(n * sizeof(float)), *d = dev->alloc(n * sizeof(float));
  void *done = dev->event_create();
  if (!h || !d || !done) {
    result("async copy: buffers and event", 0, "out of memory or events");
    return;
  }
  for (size_t i = 0; i < n; i++) h[i] = frand();
  dev->to_device_async(d, h, n * sizeof(float), done);
  dev->event_wait(done);
  same_num("to_device_async + event_wait: the next kernel reads the copied batch", cpu->sumsq(h, n),
           dev->sumsq(d, n), 1e-5);
  dev->event_destroy(done), dev->release(d), dev->host_release(h);
}

/* A bucket's gradients to the host on the comm stream: the copy, ordered after the compute
 * stream's kernel by the mark only, must read what that kernel wrote (64 MiB, doubled:
 * a copy that did not wait would read undoubled bytes), seen by the host after event_sync. */
static void test_comm_copy(void) {
  size_t n = (size_t)16 << 20;
  float *h = dev->host_alloc(n * sizeof(float)), *back = dev->host_alloc(n * sizeof(float));
  float *d = dev->alloc(n * sizeof(float)), *d2 = dev->alloc(n * sizeof(float));
  void *ready = dev->event_create(), *done = dev->event_create();
  if (!h || !back || !d || !d2 || !ready || !done) {
    result("comm copy: buffers and events", 0, "out of memory or events");
    return;
  }
  for (size_t i = 0; i < n; i++) h[i] = frand();
  dev->to_device(d, h, n * sizeof(float));
  dev->to_device(d2, h, n * sizeof(float));
  dev->add_into(d, d2, n); /* queued: the compute stream is still busy when the copy is queued */
  dev->event_record(ready);
  dev->to_host_async(back, d, n * sizeof(float), ready, done);
  dev->event_sync(done);
  size_t wrong = 0;
  for (size_t i = 0; i < n; i++) wrong += back[i] != 2.0f * h[i];
  char why[64];
  snprintf(why, sizeof why, "%zu of %zu elements not the kernel's", wrong, n);
  result("event_record + to_host_async + event_sync: the comm stream reads the kernel's bytes", wrong == 0, why);
  dev->event_destroy(ready), dev->event_destroy(done);
  dev->release(d2), dev->release(d), dev->host_release(back), dev->host_release(h);
}

/* train.precision bf16 and fp16: the products round their inputs to 16 bits and accumulate in
 * float32 on either table (the CPU's gemm_bf16.c or gemm.c's fp16 rounding, cuBLAS's GemmEx on
 * the GPU), so the two agree within float32's tolerance, and differ from the float32 products
 * (the rounding ran). */
static void test_precision_half(cddp_precision_t prec, const char *pname) {
  int n = 64, C = 96, V = 200, out = 3 * C;
  size_t nv = (size_t)n * V, no = (size_t)n * out;
  float *x = rand_f((size_t)n * C, 1), *w = rand_f((size_t)V * C, 1), *b = rand_f((size_t)out, 1);
  float *wl = rand_f((size_t)out * C, 1), *dwl = upf(wl, (size_t)out * C);
  float *dx = upf(x, (size_t)n * C), *dw = upf(w, (size_t)V * C), *db = upf(b, (size_t)out);
  float *l32 = malloc(nv * 4), *l16 = malloc(nv * 4), *y16 = malloc(no * 4);
  float *dl = dev->alloc(nv * 4), *dy = dev->alloc(no * 4);
  char name[120];
  cpu->head_forward(l32, x, w, n, C, V);
  if (cddp__gemm_set_precision(prec) != CDDP_OK) {
    snprintf(name, sizeof name, "train.precision %s: set", pname);
    result(name, 0, "cddp__gemm_set_precision failed");
    return;
  }
  cpu->head_forward(l16, x, w, n, C, V);
  dev->head_forward(dl, dx, dw, n, C, V);
  snprintf(name, sizeof name, "%s precision: head_forward (the tied head's product)", pname);
  same(name, l16, dl, nv, TOL_F32);
  cpu->linear_xwt(y16, x, wl, b, NULL, n, C, out);
  dev->linear_xwt(dy, dx, dwl, db, NULL, n, C, out);
  snprintf(name, sizeof name, "%s precision: linear_xwt (bias, then the product added)", pname);
  same(name, y16, dy, no, TOL_F32);
  cddp__gemm_set_precision(CDDP_PRECISION_FP32);
  double diff = 0;
  for (size_t i = 0; i < nv; i++) diff = fmax(diff, fabs((double)l16[i] - l32[i]));
  char why[64];
  snprintf(why, sizeof why, "largest difference %.2e", diff);
  snprintf(name, sizeof name, "%s precision: the products differ from float32's (the inputs were rounded)", pname);
  result(name, diff > 1e-4, why);
  free(x), free(w), free(wl), free(b), free(l32), free(l16), free(y16);
  dev->release(dwl), dev->release(dx), dev->release(dw), dev->release(db), dev->release(dl), dev->release(dy);
}

int main(int argc, char **argv) {
  cpu = cddp__ops_for(CDDP_DEVICE_CPU);
  if (argc > 1 && !strcmp(argv[1], "--self")) {
    dev = cpu;
  } else {
    dev = gpu_or_exit();
  }
  printf("# %s table vs the CPU's\n", dev->name);
  test_gemm();
  test_bf16();
  test_mlp_layers();
  test_gpt_layers();
  test_flash();
  test_optim();
  test_mlp_step();
  test_gpt_step();
  test_gpt_model();
  test_async_copy();
  test_comm_copy();
  test_precision_half(CDDP_PRECISION_BF16, "bf16");
  test_precision_half(CDDP_PRECISION_FP16, "fp16");
  printf("1..%d\n# %d passed, %d failed\n", n_test, n_test - n_failed, n_failed);
  return n_failed ? 1 : 0;
}
