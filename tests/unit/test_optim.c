/* test_optim.c - optimizers and schedules against PyTorch's values (tests/ref/optim.txt from
 * tests/ref/gen_optim.py), bad specs, and the update speed in ns per parameter (printed). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "test.h"
#include "trainer/optim.h"

#define REF_PATH "tests/ref/optim.txt"
enum { MAXN = 256 };

/* Reads floats after the tag of line into out; returns how many. */
static int parse_floats(const char *line, float *out, int max) {
  const char *p = strchr(line, ' ');
  int n = 0;
  while (p && n < max) {
    char *end;
    float v = strtof(p, &end);
    if (end == p) break;
    out[n++] = v;
    p = end;
  }
  return n;
}

static int starts(const char *line, const char *tag) {
  size_t n = strlen(tag);
  return strncmp(line, tag, n) == 0 && (line[n] == ' ' || line[n] == '\n' || line[n] == '\0');
}

/* Relative difference with a floor of 1 on the scale (values are O(1)). */
static double rel(double a, double b) {
  double s = fabs(b) > 1 ? fabs(b) : 1;
  return fabs(a - b) / s;
}

static FILE *open_ref(void) {
  FILE *f = fopen(REF_PATH, "r");
  if (!f) TEST_FAIL("%s not found (run from the repository root)", REF_PATH);
  return f;
}

TEST(optimizers_match_pytorch) {
  FILE *f = open_ref();
  char *line = NULL;
  size_t cap = 0;
  char name[64] = "";
  cddp_optim_t o;
  int active = 0, n = 0, nconfigs = 0, nsteps = 0, nclipped = 0;
  float p[MAXN], g[MAXN], want[MAXN], lr = 0;
  double worst = 0, worst_norm = 0;
  while (getline(&line, &cap, f) > 0) {
    if (starts(line, "config")) {
      char kind[16];
      cddp_optim_spec_t s = {0};
      int nest;
      if (sscanf(line, "config %63s %15s %f %d %f %f %f %f %f", name, kind, &s.momentum, &nest,
                 &s.weight_decay, &s.beta1, &s.beta2, &s.eps, &s.grad_clip) != 9)
        TEST_FAIL("bad config line: %s", line);
      s.kind = strcmp(kind, "adamw") == 0 ? CDDP_OPTIM_ADAMW : CDDP_OPTIM_SGD;
      s.nesterov = nest;
      n = 0;
      active = 1;
      nconfigs++;
      getline(&line, &cap, f);
      CHECK(starts(line, "init"));
      n = parse_floats(line, p, MAXN);
      CHECK(n > 8);
      CHECK_OK(cddp__optim_init(&o, &s, (size_t)n));
    } else if (active && starts(line, "lr")) {
      lr = strtof(line + 3, NULL);
    } else if (active && starts(line, "grad")) {
      CHECK_EQ(parse_floats(line, g, MAXN), n);
    } else if (active && starts(line, "norm")) {
      double want_norm = strtod(line + 5, NULL);
      float g_before = g[0];
      double got = cddp__optim_step(&o, p, g, lr);
      double d = rel(got, want_norm);
      if (d > worst_norm) worst_norm = d;
      if (d > 1e-6) TEST_FAIL("%s step %lld: norm %.9g vs torch %.9g", name, (long long)o.t, got, want_norm);
      if (o.spec.grad_clip > 0 && want_norm > o.spec.grad_clip) {
        nclipped++; /* clipped in place, as torch does */
        CHECK_NEAR(g[0], g_before * o.spec.grad_clip / want_norm, 1e-6 * fabs(g_before) + 1e-9);
      }
      nsteps++;
    } else if (active && starts(line, "param")) {
      CHECK_EQ(parse_floats(line, want, MAXN), n);
      for (int i = 0; i < n; i++) {
        double d = rel(p[i], want[i]);
        if (d > worst) worst = d;
        if (d > 1e-6)
          TEST_FAIL("%s step %lld param %d: %.9g vs torch %.9g (rel %.3g)", name,
                    (long long)o.t, i, p[i], want[i], d);
      }
    } else if (active && starts(line, "end")) {
      cddp__optim_free(&o);
      active = 0;
    }
  }
  free(line);
  fclose(f);
  fprintf(stderr, "# %d configs, %d steps (%d clipped): worst rel diff params %.3g, norm %.3g\n",
          nconfigs, nsteps, nclipped, worst, worst_norm);
  CHECK(nconfigs >= 10);
  CHECK(nclipped >= 6);
}

