/* test_comm_shm.c - shm collectives against references: every kind, dtype, op, size, algorithm. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cddp/comm.h"
#include "cddp/store.h"
#include "comm/reduce.h"
#include "comm/transport.h"
#include "test.h"

/* comm.c refers to the transports weakly; a strong reference pulls shm.o from libcddp.a. */
const cddp__transport_t *const shm_test_force_link = &cddp__transport_shm;

#define CDDP_ARRAY_LEN(x) (sizeof(x) / sizeof((x)[0]))

/* ---- ranks as threads over one in-memory store ---- */

typedef void (*rank_fn)(cddp_comm_t *c, int rank, int world, void *arg);
typedef struct {
  cddp_store_t *store;
  int rank, world;
  cddp_algo_t algo;
  rank_fn fn;
  void *arg;
} rank_arg_t;

static pthread_barrier_t bar;
static void *results[8]; /* each rank's result buffer, to compare bit for bit */

static void *rank_main(void *p) {
  rank_arg_t *a = p;
  cddp_comm_config_t cfg;
  cddp_comm_config_default(&cfg);
  cfg.transport = "shm";
  cfg.algo = a->algo;
  cfg.timeout_ms = 20000;
  cddp_comm_t *c;
  CHECK_OK(cddp_comm_init(&c, a->store, a->rank, a->world, 0, &cfg));
  CHECK(!strcmp(cddp_comm_transport(c), "shm"));
  a->fn(c, a->rank, a->world, a->arg);
  CHECK_OK(cddp_comm_finalize(c));
  cddp_comm_destroy(c);
  return NULL;
}

