/* test_attn_flash.c - the fused attention's CPU reference (layer_attn_flash.c), which the CUDA
 * kernels are compared against on a GPU (tests/gpu/test_kernels): its forward and backward
 * against the materialised attention (layer_attn.c) and against finite differences, at shapes
 * that cross layer_attn.c's 64-row blocks and the kernels' 32-key tiles. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "test.h"
#include "trainer/layers_gpt.h"
#include "unit/test_model_grad.h"

/* B, T, C, heads */
static const int shapes[][4] = {{2, 5, 8, 2}, {1, 33, 12, 3}, {2, 70, 16, 2}, {1, 130, 64, 1}};
#define N_SHAPES (int)(sizeof shapes / sizeof shapes[0])

/* The largest |a - b| over n, relative to the largest |b| (at least 1): printed on failure. */
static void check_close(const char *what, int k, const float *a, const float *b, size_t n, double tol) {
  double worst = 0, scale = 1;
  size_t at = 0;
  for (size_t i = 0; i < n; i++) scale = fmax(scale, fabs(b[i]));
  for (size_t i = 0; i < n; i++) {
    double d = fabs((double)a[i] - b[i]);
    if (!(d <= worst)) worst = d, at = i; /* NaN counts as the worst */
  }
  if (!(worst / scale <= tol))
    TEST_FAIL("%s, shape %d: largest difference %.3g at [%zu] (%.9g vs %.9g), over %.3g of %.3g", what, k, worst, at,
              a[at], b[at], tol, scale);
}

TEST(flash_forward_matches_the_materialised_softmax_and_lse) {
  for (int k = 0; k < N_SHAPES; k++) {
    int B = shapes[k][0], T = shapes[k][1], C = shapes[k][2], H = shapes[k][3], hs = C / H;
    size_t nq = (size_t)B * T * 3 * C, ny = (size_t)B * T * C, nl = (size_t)B * H * T;
    float *qkv = vec(nq, 1.5f), *y = vec(ny, 0), *att = vec(nl * T, 0), *fy = vec(ny, 0), *lse = vec(nl, 0);
    cddp__attn_forward(y, att, qkv, B, T, C, H);
    cddp__attn_flash_forward(fy, lse, qkv, B, T, C, H);
    check_close("flash y vs layer_attn.c's", k, fy, y, ny, 1e-5);
    /* lse = log sum_j exp(q_i k_j / sqrt(hs)), in double */
    float *direct = vec(nl, 0);
    for (int b = 0; b < B; b++)
      for (int h = 0; h < H; h++)
        for (int i = 0; i < T; i++) {
          const float *q = qkv + ((size_t)b * T + i) * 3 * C + (size_t)h * hs;
          double sum = 0;
          for (int j = 0; j <= i; j++) {
            const float *kj = qkv + ((size_t)b * T + j) * 3 * C + C + (size_t)h * hs;
            sum += exp(dot(q, kj, (size_t)hs) / sqrt(hs));
          }
          direct[((size_t)b * H + h) * T + i] = (float)log(sum);
        }
    check_close("flash lse vs direct in double", k, lse, direct, nl, 1e-5);
    free(qkv), free(y), free(att), free(fy), free(lse), free(direct);
  }
}

TEST(flash_backward_matches_the_materialised_backward) {
  for (int k = 0; k < N_SHAPES; k++) {
    int B = shapes[k][0], T = shapes[k][1], C = shapes[k][2], H = shapes[k][3];
    size_t nq = (size_t)B * T * 3 * C, ny = (size_t)B * T * C, nl = (size_t)B * H * T;
    float *qkv = vec(nq, 1.5f), *dy = vec(ny, 1), *y = vec(ny, 0), *att = vec(nl * T, 0), *lse = vec(nl, 0);
    float *want = vec(nq, 0), *got = vec(nq, 0), *scratch = vec((size_t)T * T, 0);
    cddp__attn_forward(y, att, qkv, B, T, C, H);
    cddp__attn_backward(want, dy, qkv, att, scratch, B, T, C, H);
    cddp__attn_flash_forward(y, lse, qkv, B, T, C, H);
    for (size_t i = 0; i < nq; i++) got[i] = NAN; /* every element is written */
    cddp__attn_flash_backward(got, dy, qkv, y, lse, B, T, C, H);
    check_close("flash dqkv vs layer_attn.c's", k, got, want, nq, 1e-5);
    free(qkv), free(dy), free(y), free(att), free(lse), free(want), free(got), free(scratch);
  }
}

/* The bf16 form (the tensor-core kernels' reference): within bf16's rounding of the float32
 * backward and not its bits, at head widths 16, 64 and 128 and lengths off the 16-row tiles;
 * a width the tensor cores do not take (8) gives the float32 backward itself. */