TEST(schedules_match_lambdalr) {
  FILE *f = open_ref();
  char *line = NULL;
  size_t cap = 0;
  int nvals = 0;
  double worst = 0;
  cddp_sched_spec_t s = {0};
  while (getline(&line, &cap, f) > 0) {
    if (starts(line, "sched")) {
      char kind[16];
      long long w, t;
      if (sscanf(line, "sched %15s %f %f %lld %lld", kind, &s.lr, &s.min_lr, &w, &t) != 5)
        TEST_FAIL("bad sched line: %s", line);
      s.kind = strcmp(kind, "cosine") == 0   ? CDDP_SCHED_COSINE
               : strcmp(kind, "linear") == 0 ? CDDP_SCHED_LINEAR
                                             : CDDP_SCHED_CONSTANT;
      s.warmup = w;
      s.total = t;
      CHECK_OK(cddp__sched_check(&s));
    } else if (starts(line, "at")) {
      long long step;
      double want;
      if (sscanf(line, "at %lld %lf", &step, &want) != 2) TEST_FAIL("bad line: %s", line);
      double got = cddp__sched_lr(&s, step), d = fabs(got - want) / (s.lr > 0 ? s.lr : 1);
      if (d > worst) worst = d;
      if (d > 1e-6) TEST_FAIL("schedule kind %d step %lld: %.9g vs LambdaLR %.9g", (int)s.kind,
                              step, got, want);
      nvals++;
    }
  }
  free(line);
  fclose(f);
  fprintf(stderr, "# %d schedule values, worst diff %.3g of lr\n", nvals, worst);
  CHECK(nvals > 40);
}

/* Hand-checked points of the documented formulas. */
TEST(schedule_formulas_by_hand) {
  cddp_sched_spec_t s = {CDDP_SCHED_COSINE, 1.0f, 0.0f, 4, 104};
  CHECK_NEAR(cddp__sched_lr(&s, 0), 0.25, 1e-7);
  CHECK_NEAR(cddp__sched_lr(&s, 3), 1.0, 1e-7);
  CHECK_NEAR(cddp__sched_lr(&s, 4), 1.0, 1e-7);
  CHECK_NEAR(cddp__sched_lr(&s, 54), 0.5, 1e-7);
  CHECK_NEAR(cddp__sched_lr(&s, 104), 0.0, 1e-7);
  CHECK_NEAR(cddp__sched_lr(&s, 1000), 0.0, 1e-7);
  s.kind = CDDP_SCHED_LINEAR;
  s.min_lr = 0.1f;
  CHECK_NEAR(cddp__sched_lr(&s, 29), 0.1 + 0.9 * 0.75, 1e-7);
  s.kind = CDDP_SCHED_CONSTANT;
  s.warmup = 0;
  CHECK_NEAR(cddp__sched_lr(&s, 0), 1.0, 0);
  CHECK_NEAR(cddp__sched_lr(&s, 1 << 30), 1.0, 0);
}

static void expect_bad(const cddp_optim_spec_t *s, const char *want) {
  cddp_optim_t o;
  CHECK_RESULT(cddp__optim_init(&o, s, 10), CDDP_INVALID_ARG);
  if (!strstr(cddp_last_error(), want))
    TEST_FAIL("error '%s' lacks '%s'", cddp_last_error(), want);
  CHECK(o.m == NULL && o.v == NULL);
}

