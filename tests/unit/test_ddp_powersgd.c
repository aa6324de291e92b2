/* test_ddp_powersgd.c - PowerSGD in DDP: Gram-Schmidt gives orthonormal columns, rank-1 gradients
 * and raw tensors come out as the exact mean, error feedback conserves the world's gradient,
 * every rank gets the same bits, buckets hold whole tensors, bytes match the formula. */
#include <cblas.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "cddp/comm.h"
#include "cddp/ddp.h"
#include "cddp/store.h"
#include "comm/transport.h"
#include "ddp/ddp_compress.h"
#include "ddp/ddp_powersgd.h"
#include "test.h"

const cddp__transport_t *const psgd_force_link = &cddp__transport_shm;

TEST(psgd_orthogonalize_gives_orthonormal_columns) {
  enum { ROWS = 50, R = 6 };
  float p[ROWS * R];
  cddp__psgd_init_q(p, ROWS * R, 7);
  double mean = 0, var = 0;
  for (int i = 0; i < ROWS * R; i++) mean += p[i] / (ROWS * R), var += (double)p[i] * p[i] / (ROWS * R);
  CHECK(fabs(mean) < 0.2 && fabs(var - 1) < 0.3); /* the seed's values: about N(0, 1) */
  cddp__psgd_orthogonalize(p, ROWS, R, CDDP_PSGD_EPS);
  double worst = 0;
  for (int a = 0; a < R; a++)
    for (int b = 0; b < R; b++) {
      double dot = 0;
      for (int k = 0; k < ROWS; k++) dot += (double)p[k * R + a] * p[k * R + b];
      worst = fmax(worst, fabs(dot - (a == b)));
    }
  fprintf(stderr, "# largest |P^T P - I|: %.3g\n", worst);
  CHECK(worst < 1e-5);
  /* a zero column stays zero (no NaN), the others are still unit */
  float z[4 * 2] = {1, 0, 2, 0, 0, 0, 2, 0};
  cddp__psgd_orthogonalize(z, 4, 2, CDDP_PSGD_EPS);
  for (int k = 0; k < 4; k++) CHECK(z[k * 2 + 1] == 0.0f);
  CHECK_NEAR(z[0] * z[0] + z[2] * z[2] + z[6] * z[6], 1.0, 1e-6);
}

TEST(psgd_lowrank_rule_and_layout) {
  CHECK(cddp__psgd_lowrank(1024, 256, 8));
  CHECK(!cddp__psgd_lowrank(256, 1, 1));   /* 1-D */
  CHECK(!cddp__psgd_lowrank(12, 10, 10));  /* rank >= min(rows, cols): never smaller */
  CHECK(!cddp__psgd_lowrank(16, 16, 8));   /* 8 x 32 = 256: not smaller than 256 */
  CHECK(cddp__psgd_lowrank(16, 16, 7));
  cddp__psgd_mat_t m[3] = {{.rows = 40, .cols = 30}, {.rows = 30, .cols = 1}, {.rows = 64, .cols = 64}};
  size_t q;
  CHECK_EQ(cddp__psgd_layout(m, 3, 4, &q), (size_t)(40 * 4 + 30 + 64 * 4));
  CHECK_EQ(q, (size_t)(30 * 4 + 64 * 4));
  CHECK_EQ(m[2].woff, (size_t)(40 * 4 + 30));
  CHECK_EQ(m[2].qoff, (size_t)(30 * 4));
}

/* A little model: a rank-1-able matrix, a bias, an uncompressible matrix, a larger matrix, and
 * buckets of 1024 floats cut at their boundaries. */
#define NT 4
static const size_t T_ROWS[NT] = {40, 30, 12, 64}, T_COLS[NT] = {30, 1, 10, 48};
#define N_FLOATS (40 * 30 + 30 + 12 * 10 + 64 * 48)
#define MAXW 3
#define STEPS 6

typedef struct {
  cddp_store_t *store;
  int world, rank1, prank;
  cddp_redop_t op;
  float out[MAXW][STEPS][N_FLOATS]; /* each rank's result after each step */
  float res[MAXW][N_FLOATS];        /* each rank's residual at the end */
  size_t res_len;
  uint64_t bytes;
  int buckets, failures[MAXW];
} psgd_case_t;
typedef struct {
  psgd_case_t *c;
  int rank;
} psgd_arg_t;

static size_t t_off(int t) {
  size_t o = 0;
  for (int i = 0; i < t; i++) o += T_ROWS[i] * T_COLS[i];
  return o;
}

