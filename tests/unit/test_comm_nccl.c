/* test_comm_nccl.c - the nccl backend where there is no GPU: its refusal is one line saying
 * what is missing, and its rendezvous through the store (one unique id per round, handed
 * from rank 0; two ranks of one host on one GPU refused; timeout; abort) runs on the CPU. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "cddp/comm.h"
#include "cddp/store.h"
#include "comm/nccl.h"
#include "common/clock.h"
#include "test.h"

TEST(backend_nccl_is_refused_in_one_line_saying_why) {
  cddp_store_t *s = NULL;
  CHECK_OK(cddp_store_mem_create(&s));
  cddp_comm_config_t cfg;
  cddp_comm_config_default(&cfg);
  cfg.backend = "NCCL";
  cddp_comm_t *c = NULL;
  cddp_result_t r = cddp_comm_init(&c, s, 0, 1, 0, &cfg);
  void *driver = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  int may_run = CDDP_HAVE_NCCL && driver; /* a GPU machine: tests/gpu/run.sh runs the backend */
  if (driver) dlclose(driver);
  const char *e = cddp_last_error();
  if (r == CDDP_OK) {
    if (!may_run) TEST_FAIL("backend nccl came up with %s", CDDP_HAVE_NCCL ? "no NVIDIA driver" : "no NCCL built in");
    cddp_comm_destroy(c);
  } else {
    CHECK_RESULT(r, CDDP_INVALID_USAGE);
    CHECK(c == NULL);
    if (strncmp(e, "backend 'nccl' ", 15) || strchr(e, '\n')) TEST_FAIL("not one line naming the backend: '%s'", e);
    /* where it may run, any one-line reason (no device, say) will do; elsewhere the reason is known */
    const char *why = may_run ? "" : CDDP_HAVE_NCCL ? "no NVIDIA driver" : "not built";
    if (!strstr(e, why)) TEST_FAIL("'%s' does not say '%s'", e, why);
  }
  cddp_store_close(s);
}

/* ---- the rendezvous, with a fake id maker: rank 0's ids count up */

typedef struct rank_arg {
  cddp__comm_ctx_t ctx;
  const char *gpu;
  unsigned char id[CDDP__NCCL_ID_BYTES];
  cddp_result_t r;
  char err[256];
} rank_arg_t;

static int ids_made;
static cddp_result_t fake_id(void *arg, unsigned char id[CDDP__NCCL_ID_BYTES]) {
  memset(id, 0, CDDP__NCCL_ID_BYTES);
  snprintf((char *)id, CDDP__NCCL_ID_BYTES, "id-%d", __atomic_add_fetch(&ids_made, 1, __ATOMIC_SEQ_CST));
  return CDDP_OK;
}

static void *rank_main(void *p) {
  rank_arg_t *a = p;
  a->r = cddp__nccl_rendezvous(&a->ctx, a->gpu, fake_id, NULL, a->id);
  snprintf(a->err, sizeof a->err, "%s", a->r == CDDP_OK ? "" : cddp_last_error());
  return NULL;
}

static cddp_comm_config_t config_ms(int timeout_ms) {
  cddp_comm_config_t cfg;
  cddp_comm_config_default(&cfg);
  cfg.timeout_ms = timeout_ms;
  return cfg;
}

static cddp__peer_t peers[2] = {{.host = "a", .host_id = "boot-a/ns"}, {.host = "b", .host_id = "boot-b/ns"}};
static volatile int not_aborted;

/* Runs ranks 0..world-1 of round `round` over base (the comm's view, as comm.c makes it). */
static void run_round(cddp_store_t *base, int round, int world, const char *const *gpus, rank_arg_t *a,
                      const cddp_comm_config_t *cfg, volatile int *aborted) {
  char prefix[32];
  snprintf(prefix, sizeof prefix, "comm/r%d/", round);
  cddp_store_t *view[2];
  pthread_t th[2];
  for (int r = 0; r < world; r++) {
    CHECK_OK(cddp_store_prefix_create(&view[r], base, prefix, 0));
    a[r] = (rank_arg_t){.ctx = {.rank = r, .world = world, .round = round, .store = view[r], .cfg = cfg,
                                .peers = peers, .aborted = aborted},
                        .gpu = gpus[r]};
    pthread_create(&th[r], NULL, rank_main, &a[r]);
  }
  for (int r = 0; r < world; r++) pthread_join(th[r], NULL), cddp_store_close(view[r]);
}