TEST(bad_specs_fail_init) {
  cddp_optim_spec_t sgd = {.kind = CDDP_OPTIM_SGD, .momentum = 0.9f};
  cddp_optim_spec_t adam = {.kind = CDDP_OPTIM_ADAMW, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f};
  cddp_optim_spec_t s;
  s = sgd, s.momentum = -0.1f, expect_bad(&s, "momentum -0.1");
  s = sgd, s.momentum = 0, s.nesterov = 1, expect_bad(&s, "nesterov needs a momentum");
  s = sgd, s.weight_decay = -1e-4f, expect_bad(&s, "weight_decay");
  s = sgd, s.grad_clip = -1, expect_bad(&s, "grad_clip -1");
  s = sgd, s.grad_clip = NAN, expect_bad(&s, "grad_clip");
  s = adam, s.beta1 = 1.0f, expect_bad(&s, "beta1 1 must be in [0, 1)");
  s = adam, s.beta2 = -0.5f, expect_bad(&s, "beta2 -0.5");
  s = adam, s.eps = -1e-8f, expect_bad(&s, "eps");
  s = adam, s.kind = (cddp_optim_kind_t)7, expect_bad(&s, "unknown kind 7");
  cddp_optim_t o;
  CHECK_RESULT(cddp__optim_init(&o, &sgd, 0), CDDP_INVALID_ARG);
  CHECK_OK(cddp__optim_init(&o, &adam, 10));
  CHECK(o.m && o.v);
  cddp__optim_free(&o);
  sgd.momentum = 0;
  CHECK_OK(cddp__optim_init(&o, &sgd, 10));
  CHECK(o.m == NULL && o.v == NULL); /* plain SGD keeps no state */
  cddp__optim_free(&o);

  cddp_sched_spec_t ok = {CDDP_SCHED_COSINE, 0.1f, 0.0f, 10, 100}, b;
  CHECK_OK(cddp__sched_check(&ok));
  b = ok, b.lr = -0.1f;
  CHECK_RESULT(cddp__sched_check(&b), CDDP_INVALID_ARG);
  CHECK(strstr(cddp_last_error(), "lr -0.1") != NULL);
  b = ok, b.min_lr = 0.2f;
  CHECK_RESULT(cddp__sched_check(&b), CDDP_INVALID_ARG);
  CHECK(strstr(cddp_last_error(), "min_lr") != NULL);
  b = ok, b.warmup = -1;
  CHECK_RESULT(cddp__sched_check(&b), CDDP_INVALID_ARG);
  b = ok, b.kind = (cddp_sched_kind_t)9;
  CHECK_RESULT(cddp__sched_check(&b), CDDP_INVALID_ARG);
}

/* Clipping semantics at the edges: below the limit the grads are untouched bit for bit. */
TEST(clip_leaves_small_grads_alone) {
  cddp_optim_spec_t s = {.kind = CDDP_OPTIM_SGD, .grad_clip = 10.0f};
  cddp_optim_t o;
  float p[5] = {0}, g[5] = {1, 2, 3, 4, 5}, g0[5];
  memcpy(g0, g, sizeof g);
  CHECK_OK(cddp__optim_init(&o, &s, 5));
  double norm = cddp__optim_step(&o, p, g, 1.0f);
  CHECK_NEAR(norm, sqrt(55.0), 1e-12);
  CHECK(memcmp(g, g0, sizeof g) == 0);
  CHECK_NEAR(p[4], -5.0, 0);
  o.spec.grad_clip = 1.0f;
  norm = cddp__optim_step(&o, p, g, 1.0f);
  double after = 0;
  for (int i = 0; i < 5; i++) after += (double)g[i] * g[i];
  CHECK_NEAR(sqrt(after), 1.0, 1e-6);
  cddp__optim_free(&o);
}

static double ss_of(const float *g, int n) {
  double s = 0;
  for (int i = 0; i < n; i++) s += (double)g[i] * g[i];
  return s;
}

/* ZeRO-1: shards updated one by one (each from a 16-float line, the last shorter) with the
 * norm of the whole give the bits of one update of the whole, for SGD momentum and AdamW, with
 * and without clipping, over three steps. */
