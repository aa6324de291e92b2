/* test_comm_ddp.c - bucketed gradient all-reduce: sums and means exact for 2 and 3 ranks,
 * buckets started from backward's hook, overlap off, parameter broadcast, world join. */
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cddp/comm.h"
#include "cddp/ddp.h"
#include "cddp/store.h"
#include "comm/reduce.h"
#include "comm/transport.h"
#include "job/elastic.h"
#include "ddp/ddp_compress.h"
#include "test.h"

const cddp__transport_t *const ddp_force_link = &cddp__transport_shm;

#define MAXW 3
typedef struct {
  cddp_store_t *store;
  int world, overlap;
  size_t n, bucket_bytes;
  cddp_redop_t op;
  cddp_compress_t compress;
  int over;    /* create_over on: 1 a slice of comm memory (past a head), 2 plain heap memory */
  int failures[MAXW];
  int buckets;
  uint64_t bytes;
} ddp_case_t;

typedef struct {
  ddp_case_t *c;
  int rank;
} rank_arg_t;

/* Gradients a rank "produces": small integers, so float sums are exact. */
static float grad_value(int rank, size_t i, int step) { return (float)((int)(i % 97) + 10 * rank + step); }

#define OVER_HEAD 40 /* floats before the gradients in a create_over buffer (the parameters' place) */

/* A rank's communicator (shm) and DDP object with compression set; NULL (and nothing left
 * open) when any of it fails. over (ddp_case_t's) puts the gradients in *mem, the caller's. */
static cddp_ddp_t *open_ddp_over(cddp_store_t *store, int rank, int world, size_t n, size_t bucket, cddp_redop_t op,
                                 cddp_compress_t compress, int over, void **mem, cddp_comm_t **comm) {
  cddp_comm_config_t cfg;
  cddp_comm_config_default(&cfg);
  cfg.transport = "shm";
  cddp_ddp_t *d = NULL;
  *comm = NULL, *mem = NULL;
  size_t bytes = (OVER_HEAD + n) * sizeof(float);
  if (cddp_comm_init(comm, store, rank, world, 0, &cfg) != CDDP_OK) return NULL;
  if (over == 1 && cddp_comm_mem_alloc(*comm, bytes, mem) != CDDP_OK) *mem = NULL;
  if (over == 2) *mem = calloc(1, bytes);
  float *grads = *mem ? (float *)*mem + OVER_HEAD : NULL;
  if ((over == 0 || grads) && cddp_ddp_create_over(&d, *comm, grads, n, bucket, op) == CDDP_OK &&
      cddp_ddp_set_compress(d, compress) == CDDP_OK && (!over || cddp_ddp_grads(d) == grads))
    return d;
  cddp_ddp_destroy(d);
  if (over == 1) cddp_comm_mem_free(*comm, *mem);
  if (over == 2) free(*mem);
  cddp_comm_destroy(*comm);
  *comm = NULL, *mem = NULL;
  return NULL;
}

static cddp_ddp_t *open_ddp(cddp_store_t *store, int rank, int world, size_t n, size_t bucket, cddp_redop_t op,
                            cddp_compress_t compress, cddp_comm_t **comm) {
  void *mem;
  return open_ddp_over(store, rank, world, n, bucket, op, compress, 0, &mem, comm);
}

static void close_ddp_over(cddp_ddp_t *d, cddp_comm_t *comm, int over, void *mem) {
  cddp_ddp_destroy(d); /* leaves the caller's gradients alone: freed below, after it */
  if (over == 1) cddp_comm_mem_free(comm, mem);
  if (over == 2) free(mem);
  cddp_comm_destroy(comm);
}

