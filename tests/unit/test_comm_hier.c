/* test_comm_hier.c - the hierarchical transport with fake hosts (peer host ids) as threads:
 * every collective, dtype and op against references, bit-identical results on every rank,
 * placement detection and the refusal of uneven hosts. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "comm/hier.h"
#include "comm/reduce.h"
#include "common/clock.h"
#include "test.h"

#define MAXW 8

/* ---- ranks as threads; host_of(r) decides which fake host each rank is on ---- */

typedef struct job job_t;
typedef struct hrank {
  int rank;
  job_t *job;
  cddp_store_t *store;
  cddp__comm_ctx_t ctx;
  int aborted;
  void *st;
  pthread_t th;
} hrank_t;

struct job {
  int world;
  cddp_comm_config_t cfg;
  cddp__peer_t peers[MAXW];
  cddp_store_t *base;
  hrank_t r[MAXW];
  pthread_barrier_t bar;
  void (*body)(hrank_t *);
  void *out[MAXW];
};

static void *rank_main(void *p) {
  hrank_t *tr = p;
  CHECK_OK(cddp__transport_hier.init(&tr->ctx, &tr->st));
  tr->job->body(tr);
  cddp__transport_hier.destroy(tr->st);
  return NULL;
}

static void run_job(int world, const int *host_of, cddp_algo_t algo, void (*body)(hrank_t *)) {
  job_t j = {.world = world, .body = body};
  j.cfg = (cddp_comm_config_t){"native", "hier", 2, 20000, algo};
  CHECK_OK(cddp_store_mem_create(&j.base));
  pthread_barrier_init(&j.bar, NULL, (unsigned)world);
  for (int r = 0; r < world; r++) {
    snprintf(j.peers[r].host, sizeof j.peers[r].host, "fake%d", host_of[r]);
    snprintf(j.peers[r].host_id, sizeof j.peers[r].host_id, "id-%d", host_of[r]);
    j.peers[r].pid = getpid();
  }
  for (int r = 0; r < world; r++) {
    hrank_t *tr = &j.r[r];
    tr->rank = r, tr->job = &j;
    CHECK_OK(cddp_store_prefix_create(&tr->store, j.base, "comm/r0/", 0));
    tr->ctx = (cddp__comm_ctx_t){r, world, 0, tr->store, &j.cfg, j.peers, &tr->aborted, 0, tr->store};
  }
  for (int r = 0; r < world; r++) CHECK(pthread_create(&j.r[r].th, NULL, rank_main, &j.r[r]) == 0);
  for (int r = 0; r < world; r++) pthread_join(j.r[r].th, NULL);
  for (int r = 0; r < world; r++) cddp_store_close(j.r[r].store);
  pthread_barrier_destroy(&j.bar);
  cddp_store_close(j.base);
}

/* ---- values and references (small integers: exact in every dtype) ---- */

static double val(int rank, size_t i) { return (double)((rank * 7 + (int)(i % 1000) * 3) % 17) - 8; }

static void put(void *buf, cddp_dtype_t dt, size_t i, double v) {
  switch (dt) {
    case CDDP_F32: ((float *)buf)[i] = (float)v; break;
    case CDDP_F64: ((double *)buf)[i] = v; break;
    case CDDP_BF16: { float f = (float)v; uint32_t u; memcpy(&u, &f, 4); ((uint16_t *)buf)[i] = (uint16_t)(u >> 16); break; }
    case CDDP_F16: ((uint16_t *)buf)[i] = cddp__f32_to_f16((float)v); break;
    case CDDP_I32: ((int32_t *)buf)[i] = (int32_t)v; break;
    default: ((int64_t *)buf)[i] = (int64_t)v;
  }
}

static double get(const void *buf, cddp_dtype_t dt, size_t i) {
  switch (dt) {
    case CDDP_F32: return ((const float *)buf)[i];
    case CDDP_F64: return ((const double *)buf)[i];
    case CDDP_BF16: { uint32_t u = (uint32_t)((const uint16_t *)buf)[i] << 16; float f; memcpy(&f, &u, 4); return f; }
    case CDDP_F16: return cddp__f16_to_f32(((const uint16_t *)buf)[i]);
    case CDDP_I32: return ((const int32_t *)buf)[i];
    default: return (double)((const int64_t *)buf)[i];
  }
}