/* The gradient of rank r at step s, element (i, j) of tensor t. rank1: tensor 0 is
 * (r + 1 + s) u v^T, the same direction on every rank and step. */
static float grad_at(const psgd_case_t *c, int r, int s, int t, size_t i, size_t j) {
  if (c->rank1 && t == 0) return (float)(r + 1 + s) * (float)sin(0.3 * (double)i + 1) * (float)cos(0.7 * (double)j);
  uint64_t x = ((((uint64_t)r * 131 + (uint64_t)s) * 131 + (uint64_t)t) * 4099 + i) * 4099 + j + 1;
  x *= 0x9e3779b97f4a7c15ull, x ^= x >> 29, x *= 0xbf58476d1ce4e5b9ull, x ^= x >> 32; /* noise: full rank */
  return (float)((double)(x >> 40) / (double)(1 << 24) - 0.5);
}

static void fill(const psgd_case_t *c, float *g, int r, int s) {
  for (int t = 0; t < NT; t++)
    for (size_t i = 0; i < T_ROWS[t]; i++)
      for (size_t j = 0; j < T_COLS[t]; j++) g[t_off(t) + i * T_COLS[t] + j] = grad_at(c, r, s, t, i, j);
}

static void *psgd_rank(void *p) {
  psgd_arg_t *a = p;
  psgd_case_t *c = a->c;
  int rank = a->rank;
  cddp_comm_config_t cfg;
  cddp_comm_config_default(&cfg);
  cfg.transport = "shm";
  cddp_comm_t *comm = NULL;
  cddp_ddp_t *d = NULL;
  cddp_ddp_tensor_t tt[NT];
  for (int t = 0; t < NT; t++) tt[t] = (cddp_ddp_tensor_t){t_off(t), T_ROWS[t], T_COLS[t]};
  if (cddp_comm_init(&comm, c->store, rank, c->world, 0, &cfg) != CDDP_OK ||
      cddp_ddp_create(&d, comm, N_FLOATS, 1024 * 4, c->op) != CDDP_OK ||
      cddp_ddp_set_powersgd(d, c->prank, tt, NT) != CDDP_OK) {
    fprintf(stderr, "# rank %d: %s\n", rank, cddp_last_error());
    c->failures[rank] = -1;
    goto out;
  }
  float *g = cddp_ddp_grads(d);
  for (int s = 0; s < STEPS; s++) {
    cddp_ddp_begin(d);
    fill(c, g, rank, s);
    for (int t = NT - 1; t >= 0; t--) cddp_ddp_grad_ready(d, t_off(t)); /* backward: last tensor first */
    if (cddp_ddp_finish(d) != CDDP_OK) {
      c->failures[rank]++;
      break;
    }
    memcpy(c->out[rank][s], g, sizeof c->out[rank][s]);
  }
  c->res_len = cddp__ddp_residual_len(d);
  memcpy(c->res[rank], cddp_ddp_residual(d), sizeof c->res[rank]);
  cddp_ddp_stats_t st;
  cddp_ddp_stats(d, &st, 0);
  if (rank == 0) c->bytes = st.bytes, c->buckets = cddp_ddp_bucket_count(d);
out:
  cddp_ddp_destroy(d);
  cddp_comm_destroy(comm);
  return NULL;
}

static void run_psgd(psgd_case_t *c) {
  CHECK_OK(cddp_store_mem_create(&c->store));
  pthread_t th[MAXW];
  psgd_arg_t args[MAXW];
  for (int r = 0; r < c->world; r++) args[r] = (psgd_arg_t){c, r}, pthread_create(&th[r], NULL, psgd_rank, &args[r]);
  for (int r = 0; r < c->world; r++) pthread_join(th[r], NULL);
  cddp_store_close(c->store);
  for (int r = 0; r < c->world; r++)
    if (c->failures[r]) TEST_FAIL("rank %d: %d failed steps (or set-up failed: -1)", r, c->failures[r]);
  for (int r = 1; r < c->world; r++)
    if (memcmp(c->out[0], c->out[r], sizeof c->out[0]) != 0) TEST_FAIL("rank %d's result differs from rank 0's", r);
}

/* The world's mean (op AVG) or sum (SUM) of the true gradients at step s, element k. */
static double true_reduced(const psgd_case_t *c, int s, int t, size_t i, size_t j) {
  double sum = 0;
  for (int r = 0; r < c->world; r++) sum += grad_at(c, r, s, t, i, j);
  return c->op == CDDP_AVG ? sum / c->world : sum;
}