static void *rank_main(void *p) {
  rank_arg_t *a = p;
  ddp_case_t *c = a->c;
  int rank = a->rank, bad = 0;
  cddp_comm_t *comm;
  void *mem;
  cddp_ddp_t *d = open_ddp_over(c->store, rank, c->world, c->n, c->bucket_bytes, c->op, c->compress, c->over, &mem, &comm);
  if (!d) {
    c->failures[rank] = -1;
    return NULL;
  }
  cddp_ddp_set_overlap(d, c->overlap);
  float *params = malloc(c->n * sizeof(float));
  for (size_t i = 0; i < c->n; i++) params[i] = rank == 1 ? (float)i : -1.0f;
  if (cddp_ddp_broadcast(d, params, 1) != CDDP_OK) bad++;
  for (size_t i = 0; i < c->n; i++) bad += params[i] != (float)i;
  float *g = cddp_ddp_grads(d);
  for (int step = 0; step < 3; step++) {
    cddp_ddp_begin(d);
    /* backward from the end in uneven layers, telling DDP as it goes */
    size_t hi = c->n;
    while (hi > 0) {
      size_t lo = hi > 1234 ? hi - 1234 : 0;
      for (size_t i = lo; i < hi; i++) g[i] = grad_value(rank, i, step);
      cddp_ddp_grad_ready(d, lo);
      hi = lo;
    }
    if (cddp_ddp_finish(d) != CDDP_OK) {
      bad++;
      break;
    }
    for (size_t i = 0; i < c->n; i++) {
      double want = 0;
      for (int r = 0; r < c->world; r++) want += grad_value(r, i, step);
      if (c->op == CDDP_AVG) want /= c->world;
      if (g[i] != (float)want) bad++;
    }
  }
  cddp_ddp_stats_t st;
  cddp_ddp_stats(d, &st, 0);
  if (rank == 0) c->buckets = st.buckets, c->bytes = st.bytes;
  /* the head of a create_over buffer (where the parameters would be) is never written */
  for (size_t i = 0; c->over && i < OVER_HEAD; i++) bad += ((float *)mem)[i] != 0.0f;
  c->failures[rank] = bad;
  free(params);
  close_ddp_over(d, comm, c->over, mem);
  return NULL;
}

static void run_case(ddp_case_t *c) {
  CHECK_OK(cddp_store_mem_create(&c->store));
  pthread_t th[MAXW];
  rank_arg_t args[MAXW];
  for (int r = 0; r < c->world; r++) {
    args[r] = (rank_arg_t){c, r};
    pthread_create(&th[r], NULL, rank_main, &args[r]);
  }
  for (int r = 0; r < c->world; r++) pthread_join(th[r], NULL);
  for (int r = 0; r < c->world; r++)
    if (c->failures[r]) TEST_FAIL("rank %d: %d wrong values (or init failed: -1)", r, c->failures[r]);
  cddp_store_close(c->store);
}

TEST(ddp_sum_two_ranks_many_buckets) {
  ddp_case_t c = {.world = 2, .overlap = 1, .n = 10007, .bucket_bytes = 4096, .op = CDDP_SUM};
  run_case(&c);
  CHECK_EQ(c.buckets, 10); /* 10007 floats in buckets of 1024 */
  CHECK_EQ(c.bytes, (uint64_t)3 * 10007 * 4);
}

TEST(ddp_over_callers_gradients_comm_memory_and_heap) {
  /* buckets as slices of the caller's buffer: a slice of comm memory (shm's zero copy) and
   * plain heap memory (staged) give the same exact sums as create's own buffer */
  for (int over = 1; over <= 2; over++) {
    ddp_case_t c = {.world = 2, .overlap = 1, .n = 10007, .bucket_bytes = 4096, .op = CDDP_SUM, .over = over};
    run_case(&c);
    CHECK_EQ(c.buckets, 10);
  }
  ddp_case_t a = {.world = 3, .overlap = 0, .n = 5000, .bucket_bytes = 8192, .op = CDDP_AVG, .over = 1};
  run_case(&a);
}

TEST(ddp_avg_three_ranks) {
  ddp_case_t c = {.world = 3, .overlap = 1, .n = 5000, .bucket_bytes = 8192, .op = CDDP_AVG};
  run_case(&c);
}