static void run_ranks(int world, cddp_algo_t algo, rank_fn fn, void *arg) {
  cddp_store_t *store;
  CHECK_OK(cddp_store_mem_create(&store));
  pthread_barrier_init(&bar, NULL, (unsigned)world);
  pthread_t th[8];
  rank_arg_t args[8];
  for (int r = 0; r < world; r++) {
    args[r] = (rank_arg_t){store, r, world, algo, fn, arg};
    CHECK(pthread_create(&th[r], NULL, rank_main, &args[r]) == 0);
  }
  for (int r = 0; r < world; r++) pthread_join(th[r], NULL);
  pthread_barrier_destroy(&bar);
  cddp_store_close(store);
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

/* Checks n elements of buf against expect(i); prints the largest difference on mismatch. */
#define CHECK_BUF(buf, dt, n, expect_expr, what)                                              \
  do {                                                                                       \
    double worst = 0, tol = (dt) == CDDP_BF16 ? 0.07 : (dt) == CDDP_F16 ? 0.01 : 1e-5;                             \
    size_t at = 0;                                                                           \
    for (size_t i = 0; i < (n); i++) {                                                       \
      double d = fabs(get(buf, dt, i) - (expect_expr));                                      \
      if (d > worst) worst = d, at = i;                                                      \
    }                                                                                        \
    if (worst > tol) {                                                                       \
      size_t i = at;                                                                         \
      TEST_FAIL("%s rank %d %s n=%zu: largest difference %g at %zu (got %g, want %g)", what, \
                rank, cddp_dtype_name(dt), (size_t)(n), worst, at, get(buf, dt, at),         \
                (expect_expr));                                                              \
    }                                                                                        \
  } while (0)

/* Every rank's result is bit-identical to rank 0's. */
static void check_same(int rank, int world, void *buf, size_t bytes, const char *what) {
  results[rank] = buf;
  pthread_barrier_wait(&bar);
  if (rank != 0 && memcmp(buf, results[0], bytes) != 0)
    TEST_FAIL("%s: rank %d's result differs from rank 0's", what, rank);
  pthread_barrier_wait(&bar);
}

static const size_t counts[] = {1, 7, 64, 4097, 12345};

/* ---- per-kind checks ---- */

static void do_allreduce(cddp_comm_t *c, int rank, int world, size_t n, cddp_dtype_t dt,
                         cddp_redop_t op, int inplace, void *sendb, void *recvb) {
  size_t es = cddp_dtype_size(dt);
  void *send = sendb, *recv = inplace ? sendb : recvb;
  for (size_t i = 0; i < n; i++) put(send, dt, i, val(rank, i));
  if (!inplace) memset(recv, 0x5a, n * es);
  CHECK_OK(cddp_allreduce(c, send, recv, n, dt, op));
  CHECK_BUF(recv, dt, n, ref_reduce(dt, op, world, i), cddp_redop_name(op));
  check_same(rank, world, recv, n * es, "allreduce");
}

static void do_reduce_scatter(cddp_comm_t *c, int rank, int world, size_t n, cddp_dtype_t dt,
                              cddp_redop_t op, int inplace, char *send, char *recvb) {
  size_t es = cddp_dtype_size(dt);
  for (size_t i = 0; i < n * (size_t)world; i++) put(send, dt, i, val(rank, i));
  char *recv = inplace ? send + (size_t)rank * n * es : recvb; /* NCCL's in-place form */
  if (!inplace) memset(recv, 0x5a, n * es);
  CHECK_OK(cddp_reduce_scatter(c, send, recv, n, dt, op));
  CHECK_BUF(recv, dt, n, ref_reduce(dt, op, world, (size_t)rank * n + i), "reduce_scatter");
}

static void do_allgather(cddp_comm_t *c, int rank, int world, size_t n, cddp_dtype_t dt,
                         int inplace, char *sendb, char *recv) {
  size_t es = cddp_dtype_size(dt);
  memset(recv, 0x5a, n * es * (size_t)world);
  char *send = inplace ? recv + (size_t)rank * n * es : sendb;
  for (size_t i = 0; i < n; i++) put(send, dt, i, val(rank, i));
  CHECK_OK(cddp_allgather(c, send, recv, n, dt));
  CHECK_BUF(recv, dt, n * (size_t)world, val((int)(i / n), i % n), "allgather");
}

static void do_broadcast(cddp_comm_t *c, int rank, int world, size_t n, cddp_dtype_t dt,
                         int root, char *buf) {
  for (size_t i = 0; i < n; i++) put(buf, dt, i, rank == root ? val(root, i) : 99);
  CHECK_OK(cddp_broadcast(c, buf, n, dt, root));
  CHECK_BUF(buf, dt, n, val(root, i), "broadcast");
}

/* ---- the sweeps ---- */

static void sweep(cddp_comm_t *c, int rank, int world, void *arg) {
  int zc = arg != NULL;
  size_t maxn = 12345 * (size_t)world, bytes = maxn * 8;
  char *a, *b;
  if (zc) {
    CHECK_OK(cddp_comm_mem_alloc(c, bytes, (void **)&a));
    CHECK_OK(cddp_comm_mem_alloc(c, bytes, (void **)&b));
  } else {
    a = malloc(bytes), b = malloc(bytes);
  }
  for (size_t k = 0; k < CDDP_ARRAY_LEN(counts); k++)
    for (int dt = 0; dt < CDDP_DTYPE_COUNT; dt++) {
      for (int op = 0; op < CDDP_REDOP_COUNT; op++)
        for (int inplace = 0; inplace < 2; inplace++)
          do_allreduce(c, rank, world, counts[k], dt, op, inplace, a, b);
      for (int inplace = 0; inplace < 2; inplace++) {
        do_reduce_scatter(c, rank, world, counts[k], dt, (cddp_redop_t)(k % CDDP_REDOP_COUNT),
                          inplace, a, b);
        do_allgather(c, rank, world, counts[k], dt, inplace, a, b);
      }
      do_broadcast(c, rank, world, counts[k], dt, (int)(k % (size_t)world), a);
    }
  CHECK_OK(cddp_barrier(c));
  if (zc) {
    CHECK_OK(cddp_comm_mem_free(c, a));
    CHECK_OK(cddp_comm_mem_free(c, b));
  } else {
    free(a), free(b);
  }
}

/* Small staging (4 KiB chunk and direct limit), so counts above span many chunks/pieces. */
static void small_staging(void) {
  setenv("CDDP_SHM_CHUNK_BYTES", "4096", 1);
  setenv("CDDP_DIRECT_MAX_BYTES", "4096", 1);
  setenv("CDDP_SHM_CMA", "1", 1);
}

#define SWEEP_TEST(name, world, algo, zc)             \
  TEST(name) {                                        \
    small_staging();                                  \
    run_ranks(world, algo, sweep, zc ? (void *)1 : NULL); \
  }
SWEEP_TEST(shm_sweep_w2_auto, 2, CDDP_ALGO_AUTO, 0)
SWEEP_TEST(shm_sweep_w2_ring, 2, CDDP_ALGO_RING, 0)
SWEEP_TEST(shm_sweep_w2_direct, 2, CDDP_ALGO_DIRECT, 0)
SWEEP_TEST(shm_sweep_w3_auto, 3, CDDP_ALGO_AUTO, 0)
SWEEP_TEST(shm_sweep_w4_ring, 4, CDDP_ALGO_RING, 0)
SWEEP_TEST(shm_sweep_w4_direct, 4, CDDP_ALGO_DIRECT, 0)
/* Large allreduces of ordinary buffers go through process_vm_readv/writev where the kernel
 * allows it (here: ranks are threads, so each reads its own pid); these keep the staged
 * ring covered. */
#define STAGED_TEST(name, world)                       \
  TEST(name) {                                         \
    small_staging();                                   \
    setenv("CDDP_SHM_CMA", "0", 1);                    \
    run_ranks(world, CDDP_ALGO_RING, sweep, NULL);     \
    unsetenv("CDDP_SHM_CMA");                          \
  }
STAGED_TEST(shm_sweep_w2_staged, 2)
STAGED_TEST(shm_sweep_w3_staged, 3)
/* Non-temporal stores are off by default (CDDP_SHM_NT_BYTES=0); these keep their copy and
 * fused-sum paths covered, staged and zero copy. */
#define NT_TEST(name, world, zc)                                   \
  TEST(name) {                                                     \
    small_staging();                                               \
    setenv("CDDP_SHM_NT_BYTES", "4096", 1);                        \
    if (!(zc)) setenv("CDDP_SHM_CMA", "0", 1);                     \
    run_ranks(world, CDDP_ALGO_RING, sweep, (zc) ? (void *)1 : NULL); \
    unsetenv("CDDP_SHM_NT_BYTES");                                 \
    unsetenv("CDDP_SHM_CMA");                                      \
  }
NT_TEST(shm_sweep_w2_staged_nt, 2, 0)
NT_TEST(shm_sweep_w3_staged_nt, 3, 0)
NT_TEST(shm_sweep_w2_zero_copy_nt, 2, 1)
SWEEP_TEST(shm_sweep_w2_zero_copy, 2, CDDP_ALGO_RING, 1)
SWEEP_TEST(shm_sweep_w3_zero_copy, 3, CDDP_ALGO_AUTO, 1)
SWEEP_TEST(shm_sweep_w4_zero_copy, 4, CDDP_ALGO_RING, 1)

/* Default knobs: sizes around the 64 KiB switch and a multi-chunk ring. */
static void around_switch(cddp_comm_t *c, int rank, int world, void *arg) {
  static const size_t ns[] = {16383, 16384, 16385, 300001};
  char *a = malloc(300001 * 4), *b = malloc(300001 * 4);
  for (size_t k = 0; k < 4; k++) {
    do_allreduce(c, rank, world, ns[k], CDDP_F32, CDDP_SUM, 0, a, b);
    do_allreduce(c, rank, world, ns[k], CDDP_BF16, CDDP_AVG, 1, a, b);
  }
  free(a), free(b);
}
TEST(shm_around_switch_w2) { run_ranks(2, CDDP_ALGO_AUTO, around_switch, NULL); }
TEST(shm_around_switch_w3) { run_ranks(3, CDDP_ALGO_AUTO, around_switch, NULL); }

/* f16 is summed in f32 and rounded once: shm reduces all ranks' data in one pass. Halves of
 * magnitude 1/16..64 sum exactly in f32 in any order, but rarely fit a half: the result must
 * be the exact sum rounded once (an f16 accumulator, or rounding per rank, gives other bits). */
static uint16_t f16_val(int rank, size_t i) {
  uint32_t u = (uint32_t)(rank * 2654435761u) ^ (uint32_t)(i * 40503u + 17);
  u = u * 1664525u + 1013904223u;
  float mag = ldexpf(1.0f + (float)((u >> 8) & 0x3ff) / 1024.0f, (int)((u >> 20) % 10) - 4);
  return cddp__f32_to_f16(u & 1 ? -mag : mag);
}

static uint16_t f16_once_ref(int world, cddp_redop_t op, size_t i) {
  double exact = 0;
  for (int r = 0; r < world; r++) exact += cddp__f16_to_f32(f16_val(r, i));
  float acc = (float)exact;
  if (op == CDDP_AVG) acc *= (float)(1.0 / world);
  return cddp__f32_to_f16(acc);
}

static void f16_once(cddp_comm_t *c, int rank, int world, void *arg) {
  static const size_t ns[] = {5, 3000, 70001};
  size_t maxn = 70001;
  uint16_t *a, *b, *ref = malloc(maxn * 2 * (size_t)world);
  CHECK_OK(cddp_comm_mem_alloc(c, maxn * 2 * (size_t)world, (void **)&a));
  b = malloc(maxn * 2 * (size_t)world);
  size_t rounded = 0;
  for (size_t k = 0; k < CDDP_ARRAY_LEN(ns); k++)
    for (int op = CDDP_SUM; op <= CDDP_AVG; op++)
      for (int zc = 0; zc < 2; zc++) {
        size_t n = ns[k];
        uint16_t *buf = zc ? a : b;
        for (size_t i = 0; i < n; i++) buf[i] = f16_val(rank, i), ref[i] = f16_once_ref(world, op, i);
        CHECK_OK(cddp_allreduce(c, buf, buf, n, CDDP_F16, (cddp_redop_t)op));
        for (size_t i = 0; i < n; i++) {
          double exact = 0;
          for (int r = 0; r < world; r++) exact += cddp__f16_to_f32(f16_val(r, i));
          rounded += op == CDDP_SUM && (double)cddp__f16_to_f32(ref[i]) != exact;
          if (buf[i] != ref[i])
            TEST_FAIL("f16 %s allreduce world %d n %zu rank %d: element %zu is %#x (%g), want %#x (%g)",
                      cddp_redop_name((cddp_redop_t)op), world, n, rank, i, buf[i], cddp__f16_to_f32(buf[i]),
                      ref[i], cddp__f16_to_f32(ref[i]));
        }
        check_same(rank, world, buf, n * 2, "f16 allreduce");
        /* reduce_scatter: rank r keeps block r of the world * n sums */
        for (size_t i = 0; i < n * (size_t)world; i++) buf[i] = f16_val(rank, i);
        CHECK_OK(cddp_reduce_scatter(c, buf, buf + (size_t)rank * n, n, CDDP_F16, (cddp_redop_t)op));
        for (size_t i = 0; i < n; i++)
          if (buf[(size_t)rank * n + i] != f16_once_ref(world, op, (size_t)rank * n + i))
            TEST_FAIL("f16 %s reduce_scatter world %d n %zu rank %d: element %zu wrong",
                      cddp_redop_name((cddp_redop_t)op), world, n, rank, i);
      }
  CHECK(rounded > 1000); /* the sums really needed rounding, so the bits above mean something */
  CHECK_OK(cddp_comm_mem_free(c, a));
  free(b), free(ref);
}
TEST(shm_f16_rounds_once_w2) { small_staging(); run_ranks(2, CDDP_ALGO_AUTO, f16_once, NULL); }
TEST(shm_f16_rounds_once_w3_ring) { small_staging(); run_ranks(3, CDDP_ALGO_RING, f16_once, NULL); }
TEST(shm_f16_rounds_once_w4_direct) { run_ranks(4, CDDP_ALGO_DIRECT, f16_once, NULL); }
TEST(shm_f16_rounds_once_w4_cma) { setenv("CDDP_SHM_CMA", "1", 1); run_ranks(4, CDDP_ALGO_AUTO, f16_once, NULL); }

/* Zero-copy buffers on some ranks only: every rank must agree to stage instead. */
static void mixed_buffers(cddp_comm_t *c, int rank, int world, void *arg) {
  size_t n = 100000;
  char *z, *m = malloc(n * 4);
  CHECK_OK(cddp_comm_mem_alloc(c, n * 4, (void **)&z));
  do_allreduce(c, rank, world, n, CDDP_F32, CDDP_SUM, 1, rank == 1 ? m : z, NULL);
  do_allreduce(c, rank, world, n, CDDP_F32, CDDP_MAX, 1, rank == 0 ? m : z, NULL);
  CHECK_OK(cddp_comm_mem_free(c, z));
  free(m);
}
TEST(shm_mixed_buffers) { run_ranks(2, CDDP_ALGO_AUTO, mixed_buffers, NULL); }

/* Many back-to-back collectives of alternating algorithms and sizes: slots and sequence
 * numbers are reused thousands of times. */
static void back_to_back(cddp_comm_t *c, int rank, int world, void *arg) {
  float *x = malloc(40000 * 4);
  for (int it = 0; it < 3000; it++) {
    size_t n = it % 3 == 2 ? 20000 : (size_t)(1 + it % 50);
    for (size_t i = 0; i < n; i++) x[i] = (float)(rank + it + (int)i % 5);
    if (it % 7 == 0) CHECK_OK(cddp_barrier(c));
    CHECK_OK(cddp_allreduce(c, x, x, n, CDDP_F32, CDDP_SUM));
    for (size_t i = 0; i < n; i++) {
      float want = 0;
      for (int r = 0; r < world; r++) want += (float)(r + it + (int)i % 5);
      if (x[i] != want) TEST_FAIL("iteration %d rank %d: x[%zu] = %g, want %g", it, rank, i, x[i], want);
    }
  }
  free(x);
}
TEST(shm_back_to_back_w2) { run_ranks(2, CDDP_ALGO_AUTO, back_to_back, NULL); }
TEST(shm_back_to_back_w3) { run_ranks(3, CDDP_ALGO_AUTO, back_to_back, NULL); }

/* Non-blocking calls through the progress thread, on zero-copy buffers. */
static void async_ops(cddp_comm_t *c, int rank, int world, void *arg) {
  size_t n = 1 << 16;
  float *z;
  CHECK_OK(cddp_comm_mem_alloc(c, 4 * n * 4, (void **)&z));
  cddp_request_t *req[4];
  for (int k = 0; k < 4; k++) {
    for (size_t i = 0; i < n; i++) z[k * n + i] = (float)(rank + k);
    CHECK_OK(cddp_iallreduce(c, z + k * n, z + k * n, n, CDDP_F32, CDDP_SUM, &req[k]));
  }
  for (int k = 0; k < 4; k++) CHECK_OK(cddp_wait(req[k]));
  for (int k = 0; k < 4; k++) CHECK_EQ(z[k * n + 123], world * (world - 1) / 2 + world * k);
  CHECK_OK(cddp_comm_mem_free(c, z));
}
TEST(shm_async_zero_copy) { run_ranks(2, CDDP_ALGO_AUTO, async_ops, NULL); }