TEST(psgd_rank1_gradients_and_raw_tensors_come_out_exact) {
  static psgd_case_t c;
  memset(&c, 0, sizeof c);
  c.world = 2, c.rank1 = 1, c.prank = 1, c.op = CDDP_SUM;
  run_psgd(&c);
  /* tensors 0 (rank 1), 1 (a bias) and 2 (12 x 10 at rank 1: 22 < 120, compressed, so skip it
   * here) against the exact sum; raw tensors bit for bit up to the sum's one rounding */
  double worst0 = 0, worst1 = 0, scale0 = 0;
  for (int s = 0; s < STEPS; s++) {
    for (size_t i = 0; i < 40; i++)
      for (size_t j = 0; j < 30; j++) {
        double want = true_reduced(&c, s, 0, i, j);
        worst0 = fmax(worst0, fabs(c.out[0][s][i * 30 + j] - want));
        scale0 = fmax(scale0, fabs(want));
      }
    for (size_t i = 0; i < 30; i++) worst1 = fmax(worst1, fabs(c.out[0][s][t_off(1) + i] - true_reduced(&c, s, 1, i, 0)));
  }
  fprintf(stderr, "# rank-1 tensor: largest error %.3g of %.3g; bias: %.3g\n", worst0, scale0, worst1);
  CHECK(worst0 < 1e-5 * scale0);
  CHECK(worst1 < 1e-5);
}

TEST(psgd_rank1_gradients_exact_at_rank_4) {
  /* P has 4 columns but M rank 1: Gram-Schmidt must drop the 3 dependent ones, not normalise
   * their rounding noise into directions that are not orthogonal */
  static psgd_case_t c;
  memset(&c, 0, sizeof c);
  c.world = 3, c.rank1 = 1, c.prank = 4, c.op = CDDP_AVG;
  run_psgd(&c);
  double worst = 0, scale = 0;
  for (int s = 0; s < STEPS; s++)
    for (size_t k = 0; k < 40 * 30; k++) {
      double want = true_reduced(&c, s, 0, k / 30, k % 30);
      worst = fmax(worst, fabs(c.out[0][s][k] - want)), scale = fmax(scale, fabs(want));
    }
  fprintf(stderr, "# rank-1 tensor at rank 4: largest error %.3g of %.3g\n", worst, scale);
  CHECK(worst < 1e-5 * scale);
}

TEST(psgd_uncompressible_matrix_travels_raw_and_exact) {
  static psgd_case_t c;
  memset(&c, 0, sizeof c);
  c.world = 3, c.prank = 10, c.op = CDDP_AVG; /* 12 x 10 at rank 10: raw; 40 x 30: 700 < 1200, low rank */
  run_psgd(&c);
  double worst = 0;
  for (int s = 0; s < STEPS; s++)
    for (size_t i = 0; i < 12 * 10; i++)
      worst = fmax(worst, fabs(c.out[0][s][t_off(2) + i] - true_reduced(&c, s, 2, i / 10, i % 10)));
  CHECK(worst < 1e-6);
  for (int r = 0; r < 3; r++)
    for (size_t i = t_off(1); i < t_off(3); i++) CHECK(c.res[r][i] == 0.0f); /* raw tensors keep no residual */
}

/* Error feedback conserves what the world sent: after S steps, the sum of the results plus the
 * world's mean residual is the sum of the true mean gradients (each step's residual is M - A,
 * the next step adds it back: a telescoping sum). */
static void check_conserved(psgd_case_t *c) {
  double worst = 0, scale = 0, err_first = 0, norm_first = 0;
  for (int t = 0; t < NT; t++)
    for (size_t i = 0; i < T_ROWS[t]; i++)
      for (size_t j = 0; j < T_COLS[t]; j++) {
        size_t k = t_off(t) + i * T_COLS[t] + j;
        double want = 0, got = 0, res = 0;
        for (int s = 0; s < STEPS; s++) want += true_reduced(c, s, t, i, j), got += c->out[0][s][k];
        for (int r = 0; r < c->world; r++) res += c->res[r][k];
        if (c->op == CDDP_AVG) res /= c->world;
        worst = fmax(worst, fabs(got + res - want));
        scale = fmax(scale, fabs(want));
        double e = c->out[0][0][k] - true_reduced(c, 0, t, i, j);
        err_first += e * e, norm_first += true_reduced(c, 0, t, i, j) * true_reduced(c, 0, t, i, j);
      }
  fprintf(stderr, "# conservation error %.3g of %.3g; first step's relative error %.3f (random gradients are not low rank)\n",
          worst, scale, sqrt(err_first / norm_first));
  CHECK(worst < 1e-5 * scale * STEPS);
  CHECK(err_first > 1e-4 * norm_first); /* the compression did compress: not an exact all-reduce */
}

