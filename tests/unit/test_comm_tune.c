/* test_comm_tune.c - the shm tuner: one table on every rank, forced knobs win, the calibration
 * stays within its budget, results stay exact after it. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cddp/comm.h"
#include "cddp/store.h"
#include "comm/shm.h"
#include "comm/tcp.h"
#include "comm/transport.h"
#include "common/clock.h"
#include "test.h"

/* comm.c refers to the transports weakly; a strong reference pulls shm.o from libcddp.a. */
const cddp__transport_t *const tune_test_force_link[] = {&cddp__transport_shm, &cddp__transport_tcp};

#define MAXW 4

/* What every rank must agree on: the table (figures included) and the calibration's time. */
typedef struct {
  int state;
  uint32_t set, budget_ms;
  double took_ms;
  shm_tune_row_t row[SHM_TUNE_ROWS];
  int pick_1m, pick_64m, pick_100k, pick_4k;
  double first_ms; /* wall time of the first large allreduce (calibration included) */
} seen_t;

static seen_t seen[MAXW];

static const char *transport = "shm"; /* of the communicators the next run forms */

/* The tuner's table of c's transport (shm or tcp) and its picks at a few sizes. */
static void record(cddp_comm_t *c, seen_t *out) {
  const char *name;
  void *st = cddp__comm_transport_state(c, &name);
  CHECK(!strcmp(name, transport) && st != NULL);
  const cddp__tune_t *t = !strcmp(name, "shm") ? &((shm_t *)st)->tune : &((cddp__tcp_t *)st)->tune;
  int (*pick)(const void *, size_t) = !strcmp(name, "shm") ? (int (*)(const void *, size_t))cddp__shm_tune_pick
                                                           : (int (*)(const void *, size_t))cddp__tcp_tune_pick;
  memset(out, 0, sizeof *out);
  out->state = t->state;
  out->set = t->set;
  out->budget_ms = t->budget_ms;
  out->took_ms = t->took_ms;
  memcpy(out->row, t->row, sizeof out->row);
  out->pick_1m = pick(st, 1u << 20);
  out->pick_64m = pick(st, 64u << 20);
  out->pick_100k = pick(st, 100u << 10);
  out->pick_4k = pick(st, 4096);
}

/* Allreduces of ordinary buffers around every class edge (odd counts included), f32 sum and
 * f64 max, checked element by element. The first one calibrates (it is above 4 KiB). */
static void exact_sweep(cddp_comm_t *c, int rank, int world, seen_t *out) {
  static const size_t counts[] = {262144, 1, 1000, 4097, 16383, 65536 + 7, 262144 + 5,
                                  (1u << 20) + 3, (5u << 20) / 4 + 1};
  for (size_t k = 0; k < sizeof counts / sizeof counts[0]; k++) {
    size_t n = counts[k];
    float *x = malloc(n * 4);
    double *y = malloc(n * 8);
    CHECK(x && y);
    for (size_t i = 0; i < n; i++) {
      x[i] = (float)((i + 3 * (size_t)rank) % 7);
      y[i] = (double)((i * 5 + (size_t)rank) % 11);
    }
    uint64_t t0 = cddp__now_ns();
    CHECK_OK(cddp_allreduce(c, x, x, n, CDDP_F32, CDDP_SUM));
    if (k == 0) out->first_ms = (double)(cddp__now_ns() - t0) / 1e6;
    CHECK_OK(cddp_allreduce(c, y, y, n, CDDP_F64, CDDP_MAX));
    for (size_t i = 0; i < n; i++) {
      float want = 0;
      double ymax = 0;
      for (int q = 0; q < world; q++) {
        want += (float)((i + 3 * (size_t)q) % 7);
        double v = (double)((i * 5 + (size_t)q) % 11);
        ymax = v > ymax ? v : ymax;
      }
      if (x[i] != want || y[i] != ymax)
        TEST_FAIL("rank %d n %zu: element %zu is %g / %g, want %g / %g", rank, n, i, x[i], y[i],
                  want, ymax);
    }
    free(x);
    free(y);
  }
}