TEST(every_rank_gets_rank_0s_id_and_each_round_its_own) {
  cddp_store_t *s = NULL;
  CHECK_OK(cddp_store_mem_create(&s));
  cddp_comm_config_t cfg = config_ms(5000);
  const char *gpus[2] = {"0000:18:00.0", "0000:18:00.0"}; /* same bus id, different hosts: fine */
  rank_arg_t a[2], b[2];
  run_round(s, 0, 2, gpus, a, &cfg, &not_aborted);
  for (int r = 0; r < 2; r++)
    if (a[r].r != CDDP_OK) TEST_FAIL("round 0 rank %d: %s", r, a[r].err);
  CHECK(strcmp((char *)a[0].id, "id-1") == 0);
  CHECK(memcmp(a[0].id, a[1].id, CDDP__NCCL_ID_BYTES) == 0);
  run_round(s, 1, 2, gpus, b, &cfg, &not_aborted); /* the next generation: a fresh id */
  for (int r = 0; r < 2; r++)
    if (b[r].r != CDDP_OK) TEST_FAIL("round 1 rank %d: %s", r, b[r].err);
  CHECK(strcmp((char *)b[1].id, "id-2") == 0);
  CHECK(memcmp(b[0].id, b[1].id, CDDP__NCCL_ID_BYTES) == 0);
  CHECK_EQ(ids_made, 2);
  cddp_store_close(s);
}

TEST(two_ranks_of_one_host_on_one_gpu_are_refused_by_name) {
  cddp_store_t *s = NULL;
  CHECK_OK(cddp_store_mem_create(&s));
  cddp_comm_config_t cfg = config_ms(5000);
  peers[1] = peers[0];
  const char *gpus[2] = {"0000:18:00.0", "0000:18:00.0"};
  rank_arg_t a[2];
  run_round(s, 0, 2, gpus, a, &cfg, &not_aborted);
  for (int r = 0; r < 2; r++) {
    CHECK_RESULT(a[r].r, CDDP_INVALID_USAGE);
    if (!strstr(a[r].err, "rank 0 and rank 1") || !strstr(a[r].err, "0000:18:00.0") || !strstr(a[r].err, "native"))
      TEST_FAIL("rank %d: '%s'", r, a[r].err);
  }
  const char *other[2] = {"0000:18:00.0", "0000:2a:00.0"}; /* one host, two GPUs: fine */
  run_round(s, 1, 2, other, a, &cfg, &not_aborted);
  CHECK_OK(a[0].r);
  CHECK_OK(a[1].r);
  cddp_store_close(s);
}

TEST_TIMEOUT(a_missing_rank_0_times_out_and_an_abort_ends_the_wait, 20) {
  cddp_store_t *s = NULL;
  CHECK_OK(cddp_store_mem_create(&s));
  cddp_comm_config_t cfg = config_ms(300);
  cddp__comm_ctx_t ctx = {.rank = 1, .world = 2, .store = s, .cfg = &cfg, .peers = peers, .aborted = &not_aborted};
  unsigned char id[CDDP__NCCL_ID_BYTES];
  CHECK_RESULT(cddp__nccl_rendezvous(&ctx, "0000:18:00.0", fake_id, NULL, id), CDDP_TIMEOUT);
  CHECK(strstr(cddp_last_error(), "rank 0 of 2") != NULL);
  static volatile int aborted = 1;
  cfg.timeout_ms = 60000;
  ctx.aborted = &aborted;
  uint64_t t0 = cddp__now_ns();
  CHECK_RESULT(cddp__nccl_rendezvous(&ctx, "0000:18:00.0", fake_id, NULL, id), CDDP_ABORTED);
  CHECK((cddp__now_ns() - t0) / 1000000 < 5000);
  cddp_store_close(s);
}