TEST(shard_updates_equal_the_whole) {
  enum { N = 1000, PER = 336 }; /* 336 + 336 + 328 */
  const cddp_optim_spec_t specs[] = {
      {.kind = CDDP_OPTIM_SGD, .momentum = 0.9f, .weight_decay = 0.01f, .grad_clip = 0.5f},
      {.kind = CDDP_OPTIM_ADAMW, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f, .weight_decay = 0.1f, .grad_clip = 0.5f},
      {.kind = CDDP_OPTIM_ADAMW, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f},
  };
  static float p[N], g[N], ps[N], gs[N];
  for (size_t c = 0; c < sizeof specs / sizeof specs[0]; c++) {
    cddp_optim_t whole, part[3];
    CHECK_OK(cddp__optim_init(&whole, &specs[c], N));
    for (int q = 0; q < 3; q++) CHECK_OK(cddp__optim_init(&part[q], &specs[c], q < 2 ? PER : N - 2 * PER));
    for (int i = 0; i < N; i++) p[i] = ps[i] = (float)((i * 37) % 101) / 101.0f - 0.5f;
    for (int step = 0; step < 3; step++) {
      for (int i = 0; i < N; i++) g[i] = gs[i] = (float)((i * 53 + step * 7) % 97) / 970.0f - 0.05f;
      double norm = cddp__optim_step(&whole, p, g, 0.01f), ss = 0;
      for (int q = 0; q < 3; q++) ss += cddp__optim_sumsq(gs + q * PER, part[q].n);
      /* without clipping the whole's norm is the log's, summed in float lanes per block */
      CHECK_NEAR(sqrt(ss), norm, (specs[c].grad_clip > 0 ? 1e-12 : 1e-6) * norm);
      for (int q = 0; q < 3; q++) cddp__optim_step_shard(&part[q], ps + q * PER, gs + q * PER, 0.01f, sqrt(ss));
      CHECK(memcmp(p, ps, sizeof p) == 0);
    }
    if (specs[c].grad_clip > 0) CHECK(sqrt(ss_of(g, N)) < 0.5 + 1e-5); /* the clip took effect */
    cddp__optim_free(&whole);
    for (int q = 0; q < 3; q++) cddp__optim_free(&part[q]);
  }
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Speed on the MLP's size (784-1024-1024-10: 1,863,690 params), printed, never asserted. */
TEST(update_speed_is_printed) {
  const size_t n = 1863690;
  float *p = malloc(n * sizeof(float)), *g = malloc(n * sizeof(float));
  CHECK(p && g);
  for (size_t i = 0; i < n; i++) p[i] = 0.01f * (float)(i % 97), g[i] = 1e-3f * (float)(i % 89);
  static const struct { const char *name; cddp_optim_spec_t s; } cfg[] = {
      {"sgd", {.kind = CDDP_OPTIM_SGD}},
      {"sgd+momentum", {.kind = CDDP_OPTIM_SGD, .momentum = 0.9f}},
      {"nesterov+wd+clip", {.kind = CDDP_OPTIM_SGD, .momentum = 0.9f, .nesterov = 1,
                            .weight_decay = 5e-4f, .grad_clip = 1e-3f}},
      {"adamw", {.kind = CDDP_OPTIM_ADAMW, .weight_decay = 0.01f, .beta1 = 0.9f,
                 .beta2 = 0.999f, .eps = 1e-8f}},
      {"adamw+clip", {.kind = CDDP_OPTIM_ADAMW, .weight_decay = 0.01f, .beta1 = 0.9f,
                      .beta2 = 0.999f, .eps = 1e-8f, .grad_clip = 1e-3f}},
  };
  for (size_t c = 0; c < sizeof cfg / sizeof cfg[0]; c++) {
    cddp_optim_t o;
    CHECK_OK(cddp__optim_init(&o, &cfg[c].s, n));
    cddp__optim_step(&o, p, g, 1e-6f); /* warm the pages */
    const int reps = 20;
    double best = 1e9;
    for (int r = 0; r < reps; r++) {
      double t0 = now_s();
      cddp__optim_step(&o, p, g, 1e-6f);
      double dt = now_s() - t0;
      best = dt < best ? dt : best;
    }
    fprintf(stderr, "# optim %-17s %zu params: best of %d %.3f ms = %.3f ns/param\n",
            cfg[c].name, n, reps, best * 1e3, best * 1e9 / (double)n);
    cddp__optim_free(&o);
  }
  free(p);
  free(g);
}