/* ---- ranks as threads over one in-memory store ---- */

typedef struct {
  cddp_store_t *store;
  int rank, world;
} targ_t;

static cddp_comm_t *init_comm(cddp_store_t *st, int rank, int world) {
  cddp_comm_config_t cfg;
  cddp_comm_config_default(&cfg);
  cfg.transport = transport;
  cfg.timeout_ms = 20000;
  cddp_comm_t *c;
  CHECK_OK(cddp_comm_init(&c, st, rank, world, 0, &cfg));
  return c;
}

static void *thread_rank(void *p) {
  targ_t *a = p;
  cddp_comm_t *c = init_comm(a->store, a->rank, a->world);
  exact_sweep(c, a->rank, a->world, &seen[a->rank]);
  seen_t first = seen[a->rank];
  record(c, &seen[a->rank]);
  seen[a->rank].first_ms = first.first_ms;
  CHECK_OK(cddp_comm_finalize(c));
  cddp_comm_destroy(c);
  return NULL;
}

static void run_threads(int world) {
  cddp_store_t *store;
  CHECK_OK(cddp_store_mem_create(&store));
  pthread_t th[MAXW];
  targ_t args[MAXW];
  for (int r = 0; r < world; r++) {
    args[r] = (targ_t){store, r, world};
    CHECK(pthread_create(&th[r], NULL, thread_rank, &args[r]) == 0);
  }
  for (int r = 0; r < world; r++) pthread_join(th[r], NULL);
  cddp_store_close(store);
}

/* Field by field (the structs have padding): the same choices and the same figures. */
static int same(const seen_t *a, const seen_t *b) {
  if (a->state != b->state || a->set != b->set || a->budget_ms != b->budget_ms ||
      a->took_ms != b->took_ms || a->pick_1m != b->pick_1m || a->pick_64m != b->pick_64m ||
      a->pick_100k != b->pick_100k)
    return 0;
  for (int i = 0; i < SHM_TUNE_ROWS; i++) {
    const shm_tune_row_t *x = &a->row[i], *y = &b->row[i];
    if (x->max_bytes != y->max_bytes || x->mech != y->mech || x->trials != y->trials || x->ms != y->ms)
      return 0;
    for (int m = 0; m < SHM_NMECH; m++)
      if (x->us[m] != y->us[m]) return 0;
  }
  return 1;
}

static void check_agreed(int world) {
  for (int r = 1; r < world; r++)
    if (!same(&seen[r], &seen[0])) TEST_FAIL("rank %d's table differs from rank 0's", r);
}

static void check_table_sane(void) {
  CHECK_EQ(seen[0].state, SHM_TUNE_DONE);
  for (int i = 0; i < SHM_TUNE_ROWS; i++) {
    const shm_tune_row_t *r = &seen[0].row[i];
    CHECK(r->mech >= 0 && r->mech < SHM_NMECH);
    if (r->trials) CHECK(r->us[r->mech] > 0); /* the choice was measured */
    if (r->probe_bytes > 65536) CHECK(r->mech != SHM_MECH_DIRECT); /* never above the switch */
  }
  CHECK_EQ(seen[0].pick_4k, seen[0].row[0].mech); /* the table covers what is below its trigger */
}

TEST(tune_agreed_w2) {
  run_threads(2);
  check_agreed(2);
  check_table_sane();
  printf("# took %.1f ms (budget %u), 1 MiB -> %d, 64 MiB -> %d\n", seen[0].took_ms,
         seen[0].budget_ms, seen[0].pick_1m, seen[0].pick_64m);
}

TEST(tune_agreed_w3) {
  run_threads(3);
  check_agreed(3);
  check_table_sane();
}

/* The calibration is bounded: a class starts only while the agreed clock says its first trial
 * fits the budget (the 16 KiB pilot excepted), so it ends within the budget plus one trial; the
 * wall time is checked loosely (a loaded host preempts ranks inside a trial). */