static double ref_reduce(cddp_dtype_t dt, cddp_redop_t op, int world, size_t i) {
  double acc = val(0, i);
  for (int r = 1; r < world; r++) {
    double v = val(r, i);
    acc = op == CDDP_MAX ? (v > acc ? v : acc) : op == CDDP_MIN ? (v < acc ? v : acc) : acc + v;
  }
  if (op == CDDP_AVG) {
    if (dt == CDDP_I32 || dt == CDDP_I64) return (double)(int64_t)(acc * (1.0 / world));
    return acc / world;
  }
  return acc;
}

static void check_buf(const void *buf, cddp_dtype_t dt, size_t n, double (*want)(size_t, void *), void *arg,
                      const char *what, int rank) {
  double tol = dt == CDDP_BF16 ? 0.07 : dt == CDDP_F16 ? 0.01 : 1e-5;
  for (size_t i = 0; i < n; i++) {
    double w = want(i, arg), g = get(buf, dt, i);
    if (!(fabs(g - w) <= tol))
      TEST_FAIL("%s rank %d %s n=%zu: element %zu is %g, want %g", what, rank, cddp_dtype_name(dt), n, i, g, w);
  }
}

/* Every rank's result is bit-identical to rank 0's. */
static void check_same(hrank_t *tr, void *buf, size_t bytes, const char *what) {
  job_t *j = tr->job;
  j->out[tr->rank] = buf;
  pthread_barrier_wait(&j->bar);
  if (tr->rank != 0 && memcmp(buf, j->out[0], bytes) != 0)
    TEST_FAIL("%s: rank %d's result differs from rank 0's", what, tr->rank);
  pthread_barrier_wait(&j->bar);
}

static cddp_result_t run(hrank_t *tr, cddp__coll_kind_t kind, const void *send, void *recv, size_t n,
                         cddp_dtype_t dt, cddp_redop_t op, int root) {
  cddp__coll_t c = {kind, send, recv, n, dt, op, root, tr->job->cfg.algo, cddp__now_ns() + 20000000000ull, {0}};
  return cddp__transport_hier.run(tr->st, &c);
}

/* ---- the matrix ---- */

typedef struct { cddp_dtype_t dt; cddp_redop_t op; int world, rank; size_t n; } ref_arg_t;
static double want_reduce(size_t i, void *a) { ref_arg_t *r = a; return ref_reduce(r->dt, r->op, r->world, i); }
static double want_rs(size_t i, void *a) { ref_arg_t *r = a; return ref_reduce(r->dt, r->op, r->world, (size_t)r->rank * r->n + i); }
static double want_ag(size_t i, void *a) { ref_arg_t *r = a; return val((int)(i / r->n), i % r->n); }
static double want_bc(size_t i, void *a) { ref_arg_t *r = a; return val(r->rank, i); }

static const size_t counts[] = {0, 1, 5, 7, 1000, 16411, 40001};
static const cddp_dtype_t dtypes[] = {CDDP_F32, CDDP_F64, CDDP_BF16, CDDP_I32, CDDP_I64, CDDP_F16};
static const cddp_redop_t ops[] = {CDDP_SUM, CDDP_AVG, CDDP_MAX, CDDP_MIN};