TEST(ddp_overlap_off_one_blocking_call) {
  ddp_case_t c = {.world = 2, .overlap = 0, .n = 3001, .bucket_bytes = 4096, .op = CDDP_SUM};
  run_case(&c);
}

TEST(ddp_single_bucket_default_size) {
  ddp_case_t c = {.world = 2, .overlap = 1, .n = 777, .bucket_bytes = 0, .op = CDDP_SUM};
  run_case(&c);
  CHECK_EQ(c.buckets, 1);
}

TEST(ddp_bf16_wire_small_integers_exact) {
  /* the test's gradients are integers below 256: exact in bfloat16, so sums stay exact */
  ddp_case_t c = {.world = 2, .overlap = 1, .n = 10007, .bucket_bytes = 4096, .op = CDDP_SUM,
                  .compress = CDDP_COMPRESS_BF16};
  run_case(&c);
  CHECK_EQ(c.bytes, (uint64_t)3 * 10007 * 2); /* half of float32's */
}

TEST(ddp_f16_wire_small_integers_exact) {
  /* integers below 2048 are exact in half precision, and so are their sums here */
  ddp_case_t c = {.world = 2, .overlap = 1, .n = 10007, .bucket_bytes = 4096, .op = CDDP_SUM,
                  .compress = CDDP_COMPRESS_F16};
  run_case(&c);
  CHECK_EQ(c.bytes, (uint64_t)3 * 10007 * 2); /* half of float32's */
  ddp_case_t a = {.world = 2, .overlap = 0, .n = 3001, .bucket_bytes = 4096, .op = CDDP_AVG,
                  .compress = CDDP_COMPRESS_F16}; /* halves of integers < 1024: exact too */
  run_case(&a);
}

/* f16 with AVG: each rank rounds g / world, the halves are summed in f32 and rounded once.
 * So 40000 + 40000 (past 65504 as a sum) averages fine, the smallest subnormal divided by 2
 * vanishes (the price of dividing first), and with SUM the big sum is inf. */
#define F16_N 4
static const float f16_in[2][F16_N] = {{40000.0f, 0x1p-24f, 0.1f, -3.3f}, {40000.0f, 0x1p-24f, 0.7f, 1e-3f}};
typedef struct {
  cddp_store_t *store;
  cddp_redop_t op;
  float out[2][F16_N];
  int failures[2];
} f16_case_t;
typedef struct {
  f16_case_t *c;
  int rank;
} f16_arg_t;

static void *f16_rank(void *p) {
  f16_arg_t *a = p;
  f16_case_t *c = a->c;
  cddp_comm_t *comm;
  cddp_ddp_t *d = open_ddp(c->store, a->rank, 2, F16_N, 0, c->op, CDDP_COMPRESS_F16, &comm);
  if (!d) {
    c->failures[a->rank] = -1;
    return NULL;
  }
  float *g = cddp_ddp_grads(d);
  cddp_ddp_begin(d);
  memcpy(g, f16_in[a->rank], sizeof f16_in[0]);
  cddp_ddp_grad_ready(d, 0);
  if (cddp_ddp_finish(d) != CDDP_OK) c->failures[a->rank]++;
  memcpy(c->out[a->rank], g, sizeof c->out[0]);
  cddp_ddp_destroy(d);
  cddp_comm_destroy(comm);
  return NULL;
}

static void f16_run(f16_case_t *c, cddp_redop_t op) {
  memset(c, 0, sizeof *c);
  c->op = op;
  CHECK_OK(cddp_store_mem_create(&c->store));
  pthread_t th[2];
  f16_arg_t args[2] = {{c, 0}, {c, 1}};
  for (int r = 0; r < 2; r++) pthread_create(&th[r], NULL, f16_rank, &args[r]);
  for (int r = 0; r < 2; r++) pthread_join(th[r], NULL);
  CHECK_EQ(c->failures[0], 0);
  CHECK_EQ(c->failures[1], 0);
  CHECK(memcmp(c->out[0], c->out[1], sizeof c->out[0]) == 0);
  cddp_store_close(c->store);
}