static void check_bounded(unsigned budget_ms) {
  int skipped = 0;
  for (int i = 0; i < SHM_TUNE_ROWS; i++) {
    const shm_tune_row_t *r = &seen[0].row[i];
    skipped += r->trials == 0;
    if (r->trials && i != 0 && r->start_ms > budget_ms)
      TEST_FAIL("class %d started at %.1f ms, past the budget of %u ms", i, r->start_ms, budget_ms);
  }
  printf("# budget %u ms: took %.1f ms, first allreduce %.1f ms, %d classes not measured\n", budget_ms,
         seen[0].took_ms, seen[0].first_ms, skipped);
  CHECK(seen[0].first_ms < 1000 * cddp_test_scale()); /* a loaded host's bound, not a speed target */
  CHECK_EQ(seen[0].budget_ms, budget_ms);
}

TEST(tune_bounded) {
  setenv("CDDP_TUNE_MS", "4", 1);
  run_threads(2);
  check_agreed(2);
  check_bounded(4);
  CHECK(seen[0].row[SHM_TUNE_ROWS - 1].trials == 0); /* 16 MiB alone takes longer than 4 ms here */
  setenv("CDDP_TUNE_MS", "40", 1);
  run_threads(2);
  check_bounded(40);
}

/* Forced knobs win over the tuner: with CDDP_SHM_CMA=value every large class takes mech, and
 * the other large mechanism is never measured. */
static void forced_cma(const char *value, int mech, int never) {
  setenv("CDDP_SHM_CMA", value, 1);
  run_threads(2);
  check_agreed(2);
  CHECK(seen[0].set & SHM_SET_CMA);
  CHECK_EQ(seen[0].pick_1m, mech);
  CHECK_EQ(seen[0].pick_64m, mech);
  CHECK_EQ(seen[0].pick_100k, mech);
  for (int i = 0; i < SHM_TUNE_ROWS; i++) CHECK(seen[0].row[i].us[never] == 0);
}

TEST(tune_forced_cma_off) { forced_cma("0", SHM_MECH_RING, SHM_MECH_CMA); }
TEST(tune_forced_cma_on) { forced_cma("1", SHM_MECH_CMA, SHM_MECH_RING); }

TEST(tune_forced_direct_max) {
  setenv("CDDP_DIRECT_MAX_BYTES", "131072", 1);
  run_threads(2);
  check_agreed(2);
  CHECK_EQ(seen[0].pick_100k, SHM_MECH_DIRECT);
  CHECK(seen[0].pick_1m != SHM_MECH_DIRECT);
  for (int i = 0; i < SHM_TUNE_ROWS; i++) /* direct is not a candidate: the knob decides */
    CHECK(seen[0].row[i].us[SHM_MECH_DIRECT] == 0);
}

TEST(tune_off) {
  setenv("CDDP_TUNE", "0", 1);
  run_threads(2);
  CHECK_EQ(seen[0].state, SHM_TUNE_OFF);
  CHECK_EQ(seen[0].pick_100k, SHM_MECH_CMA); /* the fixed defaults */
  CHECK_EQ(seen[0].pick_64m, SHM_MECH_CMA);
  CHECK_EQ(seen[0].pick_4k, SHM_MECH_DIRECT);
}

/* ---- forked ranks with different environments: a knob forced on one rank wins on all, and
 * the tables agree across processes (compared through the store) ---- */

static int fork_port;