static void matrix(hrank_t *tr) {
  int rank = tr->rank, W = tr->job->world;
  size_t maxn = 40001 * (size_t)W;
  char *send = malloc(maxn * 8), *recv = malloc(maxn * 8);
  for (size_t ci = 0; ci < sizeof counts / sizeof counts[0]; ci++) {
    size_t n = counts[ci];
    for (size_t di = 0; di < 5; di++) {
      cddp_dtype_t dt = dtypes[di];
      size_t es = cddp_dtype_size(dt);
      for (size_t oi = 0; oi < 4; oi++) {
        cddp_redop_t op = ops[oi];
        ref_arg_t ra = {dt, op, W, rank, n};
        for (int inplace = 0; inplace < 2; inplace++) {
          void *out = inplace ? send : recv;
          for (size_t i = 0; i < n; i++) put(send, dt, i, val(rank, i));
          if (!inplace) memset(recv, 0x5a, n * es);
          CHECK_OK(run(tr, CDDP__ALLREDUCE, send, out, n, dt, op, 0));
          check_buf(out, dt, n, want_reduce, &ra, "allreduce", rank);
          check_same(tr, out, n * es, "allreduce");
        }
        if (n > 1000 && oi > 1) continue; /* the other kinds: fewer large cases */
        for (size_t i = 0; i < n * (size_t)W; i++) put(send, dt, i, val(rank, i));
        memset(recv, 0x5a, n * es);
        CHECK_OK(run(tr, CDDP__REDUCE_SCATTER, send, recv, n, dt, op, 0));
        check_buf(recv, dt, n, want_rs, &ra, "reduce_scatter", rank);
      }
      if (n > 1000 && di > 0) continue;
      ref_arg_t ra = {dt, CDDP_SUM, W, rank, n};
      for (size_t i = 0; i < n; i++) put(send, dt, i, val(rank, i));
      memset(recv, 0x5a, n * es * (size_t)W);
      CHECK_OK(run(tr, CDDP__ALLGATHER, send, recv, n, dt, CDDP_SUM, 0));
      if (n) check_buf(recv, dt, n * (size_t)W, want_ag, &ra, "allgather", rank);
      /* in place: my block already inside recv */
      memset(recv, 0x5a, n * es * (size_t)W);
      for (size_t i = 0; i < n; i++) put(recv + (size_t)rank * n * es, dt, i, val(rank, i));
      CHECK_OK(run(tr, CDDP__ALLGATHER, recv + (size_t)rank * n * es, recv, n, dt, CDDP_SUM, 0));
      if (n) check_buf(recv, dt, n * (size_t)W, want_ag, &ra, "allgather in place", rank);
      for (int root = 0; root < W; root++) {
        ref_arg_t rb = {dt, CDDP_SUM, W, root, n};
        for (size_t i = 0; i < n; i++) put(recv, dt, i, rank == root ? val(root, i) : 99);
        CHECK_OK(run(tr, CDDP__BROADCAST, recv, recv, n, dt, CDDP_SUM, root));
        check_buf(recv, dt, n, want_bc, &rb, "broadcast", rank);
      }
      CHECK_OK(run(tr, CDDP__BARRIER, NULL, NULL, 0, dt, CDDP_SUM, 0));
    }
  }
  free(send);
  free(recv);
}

/* Ranks interleaved over 3 hosts (rank r on host r % 3): the block permutations matter. */
static const int interleaved3x2[] = {0, 1, 2, 0, 1, 2};
/* Contiguous 2 hosts x 3 ranks (count % 3 != 0 exercises the left-over tail). */
static const int contiguous2x3[] = {0, 0, 0, 1, 1, 1};

TEST_TIMEOUT(hier_matrix_3x2_interleaved, 240) { run_job(6, interleaved3x2, CDDP_ALGO_AUTO, matrix); }
TEST_TIMEOUT(hier_matrix_2x3_contiguous, 240) { run_job(6, contiguous2x3, CDDP_ALGO_AUTO, matrix); }