TEST(ddp_f16_avg_divides_before_the_sum) {
  static f16_case_t c;
  f16_run(&c, CDDP_AVG);
  for (int i = 0; i < F16_N; i++) {
    float h0 = cddp__f16_to_f32(cddp__f32_to_f16(f16_in[0][i] * 0.5f));
    float h1 = cddp__f16_to_f32(cddp__f32_to_f16(f16_in[1][i] * 0.5f));
    float want = cddp__f16_to_f32(cddp__f32_to_f16(h0 + h1));
    if (c.out[0][i] != want) TEST_FAIL("avg element %d: %.9g, want %.9g", i, c.out[0][i], want);
  }
  CHECK(c.out[0][0] == 40000.0f);
  CHECK(c.out[0][1] == 0.0f);
  CHECK(fabsf(c.out[0][2] - 0.4f) < 1e-3f && c.out[0][2] != 0.4f); /* rounded to half precision */
  f16_run(&c, CDDP_SUM);
  CHECK(isinf(c.out[0][0]) && c.out[0][0] > 0);
  CHECK(c.out[0][1] == 0x1p-23f);
}

/* Sign compression with error feedback, 2 ranks, the same gradient every step. What the
 * signs lose is kept in each rank's residual, so after K steps the sum of the outputs
 * equals K x (g0 + g1) minus the residuals left (r_K = sum g - sum q, telescoping). */
#define SIGN_N 5000
#define SIGN_STEPS 40
typedef struct {
  cddp_store_t *store;
  float out_sum[2][SIGN_N], residual[2][SIGN_N];
  uint64_t bytes;
  int failures[2];
} sign_case_t;
typedef struct {
  sign_case_t *c;
  int rank;
} sign_arg_t;

static float sign_grad(int rank, size_t i) { return (float)sin((double)i * 0.37 + rank) * (1.0f + (float)(i % 7)); }

static void *sign_rank(void *p) {
  sign_arg_t *a = p;
  sign_case_t *c = a->c;
  cddp_comm_t *comm;
  cddp_ddp_t *d = open_ddp(c->store, a->rank, 2, SIGN_N, 4096, CDDP_SUM, CDDP_COMPRESS_SIGN, &comm);
  if (!d) {
    c->failures[a->rank] = -1;
    return NULL;
  }
  float *g = cddp_ddp_grads(d);
  for (int step = 0; step < SIGN_STEPS; step++) {
    cddp_ddp_begin(d);
    for (size_t i = 0; i < SIGN_N; i++) g[i] = sign_grad(a->rank, i);
    cddp_ddp_grad_ready(d, 0);
    if (cddp_ddp_finish(d) != CDDP_OK) c->failures[a->rank]++;
    for (size_t i = 0; i < SIGN_N; i++) c->out_sum[a->rank][i] += g[i];
  }
  memcpy(c->residual[a->rank], cddp_ddp_residual(d), sizeof c->residual[a->rank]);
  cddp_ddp_stats_t st;
  cddp_ddp_stats(d, &st, 0);
  if (a->rank == 0) c->bytes = st.bytes;
  cddp_ddp_destroy(d);
  cddp_comm_destroy(comm);
  return NULL;
}