static void fork_rank(int rank, int world, void *arg) {
  const char *env = arg; /* "VAR=value" for rank 1 only, or "" */
  if (rank == 1 && env[0]) putenv((char *)env);
  cddp_store_t *st;
  CHECK_OK(cddp_store_tcp_connect(&st, "127.0.0.1", fork_port, "", 5000));
  cddp_comm_t *c = init_comm(st, rank, world);
  seen_t me;
  exact_sweep(c, rank, world, &me);
  double first = me.first_ms;
  record(c, &me);
  me.first_ms = first;
  char key[32];
  snprintf(key, sizeof key, "test/seen/%d", rank);
  CHECK_OK(cddp_store_set(st, key, &me, sizeof me));
  if (rank == 0) {
    for (int q = 1; q < world; q++) {
      void *v;
      size_t len;
      snprintf(key, sizeof key, "test/seen/%d", q);
      CHECK_OK(cddp_store_get(st, key, &v, &len, 10000));
      const seen_t *o = v;
      CHECK_EQ(len, sizeof me);
      if (!same(o, &me))
        TEST_FAIL("rank %d's table differs from rank 0's (forced: %s)", q, env);
      free(v);
    }
  }
  if (!strcmp(env, "CDDP_SHM_CMA=1")) {
    CHECK(me.set & SHM_SET_CMA);
    CHECK_EQ(me.pick_1m, SHM_MECH_CMA);
    CHECK_EQ(me.pick_64m, SHM_MECH_CMA);
  } else if (!strcmp(env, "CDDP_TUNE=0")) {
    CHECK_EQ(me.state, SHM_TUNE_OFF);
  } else {
    CHECK_EQ(me.state, SHM_TUNE_DONE);
  }
  CHECK_OK(cddp_barrier(c));
  cddp_comm_destroy(c);
  cddp_store_close(st);
}

static void run_forked(int world, const char *env) {
  cddp_test_store_child_t srv;
  CHECK((fork_port = cddp_test_store_child_start(&srv)) > 0);
  int failed = cddp_test_fork_ranks(world, fork_rank, (void *)env, 40);
  CHECK(cddp_test_store_child_stop(&srv));
  CHECK_EQ(failed, 0);
}

TEST(tune_agreed_processes_w2) { run_forked(2, ""); }
TEST(tune_agreed_processes_w3) { run_forked(3, ""); }
TEST(tune_forced_on_one_rank_cma) { run_forked(2, "CDDP_SHM_CMA=1"); }
TEST(tune_off_on_one_rank) { run_forked(2, "CDDP_TUNE=0"); }

/* ---- the TCP side: the same agreement, its own knobs ---- */

TEST(tune_tcp_agreed_w2) {
  transport = "tcp";
  run_threads(2);
  check_agreed(2);
  CHECK_EQ(seen[0].state, CDDP_TUNE_DONE);
  printf("# tcp: took %.1f ms, 100 KiB -> %d, 1 MiB -> %d\n", seen[0].took_ms, seen[0].pick_100k, seen[0].pick_1m);
}

TEST(tune_tcp_agreed_w3) {
  transport = "tcp";
  run_threads(3);
  check_agreed(3);
}

TEST(tune_tcp_forced_chunk) { /* the quarter chunk is never measured, never picked */
  transport = "tcp";
  setenv("CDDP_TCP_CHUNK_BYTES", "1048576", 1);
  run_threads(2);
  check_agreed(2);
  CHECK(seen[0].set & TCP_SET_CHUNK);
  for (int i = 0; i < SHM_TUNE_ROWS; i++) CHECK(seen[0].row[i].us[TCP_MECH_RING4] == 0);
  CHECK(seen[0].pick_1m != TCP_MECH_RING4 && seen[0].pick_64m != TCP_MECH_RING4);
}

TEST(tune_tcp_forced_direct_max) {
  transport = "tcp";
  setenv("CDDP_DIRECT_MAX_BYTES", "32768", 1);
  run_threads(2);
  check_agreed(2);
  CHECK_EQ(seen[0].pick_4k, TCP_MECH_RD);
  CHECK(seen[0].pick_100k != TCP_MECH_RD);
  for (int i = 0; i < SHM_TUNE_ROWS; i++) CHECK(seen[0].row[i].us[TCP_MECH_RD] == 0);
}

TEST(tune_tcp_off_on_one_rank) {
  transport = "tcp";
  run_forked(2, "CDDP_TUNE=0");
}
