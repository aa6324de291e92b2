/* test_comm_desync.c - the desync check (comm/desync.c): forked ranks over a TCP store, one of
 * which skips an allreduce; every rank must fail at once naming both calls, over shm and tcp. */
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cddp/comm.h"
#include "cddp/store.h"
#include "comm/desync.h"
#include "comm/transport.h"
#include "common/clock.h"
#include "test.h"

/* comm.c refers to the transports weakly; strong references pull them from libcddp.a. */
const cddp__transport_t *const desync_force_link[] = {&cddp__transport_shm, &cddp__transport_tcp};

typedef struct job {
  const char *transport;
  int port;
  size_t big;       /* elements of the allreduce the last rank skips once */
  int skip;         /* 0: nobody skips (the check must stay silent) */
  int check_off;    /* CDDP_DESYNC_CHECK=0 on rank 0 only */
} job_t;

/* The same ordinary buffers every step: allreduce(big), allreduce(big / 2), then a few other
 * kinds; the last rank leaves out step 2's first allreduce when job->skip. */
static void rank_main(int rank, int world, void *arg) {
  const job_t *j = arg;
  if (j->check_off && rank == 0) setenv("CDDP_DESYNC_CHECK", "0", 1);
  cddp_store_t *st;
  CHECK_OK(cddp_store_tcp_connect(&st, "127.0.0.1", j->port, "", 5000));
  cddp_comm_config_t cfg;
  cddp_comm_config_default(&cfg);
  cfg.transport = j->transport;
  cfg.timeout_ms = 20000; /* a hang would show as a test taking this long */
  cddp_comm_t *c;
  CHECK_OK(cddp_comm_init(&c, st, rank, world, 0, &cfg));
  float *x = calloc(j->big, sizeof *x);
  cddp_result_t r = CDDP_OK;
  uint64_t t0 = 0;
  for (int step = 0; step < 6 && r == CDDP_OK; step++) {
    if (step == 2) t0 = cddp__now_ns();
    if (!(j->skip && step == 2 && rank == world - 1)) r = cddp_allreduce(c, x, x, j->big, CDDP_F32, CDDP_SUM);
    if (r == CDDP_OK) r = cddp_allreduce(c, x, x, j->big / 2, CDDP_F32, CDDP_SUM);
    if (r == CDDP_OK) r = cddp_broadcast(c, x, 16, CDDP_F32, step % world);
    if (r == CDDP_OK) r = cddp_allreduce(c, x, x, 0, CDDP_F32, CDDP_SUM);
    if (r == CDDP_OK) r = cddp_barrier(c);
  }
  double ms = (double)(cddp__now_ns() - t0) / 1e6;
  const char *err = cddp_last_error();
  if (!j->skip) {
    if (r != CDDP_OK) TEST_FAIL("rank %d: %s: %s", rank, cddp_result_name(r), err);
  } else {
    /* step 2's first allreduce is collective #11 (5 per step); the last rank called its next one */
    char theirs[128];
    snprintf(theirs, sizeof theirs, "rank %d called allreduce(count %zu, f32, sum)", world - 1, j->big / 2);
    if (r != CDDP_INVALID_USAGE || !strstr(err, "desync at collective #11: rank ") || !strstr(err, theirs) ||
        !strstr(err, "called allreduce(count ") || ms > 3000)
      TEST_FAIL("rank %d got %s after %.0f ms: %s", rank, cddp_result_name(r), ms, err);
    printf("# rank %d, %.1f ms: %s\n", rank, ms, err);
  }
  free(x);
  cddp_comm_destroy(c);
  cddp_store_close(st);
}


static void run(job_t j, int world) {
  pid_t srv = cddp_test_store_process(&j.port);
  int failed = cddp_test_fork_ranks(world, rank_main, &j, 30);
  kill(srv, SIGKILL);
  waitpid(srv, NULL, 0);
  CHECK_EQ(failed, 0);
}

TEST(desync_skip_shm_w2) { run((job_t){"shm", 0, 4096, 1, 0}, 2); }
TEST(desync_skip_shm_w3) { run((job_t){"shm", 0, 4096, 1, 0}, 3); }
TEST(desync_skip_shm_ring_w2) { run((job_t){"shm", 0, 1 << 20, 1, 0}, 2); }
TEST(desync_skip_tcp_w2) { run((job_t){"tcp", 0, 4096, 1, 0}, 2); }
TEST(desync_skip_tcp_w3) { run((job_t){"tcp", 0, 4096, 1, 0}, 3); }
TEST(desync_skip_tcp_ring_w3) { run((job_t){"tcp", 0, 1 << 20, 1, 0}, 3); }
TEST(desync_silent_in_step_shm) { run((job_t){"shm", 0, 1 << 16, 0, 0}, 3); }
TEST(desync_silent_in_step_tcp) { run((job_t){"tcp", 0, 1 << 16, 0, 0}, 3); }
/* a rank with the check off turns it off for all: no header one side only */
TEST(desync_off_on_one_rank_tcp) { run((job_t){"tcp", 0, 1 << 16, 0, 1}, 2); }

TEST(fp_describe_and_same) {
  cddp__fp_t a = {.count = 4096, .seq = 7, .rank = 0, .kind = 0, .dt = CDDP_F32, .arg = CDDP_SUM}, b = a;
  char buf[128];
  cddp__fp_describe(&a, buf, sizeof buf);
  CHECK(!strcmp(buf, "allreduce(count 4096, f32, sum)"));
  b.rank = 3, b.tag = 99;
  CHECK(cddp__fp_same(&a, &b));
  CHECK_EQ(cddp__fp_hash(&a, 5), cddp__fp_hash(&b, 5));
  b.count = 2048;
  CHECK(!cddp__fp_same(&a, &b));
  CHECK(cddp__fp_hash(&a, 5) != cddp__fp_hash(&b, 5));
  CHECK(cddp__fp_hash(&a, 5) != cddp__fp_hash(&a, 6));
  b = (cddp__fp_t){.count = 8, .seq = 1, .kind = 3, .dt = CDDP_F32, .arg = 1};
  cddp__fp_describe(&b, buf, sizeof buf);
  CHECK(!strcmp(buf, "broadcast(count 8, f32, root 1)"));
}