TEST(flash_backward_bf16_is_the_float32_backward_to_bf16s_rounding) {
  static const int bshapes[][4] = {{2, 70, 32, 2}, {1, 130, 64, 1}, {1, 40, 256, 2}, {2, 5, 8, 2}};
  for (int k = 0; k < 4; k++) {
    int B = bshapes[k][0], T = bshapes[k][1], C = bshapes[k][2], H = bshapes[k][3];
    size_t nq = (size_t)B * T * 3 * C, ny = (size_t)B * T * C, nl = (size_t)B * H * T;
    float *qkv = vec(nq, 1.5f), *dy = vec(ny, 1), *y = vec(ny, 0), *lse = vec(nl, 0);
    float *want = vec(nq, 0), *got = vec(nq, 0);
    cddp__attn_flash_forward(y, lse, qkv, B, T, C, H);
    cddp__attn_flash_backward(want, dy, qkv, y, lse, B, T, C, H);
    for (size_t i = 0; i < nq; i++) got[i] = NAN; /* every element is written */
    cddp__attn_flash_backward_bf16(got, dy, qkv, y, lse, B, T, C, H);
    int tc = cddp__attn_bf16_bwd_ok(C / H);
    check_close("flash bf16 dqkv vs float32's", k, got, want, nq, tc ? 2e-2 : 0);
    if (tc) CHECK(memcmp(got, want, nq * sizeof *got) != 0); /* it did round */
    free(qkv), free(dy), free(y), free(lse), free(want), free(got);
  }
}

/* The tensor cores' forward's reference: y and lse within bf16's rounding of the float32
 * forward's, not their bits; a width the tensor cores do not take gives float32's own. */
TEST(flash_forward_tc_is_the_float32_forward_to_bf16s_rounding) {
  static const int tshapes[][4] = {{2, 70, 32, 2}, {1, 130, 64, 1}, {1, 40, 256, 2}, {2, 5, 8, 2}};
  for (int k = 0; k < 4; k++) {
    int B = tshapes[k][0], T = tshapes[k][1], C = tshapes[k][2], H = tshapes[k][3];
    size_t nq = (size_t)B * T * 3 * C, ny = (size_t)B * T * C, nl = (size_t)B * H * T;
    float *qkv = vec(nq, 1.5f), *y = vec(ny, 0), *lse = vec(nl, 0), *ty = vec(ny, 0), *tl = vec(nl, 0);
    cddp__attn_flash_forward(y, lse, qkv, B, T, C, H);
    for (size_t i = 0; i < ny; i++) ty[i] = NAN; /* every element is written */
    cddp__attn_flash_forward_tc(ty, tl, qkv, B, T, C, H);
    int tc = cddp__attn_bf16_bwd_ok(C / H);
    check_close("flash forward tc y vs float32's", k, ty, y, ny, tc ? 2e-2 : 0);
    check_close("flash forward tc lse vs float32's", k, tl, lse, nl, tc ? 2e-2 : 0);
    if (tc) CHECK(memcmp(ty, y, ny * sizeof *y) != 0); /* it did round */
    free(qkv), free(y), free(lse), free(ty), free(tl);
  }
}

typedef struct {
  float *qkv, *y, *lse, *r;
  int B, T, C, H;
} flash_t;
static double flash_loss(void *p) {
  flash_t *t = p;
  cddp__attn_flash_forward(t->y, t->lse, t->qkv, t->B, t->T, t->C, t->H);
  return dot(t->y, t->r, (size_t)t->B * t->T * t->C);
}

TEST(flash_backward_matches_finite_differences) {
  for (int k = 0; k < 2; k++) {
    int B = shapes[k][0], T = shapes[k][1], C = shapes[k][2], H = shapes[k][3];
    size_t nq = (size_t)B * T * 3 * C, ny = (size_t)B * T * C;
    flash_t t = {.qkv = vec(nq, 1.5f), .y = vec(ny, 0), .lse = vec((size_t)B * H * T, 0), .r = vec(ny, 1),
                 .B = B, .T = T, .C = C, .H = H};
    float *d = vec(nq, 0);
    flash_loss(&t);
    cddp__attn_flash_backward(d, t.r, t.qkv, t.y, t.lse, B, T, C, H);
    double *g = numeric_grad(t.qkv, nq, 1e-2f, flash_loss, &t);
    CHECK_REL("flash dqkv vs finite differences", d, g, nq, 3e-3);
    free(g), free(d), free(t.qkv), free(t.y), free(t.lse), free(t.r);
  }
}
