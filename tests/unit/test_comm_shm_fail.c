/* test_comm_shm_fail.c - shm failure paths: abort from another thread, timeout, a peer that
 * leaves, a peer SIGKILLed mid-collective (forked ranks over a TCP store), rank 0 dead while the
 * communicator formed. */
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cddp/comm.h"
#include "cddp/store.h"
#include "common/clock.h"
#include "comm/transport.h"
#include "test.h"

/* comm.c refers to the transports weakly; a strong reference pulls shm.o from libcddp.a. */
const cddp__transport_t *const shm_fail_force_link = &cddp__transport_shm;

static cddp_store_t *store;
static cddp_comm_t *comms[2];
static int timeout_ms = 20000;

static cddp_comm_t *init_rank(cddp_store_t *st, int rank, int world) {
  cddp_comm_config_t cfg;
  cddp_comm_config_default(&cfg);
  cfg.transport = "shm";
  cfg.timeout_ms = timeout_ms;
  cddp_comm_t *c;
  CHECK_OK(cddp_comm_init(&c, st, rank, world, 0, &cfg));
  return c;
}

static void *init_thread(void *arg) {
  int rank = (int)(intptr_t)arg;
  comms[rank] = init_rank(store, rank, 2);
  return NULL;
}

/* Two ranks as threads; returns once both communicators exist. */
static void init_pair(void) {
  CHECK_OK(cddp_store_mem_create(&store));
  pthread_t th[2];
  for (int r = 0; r < 2; r++) pthread_create(&th[r], NULL, init_thread, (void *)(intptr_t)r);
  for (int r = 0; r < 2; r++) pthread_join(th[r], NULL);
}

static void *abort_later(void *arg) {
  usleep(150000);
  cddp_comm_abort(arg);
  return NULL;
}

TEST(shm_abort_wakes_blocked_collective) {
  init_pair();
  float x[1024] = {0};
  /* rank 1 never joins: rank 0 sleeps in the futex until another thread aborts it */
  {
    pthread_t th;
    pthread_create(&th, NULL, abort_later, comms[0]);
    uint64_t t0 = cddp__now_ns();
    CHECK_RESULT(cddp_allreduce(comms[0], x, x, 1024, CDDP_F32, CDDP_SUM), CDDP_ABORTED);
    double ms = (double)(cddp__now_ns() - t0) / 1e6;
    CHECK(ms >= 100 && ms < 2000 * cddp_test_scale());
    pthread_join(th, NULL);
  }
  /* rank 1 completes the step rank 0 had posted, then finds rank 0 gone instead of
   * waiting for its timeout */
  cddp_result_t r = cddp_allreduce(comms[1], x, x, 1024, CDDP_F32, CDDP_SUM);
  if (r == CDDP_OK) r = cddp_allreduce(comms[1], x, x, 1024, CDDP_F32, CDDP_SUM);
  CHECK_EQ(r, CDDP_REMOTE);
  CHECK(strstr(cddp_last_error(), "rank 0") != NULL);
  cddp_comm_destroy(comms[0]);
  cddp_comm_destroy(comms[1]);
  cddp_store_close(store);
}

TEST(shm_abort_wakes_async_large) {
  init_pair();
  size_t n = 1 << 20;
  float *x = calloc(n, 4);
  cddp_request_t *req;
  CHECK_OK(cddp_iallreduce(comms[0], x, x, n, CDDP_F32, CDDP_SUM, &req));
  usleep(50000);
  cddp_comm_abort(comms[0]);
  CHECK_RESULT(cddp_wait(req), CDDP_ABORTED);
  cddp_comm_destroy(comms[0]);
  cddp_comm_destroy(comms[1]);
  cddp_store_close(store);
  free(x);
}

TEST(shm_timeout_names_peer) {
  timeout_ms = 300;
  init_pair();
  double x[64] = {0};
  uint64_t t0 = cddp__now_ns();
  CHECK_RESULT(cddp_broadcast(comms[0], x, 64, CDDP_F64, 1), CDDP_TIMEOUT);
  double ms = (double)(cddp__now_ns() - t0) / 1e6;
  CHECK(ms >= 250 && ms < 3000 * cddp_test_scale());
  CHECK(strstr(cddp_last_error(), "rank 1 (host ") != NULL);
  cddp_comm_destroy(comms[0]);
  cddp_comm_destroy(comms[1]);
  cddp_store_close(store);
}

/* ---- a forked peer SIGKILLed in the middle of a collective ---- */

static int kill_port;