TEST(ddp_sign_error_feedback_keeps_what_the_signs_lose) {
  static sign_case_t c;
  memset(&c, 0, sizeof c);
  CHECK_OK(cddp_store_mem_create(&c.store));
  pthread_t th[2];
  sign_arg_t args[2] = {{&c, 0}, {&c, 1}};
  for (int r = 0; r < 2; r++) pthread_create(&th[r], NULL, sign_rank, &args[r]);
  for (int r = 0; r < 2; r++) pthread_join(th[r], NULL);
  CHECK_EQ(c.failures[0], 0);
  CHECK_EQ(c.failures[1], 0);
  double worst = 0, worst_res = 0, mean_true = 0, res2 = 0, g2 = 0;
  for (size_t i = 0; i < SIGN_N; i++) {
    if (c.out_sum[0][i] != c.out_sum[1][i]) TEST_FAIL("ranks disagree at %zu", i);
    double want = SIGN_STEPS * ((double)sign_grad(0, i) + sign_grad(1, i)) - c.residual[0][i] - c.residual[1][i];
    double err = fabs(c.out_sum[0][i] - want);
    if (err > worst) worst = err;
    if (fabs(c.residual[0][i]) > worst_res) worst_res = fabs(c.residual[0][i]);
    res2 += (double)c.residual[0][i] * c.residual[0][i];
    g2 += (double)sign_grad(0, i) * sign_grad(0, i);
    mean_true += fabs(SIGN_STEPS * ((double)sign_grad(0, i) + sign_grad(1, i))) / SIGN_N;
  }
  /* telescoping holds up to float rounding; the residual stays bounded (a few scales) */
  CHECK(worst < 1e-3 * mean_true);
  fprintf(stderr, "# residual norm %.2f x one step's gradient norm after %d steps (largest %.1f); telescoping error %.3g of mean |sum g| %.3g\n",
          sqrt(res2 / g2), SIGN_STEPS, worst_res, worst, mean_true);
  /* bounded: a few steps' worth of gradient, not SIGN_STEPS' worth (sign with mean scale is a
   * contraction, so error feedback cannot run away) */
  CHECK(sqrt(res2 / g2) < 6.0);
  /* 5000 floats in 5 buckets (4 of 1024, one of 904): one scale per 128 elements (8 per
   * bucket) + 1 bit per element, 4 bytes/word */
  CHECK_EQ(c.bytes, (uint64_t)SIGN_STEPS * (4 * (8 + 32) + 1 * (8 + (904 + 31) / 32)) * 4);
  cddp_store_close(c.store);
}

TEST(ddp_rejects_bad_arguments) {
  cddp_store_t *st;
  CHECK_OK(cddp_store_mem_create(&st));
  cddp_comm_t *comm;
  CHECK_OK(cddp_comm_init(&comm, st, 0, 1, 0, NULL));
  cddp_ddp_t *d;
  CHECK_RESULT(cddp_ddp_create(&d, comm, 0, 0, CDDP_SUM), CDDP_INVALID_ARG);
  CHECK_RESULT(cddp_ddp_create(&d, comm, 10, 0, CDDP_MAX), CDDP_INVALID_ARG);
  CHECK(strstr(cddp_last_error(), "sum or avg") != NULL);
  CHECK_RESULT(cddp_ddp_create(&d, NULL, 10, 0, CDDP_SUM), CDDP_INVALID_ARG);
  cddp_comm_destroy(comm);
  cddp_store_close(st);
}

TEST(world_join_alone_without_launcher) {
  /* no launcher variables: a world of one, as a plain `cddp train` run */
  unsetenv("RANK"), unsetenv("WORLD_SIZE"), unsetenv("CDDP_STORE"), unsetenv("SLURM_PROCID");
  unsetenv("OMPI_COMM_WORLD_RANK"), unsetenv("PMI_RANK");
  cddp_world_t *w;
  CHECK_OK(cddp_world_join(&w, NULL));
  CHECK_EQ(cddp_world_rank(w), 0);
  CHECK_EQ(cddp_world_size(w), 1);
  float x = 2;
  CHECK_OK(cddp_allreduce(cddp_world_comm(w), &x, &x, 1, CDDP_F32, CDDP_SUM));
  CHECK(x == 2);
  cddp_world_leave(w, 1);
}

/* A first start whose communicator forms past the generation it was started in: rank 1 died
 * as the job started and its replacement (generation 1) is already waiting. Rank 0 (started
 * in generation 0, no replacement flag) must join generation 1 and count as a replacement,
 * so that it goes to the state sync with rank 1 and not to the first start's collectives. */