TEST(psgd_error_feedback_conserves_the_sum_two_ranks) {
  static psgd_case_t c;
  memset(&c, 0, sizeof c);
  c.world = 2, c.prank = 2, c.op = CDDP_SUM;
  run_psgd(&c);
  check_conserved(&c);
  /* buckets of 1024 floats (create's least), whole tensors from the end: [64x48], [30, 12x10], [40x30] */
  CHECK_EQ(c.buckets, 3);
  /* bytes: P (rows x 2) + Q (cols x 2) of the three low-rank matrices, the bias raw; 4 bytes each */
  size_t per_step = 2 * (40 + 30) + 30 + 2 * (12 + 10) + 2 * (64 + 48);
  CHECK_EQ(c.bytes, (uint64_t)STEPS * per_step * 4);
  CHECK_EQ(c.res_len, (size_t)N_FLOATS + 2 * (30 + 10 + 48)); /* the residual, then the Q's */
}

TEST(psgd_error_feedback_conserves_the_mean_three_ranks) {
  static psgd_case_t c;
  memset(&c, 0, sizeof c);
  c.world = 3, c.prank = 4, c.op = CDDP_AVG;
  run_psgd(&c);
  check_conserved(&c);
}

TEST(psgd_rejects_bad_arguments) {
  cddp_store_t *st;
  CHECK_OK(cddp_store_mem_create(&st));
  cddp_comm_t *comm;
  CHECK_OK(cddp_comm_init(&comm, st, 0, 1, 0, NULL));
  cddp_ddp_t *d;
  CHECK_OK(cddp_ddp_create(&d, comm, 130, 0, CDDP_SUM));
  cddp_ddp_tensor_t t[2] = {{0, 10, 10}, {100, 30, 1}};
  CHECK_RESULT(cddp_ddp_set_compress(d, CDDP_COMPRESS_POWERSGD), CDDP_INVALID_USAGE);
  CHECK(strstr(cddp_last_error(), "cddp_ddp_set_powersgd") != NULL);
  CHECK_RESULT(cddp_ddp_set_powersgd(d, 0, t, 2), CDDP_INVALID_ARG);
  CHECK_RESULT(cddp_ddp_set_powersgd(d, 257, t, 2), CDDP_INVALID_ARG);
  CHECK(strstr(cddp_last_error(), "rank 257") != NULL);
  t[1].offset = 99;
  CHECK_RESULT(cddp_ddp_set_powersgd(d, 4, t, 2), CDDP_INVALID_ARG);
  CHECK(strstr(cddp_last_error(), "tensor 1") != NULL);
  t[1].offset = 100, t[1].rows = 20;
  CHECK_RESULT(cddp_ddp_set_powersgd(d, 4, t, 2), CDDP_INVALID_ARG); /* covers 120 of 130 */
  t[1].rows = 30;
  CHECK_OK(cddp_ddp_set_powersgd(d, 4, t, 2));
  CHECK_RESULT(cddp_ddp_set_powersgd(d, 4, t, 2), CDDP_INVALID_USAGE); /* once */
  cddp_ddp_destroy(d);
  cddp_comm_destroy(comm);
  cddp_store_close(st);
}

/* libcddp needs no BLAS: without one PowerSGD's GEMMs are portable loops. Those give the
 * program's BLAS result within float rounding, every step, on every rank. */
TEST(psgd_portable_gemm_matches_blas) {
  static psgd_case_t blas, loops;
  /* a strong reference: this program links the BLAS (the library's own reference is weak) */
  void (*volatile strong)(void) = (void (*)(void))cblas_sgemm;
  CHECK(strong != NULL);
  blas.world = loops.world = 2;
  blas.prank = loops.prank = 4;
  blas.op = loops.op = CDDP_AVG;
  run_psgd(&blas);
  cddp__psgd_portable_gemm = 1;
  run_psgd(&loops);
  cddp__psgd_portable_gemm = 0;
  double worst = 0;
  for (int s = 0; s < STEPS; s++)
    for (size_t k = 0; k < N_FLOATS; k++) {
      double d = fabs((double)blas.out[0][s][k] - (double)loops.out[0][s][k]) / (1e-3 + fabs((double)blas.out[0][s][k]));
      if (d > worst) worst = d;
    }
  if (!(worst < 1e-2)) TEST_FAIL("portable GEMM differs from BLAS by %.3g (relative)", worst);
  printf("# largest relative difference, portable loops vs BLAS, 6 steps: %.3g\n", worst);
}
