/* test_flat.c - the one allocation of parameters, gradients and optimizer state: its layout
 * (aligned, ordered, disjoint, zeroed), the moments each optimizer needs, bad specs refused
 * with nothing allocated, and an MLP trained over it giving the bits of separate buffers. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "test.h"
#include "trainer/flat.h"
#include "trainer/model.h"

static cddp_optim_spec_t adamw(void) {
  return (cddp_optim_spec_t){.kind = CDDP_OPTIM_ADAMW, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f,
                             .weight_decay = 0.1f, .grad_clip = 1.0f};
}

static int aligned64(const void *p) { return ((uintptr_t)p & 63) == 0; }

static int all_zero(const float *p, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (p[i] != 0.0f) return 0;
  return 1;
}

TEST(flat_layout_sections_aligned_ordered_zeroed) {
  cddp_flat_t f;
  cddp_optim_t o;
  cddp_optim_spec_t s = adamw();
  CHECK_OK(cddp__flat_create(&f, &cddp__ops_cpu, 1001, 1, &o, &s, 333)); /* a ZeRO-1 shard's moments */
  CHECK(f.params == f.base);
  CHECK(aligned64(f.params) && aligned64(f.grads) && aligned64(o.m) && aligned64(o.v));
  CHECK(f.grads >= f.params + 1001 && o.m >= f.grads + 1001 && o.v >= o.m + 333);
  CHECK(o.v + 333 <= f.base + f.floats);
  CHECK_EQ(f.slots, (size_t)1001);
  CHECK_EQ(o.n, (size_t)333);
  CHECK_EQ(o.t, 0);
  CHECK(all_zero(f.base, f.floats));
  cddp__flat_destroy(&f, &o);
  CHECK(f.base == NULL && o.m == NULL && o.v == NULL);
}

TEST(flat_moments_as_the_optimizer_needs) {
  cddp_flat_t f;
  cddp_optim_t o;
  cddp_optim_spec_t sgd = {.kind = CDDP_OPTIM_SGD};
  CHECK_OK(cddp__flat_create(&f, &cddp__ops_cpu, 100, 1, &o, &sgd, 100));
  CHECK(o.m == NULL && o.v == NULL);
  CHECK_EQ(f.floats, (size_t)2 * 112); /* two sections of 100 rounded to 16 */
  cddp__flat_destroy(&f, &o);
  sgd.momentum = 0.9f;
  CHECK_OK(cddp__flat_create(&f, &cddp__ops_cpu, 100, 1, &o, &sgd, 100));
  CHECK(o.m != NULL && o.v == NULL);
  CHECK_EQ(f.floats, (size_t)3 * 112);
  cddp__flat_destroy(&f, &o);
  /* the gradients held elsewhere (DDP's own comm memory): the momentum right after params */
  CHECK_OK(cddp__flat_create(&f, &cddp__ops_cpu, 100, 0, &o, &sgd, 100));
  CHECK(f.grads == NULL && o.m == f.params + 112);
  CHECK_EQ(f.floats, (size_t)2 * 112);
  cddp__flat_destroy(&f, &o);
}

TEST(flat_bad_spec_refused_nothing_allocated) {
  cddp_flat_t f;
  cddp_optim_t o;
  cddp_optim_spec_t s = adamw();
  s.beta2 = 1.5f;
  CHECK_RESULT(cddp__flat_create(&f, &cddp__ops_cpu, 10, 1, &o, &s, 10), CDDP_INVALID_ARG);
  CHECK(strstr(cddp_last_error(), "beta2") != NULL);
  CHECK(f.base == NULL && o.m == NULL);
  s = adamw();
  CHECK_RESULT(cddp__flat_create(&f, &cddp__ops_cpu, 0, 1, &o, &s, 10), CDDP_INVALID_ARG);
  cddp__flat_destroy(&f, &o); /* a zeroed one: a no-op */
}

/* Six AdamW steps of a small MLP: separate buffers (malloc'd, cddp__optim_init) against one
 * flat allocation. Same calls on the same values: the same bits. */
static void train(float *params, float *grads, cddp_optim_t *o, cddp_model_t *m, const float *x,
                  const uint8_t *y, int n, double *loss) {
  cddp__model_bind(m, params, grads);
  cddp__model_init_params(m, 7);
  for (int step = 0; step < 6; step++) {
    loss[step] = cddp__model_forward(m, x, y, n, NULL);
    cddp__model_backward(m, 1.0f / (float)n, 0, NULL, NULL);
    cddp__optim_step(o, params, grads, 1e-2f);
  }
}

TEST(flat_mlp_trains_to_the_bits_of_separate_buffers) {
  cddp_model_spec_t spec = {.kind = CDDP_MODEL_MLP, .in_c = 1, .in_h = 8, .in_w = 8, .n_classes = 10,
                            .n_hidden = 2, .hidden = {48, 32}};
  enum { N = 24 };
  cddp_model_t *m;
  CHECK_OK(cddp__model_create(&spec, N, &m));
  size_t np = cddp__model_param_count(m);
  float x[N * 64];
  uint8_t y[N];
  for (int i = 0; i < N * 64; i++) x[i] = (float)((i * 37) % 101) / 101.0f - 0.5f;
  for (int i = 0; i < N; i++) y[i] = (uint8_t)(i * 3 % 10);
  cddp_optim_spec_t s = adamw();
  double loss_a[6], loss_b[6];
  cddp_optim_t oa, ob;
  float *pa = calloc(np, sizeof(float)), *ga = calloc(np, sizeof(float));
  CHECK_OK(cddp__optim_init(&oa, &s, np));
  train(pa, ga, &oa, m, x, y, N, loss_a);
  cddp_flat_t f;
  CHECK_OK(cddp__flat_create(&f, &cddp__ops_cpu, np, 1, &ob, &s, np));
  train(f.params, f.grads, &ob, m, x, y, N, loss_b);
  CHECK(memcmp(loss_a, loss_b, sizeof loss_a) == 0);
  CHECK(loss_a[5] < loss_a[0]);
  CHECK(memcmp(pa, f.params, np * sizeof(float)) == 0);
  CHECK(memcmp(ga, f.grads, np * sizeof(float)) == 0);
  CHECK(memcmp(oa.m, ob.m, np * sizeof(float)) == 0 && memcmp(oa.v, ob.v, np * sizeof(float)) == 0);
  cddp__flat_destroy(&f, &ob);
  cddp__optim_free(&oa);
  free(pa), free(ga);
  cddp__model_destroy(m);
}