static int late_port;
static void late_rank(int rank, int world, void *arg) {
  (void)arg;
  char v[32];
  snprintf(v, sizeof v, "127.0.0.1:%d", late_port);
  setenv("CDDP_STORE", v, 1);
  snprintf(v, sizeof v, "%d", rank);
  setenv("RANK", v, 1), setenv("LOCAL_RANK", v, 1);
  snprintf(v, sizeof v, "%d", world);
  setenv("WORLD_SIZE", v, 1), setenv("LOCAL_WORLD_SIZE", v, 1);
  setenv("CDDP_RESTART_MODE", "replace", 1);
  setenv("CDDP_RUN_ID", "late", 1);
  setenv("CDDP_GEN", rank == 0 ? "0" : "1", 1);
  setenv("CDDP_REPLACEMENT", rank == 0 ? "0" : "1", 1);
  setenv("CDDP_TIMEOUT_MS", "20000", 1);
  unsetenv("CDDP_AGENT_ID");
  cddp_world_t *w;
  CHECK_OK(cddp_world_join(&w, NULL));
  if (cddp_world_generation(w) != 1 || !cddp_world_replacement(w))
    TEST_FAIL("rank %d: generation %d, replacement %d (want 1, 1)", rank, cddp_world_generation(w),
              cddp_world_replacement(w));
  float x = (float)(rank + 1);
  CHECK_OK(cddp_allreduce(cddp_world_comm(w), &x, &x, 1, CDDP_F32, CDDP_SUM));
  CHECK(x == 3);
  cddp_world_leave(w, 1);
}
TEST_TIMEOUT(world_join_late_first_start_syncs_state, 60) {
  cddp_test_store_child_t srv;
  CHECK((late_port = cddp_test_store_child_start(&srv)) > 0);
  cddp_store_t *base, *s; /* the job's keys live under "<run id>/" */
  CHECK_OK(cddp_store_tcp_connect(&base, "127.0.0.1", late_port, NULL, 5000));
  CHECK_OK(cddp_store_prefix_create(&s, base, "late/", 1));
  int64_t g;
  cddp__job_announce_t a = cddp__job_announce_replace(1, 1);
  CHECK_OK(cddp__gen_bump(s, &a, &g));
  CHECK_EQ(g, 1);
  cddp_store_close(s);
  int failed = cddp_test_fork_ranks(2, late_rank, NULL, 45);
  CHECK(cddp_test_store_child_stop(&srv));
  CHECK_EQ(failed, 0);
}

/* Sign-Adam's local moments: after 3 steps of g, 2g, -g (gscale 2) m and v are the EMAs of the
 * scaled gradients, as Adam's own formulas give them. */
TEST(ddp_sign_adam_local_moments_are_adams) {
  float m[5] = {0}, v[5] = {0}, g[5] = {1, -2, 0.5f, 0, 3};
  const float k[3] = {1, 2, -1}, b1 = 0.9f, b2 = 0.95f;
  for (int s = 0; s < 3; s++) {
    float gs[5];
    for (int i = 0; i < 5; i++) gs[i] = g[i] * k[s];
    cddp__adam_moments(m, v, gs, 5, b1, b2, 2.0f);
  }
  for (int i = 0; i < 5; i++) {
    double em = 0, ev = 0;
    for (int s = 0; s < 3; s++) {
      double x = 2.0 * g[i] * k[s];
      em = b1 * em + (1 - b1) * x, ev = b2 * ev + (1 - b2) * x * x;
    }
    CHECK_NEAR(m[i], em, 1e-5);
    CHECK_NEAR(v[i], ev, 1e-5);
  }
  uint16_t w[5];
  float back[5];
  cddp__to_bf16_scaled(w, g, 5, 4.0f);
  cddp__from_bf16(back, w, 5);
  for (int i = 0; i < 5; i++) CHECK_NEAR(back[i], 4.0f * g[i], 1e-6); /* exact in bf16 */
}
