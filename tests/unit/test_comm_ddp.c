/* test_comm_ddp.c - bucketed gradient all-reduce: sums and means exact for 2 and 3 ranks,
 * buckets started from backward's hook, overlap off, parameter broadcast, world join. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "cddp/comm.h"
#include "cddp/ddp.h"
#include "cddp/store.h"
#include "comm/transport.h"
#include "test.h"

const cddp__transport_t *const ddp_force_link = &cddp__transport_shm;

#define MAXW 3
typedef struct {
  cddp_store_t *store;
  int world, overlap;
  size_t n, bucket_bytes;
  cddp_redop_t op;
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

static void *rank_main(void *p) {
  rank_arg_t *a = p;
  ddp_case_t *c = a->c;
  int rank = a->rank, bad = 0;
  cddp_comm_config_t cfg;
  cddp_comm_config_default(&cfg);
  cfg.transport = "shm";
  cddp_comm_t *comm = NULL;
  cddp_ddp_t *d = NULL;
  if (cddp_comm_init(&comm, c->store, rank, c->world, 0, &cfg) != CDDP_OK ||
      cddp_ddp_create(&d, comm, c->n, c->bucket_bytes, c->op) != CDDP_OK) {
    c->failures[rank] = -1;
    cddp_comm_destroy(comm);
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
  c->failures[rank] = bad;
  free(params);
  cddp_ddp_destroy(d);
  cddp_comm_destroy(comm);
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
  cddp_world_t w;
  CHECK_OK(cddp_world_join(&w, NULL));
  CHECK_EQ(w.rank, 0);
  CHECK_EQ(w.world, 1);
  float x = 2;
  CHECK_OK(cddp_allreduce(w.comm, &x, &x, 1, CDDP_F32, CDDP_SUM));
  CHECK(x == 2);
  cddp_world_leave(&w, 1);
}