static void kill_rank(int rank, int world, void *arg) {
  int mode = (int)(intptr_t)arg; /* 0: small messages, 1: large (ring), 2: zero copy */
  cddp_store_t *st;
  CHECK_OK(cddp_store_tcp_connect(&st, "127.0.0.1", kill_port, "", 5000));
  cddp_comm_t *c = init_rank(st, rank, world);
  size_t n = mode ? (4u << 20) : 256;
  float *x = NULL;
  if (mode == 2) CHECK_OK(cddp_comm_mem_alloc(c, n * 4, (void **)&x));
  else x = calloc(n, 4);
  CHECK_OK(cddp_allreduce(c, x, x, n, CDDP_F32, CDDP_SUM));
  if (rank == world - 1) {
    usleep(100000);
    raise(SIGKILL); /* dies while the others wait in the next collective */
  }
  uint64_t t0 = cddp__now_ns();
  cddp_result_t r = CDDP_OK;
  for (int i = 0; i < 100000 && r == CDDP_OK; i++) r = cddp_allreduce(c, x, x, n, CDDP_F32, CDDP_SUM);
  double ms = (double)(cddp__now_ns() - t0) / 1e6;
  char want[64];
  snprintf(want, sizeof want, "rank %d (host ", world - 1);
  if (r != CDDP_REMOTE || !strstr(cddp_last_error(), want) || ms > 2100)
    TEST_FAIL("rank %d got %s after %.0f ms: %s", rank, cddp_result_name(r), ms, cddp_last_error());
  cddp_comm_destroy(c);
  cddp_store_close(st);
}

static void run_kill(int world, int mode) {
  pid_t srv = cddp_test_store_process(&kill_port);
  /* the killed rank "fails" by design; every other rank must pass */
  int failed = cddp_test_fork_ranks(world, kill_rank, (void *)(intptr_t)mode, 20);
  kill(srv, SIGKILL);
  waitpid(srv, NULL, 0);
  CHECK_EQ(failed, 1);
}

TEST(shm_peer_killed_small_w2) { run_kill(2, 0); }
TEST(shm_peer_killed_ring_w3) { run_kill(3, 1); }
TEST(shm_peer_killed_zero_copy_w2) { run_kill(2, 2); }

/* ---- rank 0 died while the communicator formed ---- */

/* Rank 0 (a pid that has exited) published its peer record and, with publish_seg, the name
 * of a segment whose header it never wrote: rank 1 must say rank 0 is gone within 2 s, not
 * wait its 20 s timeout (the chaos loop hung so when a replacement met a worker killed
 * mid-formation). */
static void dead_rank0_during_init(int publish_seg) {
  pid_t dead = fork();
  CHECK(dead >= 0);
  if (dead == 0) _exit(0);
  CHECK(waitpid(dead, NULL, 0) == dead);
  cddp_store_t *st;
  CHECK_OK(cddp_store_mem_create(&st));
  char id[160], rec[256], seg[64];
  cddp__local_host_id(id, sizeof id);
  int n = snprintf(rec, sizeof rec, "deadhost\n%s\n%d", id, (int)dead);
  CHECK_OK(cddp_store_set(st, "comm/r0/peer/0", rec, (size_t)n));
  int fd = -1;
  if (publish_seg) {
    snprintf(seg, sizeof seg, "/cddp-test-dead-%d", (int)getpid());
    fd = shm_open(seg, O_CREAT | O_EXCL | O_RDWR, 0600);
    CHECK(fd >= 0 && ftruncate(fd, 64 << 20) == 0); /* zeros: no magic, as if killed before it */
    CHECK_OK(cddp_store_set(st, "comm/r0/shm/seg", seg, strlen(seg) + 1));
  }
  cddp_comm_config_t cfg;
  cddp_comm_config_default(&cfg);
  cfg.transport = "shm";
  cfg.timeout_ms = 20000;
  cddp_comm_t *c = NULL;
  uint64_t t0 = cddp__now_ns();
  cddp_result_t r = cddp_comm_init(&c, st, 1, 2, 0, &cfg);
  double ms = (double)(cddp__now_ns() - t0) / 1e6;
  CHECK_EQ(r, CDDP_REMOTE);
  CHECK(ms < 2000 * cddp_test_scale());
  CHECK(strstr(cddp_last_error(), "rank 0 (host deadhost)") != NULL);
  if (fd >= 0) close(fd), shm_unlink(seg);
  cddp_store_close(st);
}

TEST(shm_rank0_dead_before_segment_header) { dead_rank0_during_init(1); }
TEST(shm_rank0_dead_before_segment_name) { dead_rank0_during_init(0); }