/* Forced algorithms take the other paths (ring: slices for any size; direct: small path). */
static void forced(hrank_t *tr) {
  int rank = tr->rank, W = tr->job->world;
  size_t n = 70001;
  float *buf = malloc(n * sizeof *buf);
  for (size_t i = 0; i < n; i++) put(buf, CDDP_F32, i, val(rank, i));
  CHECK_OK(run(tr, CDDP__ALLREDUCE, buf, buf, n, CDDP_F32, CDDP_SUM, 0));
  ref_arg_t ra = {CDDP_F32, CDDP_SUM, W, rank, n};
  check_buf(buf, CDDP_F32, n, want_reduce, &ra, "forced allreduce", rank);
  check_same(tr, buf, n * sizeof *buf, "forced allreduce");
  /* fractional values: the same bits everywhere even where rounding happens */
  for (size_t i = 0; i < n; i++) buf[i] = (float)(rank + 1) * 0.1f + (float)i * 1e-3f;
  CHECK_OK(run(tr, CDDP__ALLREDUCE, buf, buf, n, CDDP_F32, CDDP_AVG, 0));
  CHECK_NEAR(buf[12345], (W + 1) * 0.05 + 12.345, 1e-3);
  check_same(tr, buf, n * sizeof *buf, "forced allreduce (fractions)");
  free(buf);
}

TEST_TIMEOUT(hier_forced_ring, 120) { run_job(6, interleaved3x2, CDDP_ALGO_RING, forced); }
TEST_TIMEOUT(hier_forced_direct, 120) { run_job(6, contiguous2x3, CDDP_ALGO_DIRECT, forced); }
/* small segments: the pipelined path (helper thread) on the same checks */
TEST_TIMEOUT(hier_pipelined_3x2, 120) {
  setenv("CDDP_HIER_SEGMENT_BYTES", "4096", 1);
  run_job(6, interleaved3x2, CDDP_ALGO_RING, forced);
  run_job(6, contiguous2x3, CDDP_ALGO_AUTO, forced);
}
/* degenerate groups: one rank per host (tcp only), one host (shm only) */
static const int one_each[] = {0, 1, 2, 3};
static const int one_host[] = {0, 0, 0, 0};
TEST_TIMEOUT(hier_one_rank_per_host, 120) { run_job(4, one_each, CDDP_ALGO_AUTO, forced); }
TEST_TIMEOUT(hier_one_host, 120) { run_job(4, one_host, CDDP_ALGO_AUTO, forced); }

/* ---- placement ---- */

static void peers_on(cddp__peer_t *p, const int *host_of, int world) {
  for (int r = 0; r < world; r++) snprintf(p[r].host_id, sizeof p[r].host_id, "id-%d", host_of[r]);
}

TEST(hier_placement) {
  cddp__peer_t p[MAXW];
  int H, L;
  peers_on(p, interleaved3x2, 6);
  CHECK(cddp__hier_placement(p, 6, &H, &L));
  CHECK_EQ(H, 3);
  CHECK_EQ(L, 2);
  CHECK(cddp__hier_fits(p, 6));
  const int uneven[] = {0, 0, 0, 1, 1};
  peers_on(p, uneven, 5);
  CHECK(!cddp__hier_placement(p, 5, &H, &L));
  CHECK_EQ(H, 2);
  CHECK_EQ(L, 0);
  CHECK(!cddp__hier_fits(p, 5));
  peers_on(p, one_each, 4);
  CHECK(cddp__hier_placement(p, 4, &H, &L));
  CHECK_EQ(H, 4);
  CHECK_EQ(L, 1);
  CHECK(!cddp__hier_fits(p, 4)); /* one rank per host: the flat ring */
  peers_on(p, one_host, 4);
  CHECK(!cddp__hier_fits(p, 4)); /* one host: shm */
}

TEST(hier_refuses_uneven_hosts) {
  cddp__peer_t p[3] = {{.pid = 1}, {.pid = 1}, {.pid = 1}};
  const int uneven[] = {0, 0, 1};
  peers_on(p, uneven, 3);
  cddp_store_t *s;
  CHECK_OK(cddp_store_mem_create(&s));
  cddp_comm_config_t cfg = {"native", "hier", 1, 1000, CDDP_ALGO_AUTO};
  int aborted = 0;
  cddp__comm_ctx_t ctx = {0, 3, 0, s, &cfg, p, &aborted, 0, s};
  void *st = NULL;
  CHECK_RESULT(cddp__transport_hier.init(&ctx, &st), CDDP_INVALID_USAGE);
  CHECK(strstr(cddp_last_error(), "same number of ranks") != NULL);
  CHECK(st == NULL);
  cddp_store_close(s);
}
