/* test_comm_tcp_fail.c - TCP transport under stress and failure: back-to-back, abort, timeout, dead peer, strangers. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <semaphore.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>

#include "cddp/comm.h"
#include "comm/tcp.h"
#include "job/elastic.h"
#include "test_comm_tcp_harness.h"

static double ms_since(uint64_t t0) { return (double)(cddp__now_ns() - t0) / 1e6; }

/* ---- many collectives back to back, mixed kinds and sizes ---- */
static void back_to_back_body(trank_t *tr) {
  int w = tr->job->world;
  int64_t v[300], out[300 * 4];
  for (int it = 0; it < 600; it++) {
    size_t n = 1 + (size_t)(it * 37) % 300;
    for (size_t i = 0; i < n; i++) v[i] = it + (int64_t)i * tr->rank;
    switch (it % 4) {
      case 0:
      case 1:
        CHECK_OK(coll(tr, CDDP__ALLREDUCE, v, v, n, CDDP_I64, CDDP_SUM, 0, it % 2 ? CDDP_ALGO_RING : CDDP_ALGO_AUTO));
        for (size_t i = 0; i < n; i++) CHECK_EQ(v[i], (int64_t)w * it + (int64_t)i * w * (w - 1) / 2);
        break;
      case 2:
        CHECK_OK(coll(tr, CDDP__ALLGATHER, v, out, n, CDDP_I64, CDDP_SUM, 0, CDDP_ALGO_AUTO));
        for (int r = 0; r < w; r++) CHECK_EQ(out[(size_t)r * n + n - 1], it + (int64_t)(n - 1) * r);
        break;
      default:
        CHECK_OK(coll(tr, CDDP__BROADCAST, v, v, n, CDDP_I64, CDDP_SUM, it % w, CDDP_ALGO_AUTO));
        CHECK_EQ(v[n - 1], it + (int64_t)(n - 1) * (it % w));
        CHECK_OK(coll(tr, CDDP__BARRIER, NULL, NULL, 0, CDDP_I32, CDDP_SUM, 0, CDDP_ALGO_AUTO));
    }
  }
}
TEST_TIMEOUT(tcp_back_to_back_world3, 60) { run_job(3, back_to_back_body, NULL); }

/* ---- abort from another thread while rank 0 waits for rank 1 ---- */
static void *aborter(void *p) {
  trank_t *tr = p;
  usleep(200 * 1000);
  __atomic_store_n(&tr->aborted, 1, __ATOMIC_SEQ_CST);
  cddp__transport_tcp.wake(tr->st);
  return NULL;
}
static void abort_body(trank_t *tr) {
  float x[1000] = {0};
  if (tr->rank == 0) {
    pthread_t th;
    uint64_t t0 = cddp__now_ns();
    pthread_create(&th, NULL, aborter, tr);
    CHECK_RESULT(coll_dl(tr, CDDP__ALLREDUCE, x, x, 1000, CDDP_F32, CDDP_SUM, 0, CDDP_ALGO_AUTO, 20000), CDDP_ABORTED);
    CHECK(ms_since(t0) < 1500);
    CHECK(strstr(cddp_last_error(), "aborted") != NULL);
    pthread_join(th, NULL);
    /* after a failure the transport refuses work until it is destroyed */
    CHECK_RESULT(coll(tr, CDDP__BARRIER, NULL, NULL, 0, CDDP_I32, CDDP_SUM, 0, CDDP_ALGO_AUTO), CDDP_INVALID_USAGE);
  }
  pthread_barrier_wait(&tr->job->bar); /* rank 1 never joined the allreduce */
}
TEST(tcp_abort_from_another_thread) { run_job(2, abort_body, NULL); }

/* ---- deadline: rank 1 never calls; rank 0 gets TIMEOUT naming it ---- */
static void timeout_body(trank_t *tr) {
  double x[64] = {0};
  if (tr->rank == 0) {
    uint64_t t0 = cddp__now_ns();
    CHECK_RESULT(coll_dl(tr, CDDP__ALLREDUCE, x, x, 64, CDDP_F64, CDDP_SUM, 0, CDDP_ALGO_AUTO, 300), CDDP_TIMEOUT);
    CHECK(ms_since(t0) >= 250 && ms_since(t0) < 3000);
    CHECK(strstr(cddp_last_error(), "rank 1 (host testhost1)") != NULL);
  }
  pthread_barrier_wait(&tr->job->bar);
}
TEST(tcp_deadline_names_the_peer) { run_job(2, timeout_body, NULL); }

/* ---- a rank that goes away mid-collective: every other rank fails naming it ---- */
static void vanish_body(trank_t *tr) {
  size_t n = 4 << 20;
  float *x = calloc(n, sizeof *x);
  int victim = tr->job->world - 2;
  if (tr->rank == victim) {
    usleep(100 * 1000); /* let the others block in the allreduce, then close every socket */
    free(x);
    return; /* rank_main destroys the transport */
  }
  uint64_t t0 = cddp__now_ns();
  cddp_result_t r = coll_dl(tr, CDDP__ALLREDUCE, x, x, n, CDDP_F32, CDDP_SUM, 0, CDDP_ALGO_RING, 20000);
  CHECK_RESULT(r, CDDP_REMOTE);
  char want[64];
  snprintf(want, sizeof want, "rank %d (host testhost%d)", victim, victim);
  if (!strstr(cddp_last_error(), want)) TEST_FAIL("rank %d: error does not name %s: %s", tr->rank, want, cddp_last_error());
  CHECK(ms_since(t0) < 2000);
  free(x);
}
TEST(tcp_vanished_peer_world2) { run_job(2, vanish_body, NULL); }
TEST(tcp_vanished_peer_world4) { run_job(4, vanish_body, NULL); }

/* ---- a stranger on rank 1's listening port is turned away; the job carries on ---- */
static sem_t stranger_done;
static void wait_for_stranger(trank_t *tr) {
  if (tr->rank == 0) sem_wait(&stranger_done);
}
static void stranger_body(trank_t *tr) {
  float x[5] = {1, 2, 3, 4, 5};
  CHECK_OK(coll(tr, CDDP__ALLREDUCE, x, x, 5, CDDP_F32, CDDP_SUM, 0, CDDP_ALGO_AUTO));
  CHECK(x[4] == 10.0f);
}
static int stranger_connect(const struct sockaddr_storage *sa, socklen_t len) {
  int fd = socket(sa->ss_family, SOCK_STREAM, 0);
  CHECK(fd >= 0);
  CHECK(connect(fd, (const struct sockaddr *)sa, len) == 0);
  return fd;
}
/* The listener must close the connection (EOF) within 2 s. */
static void expect_closed(int fd) {
  struct pollfd p = {fd, POLLIN, 0};
  CHECK(poll(&p, 1, 2000) == 1);
  char b[64];
  CHECK(recv(fd, b, sizeof b, 0) <= 0);
  close(fd);
}
TEST(tcp_stranger_is_rejected) {
  sem_init(&stranger_done, 0, 0);
  job_t *j = calloc(1, sizeof *j);
  j->before_init = wait_for_stranger;
  job_start(j, 2, stranger_body, NULL);
  void *val;
  size_t vlen;
  CHECK_OK(cddp_store_get(j->base, "comm/r0/tcp/addr/1", &val, &vlen, 5000));
  struct sockaddr_storage sa;
  socklen_t len;
  uint64_t nonce;
  CHECK_OK(cddp__tcp_addr_parse(val, &sa, &len, &nonce));
  free(val);
  int fd = stranger_connect(&sa, len); /* speaks HTTP */
  const char junk[CDDP__TCP_HELLO_BYTES] = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
  CHECK(send(fd, junk, sizeof junk, 0) == (ssize_t)sizeof junk);
  expect_closed(fd);
  fd = stranger_connect(&sa, len); /* a cddp peer of another job: right magic, wrong nonce */
  cddp__tcp_hello_t h = {CDDP__TCP_MAGIC, CDDP__TCP_VERSION, CDDP__TCP_HELLO, 0, 2, 0, 1, 0, 2, nonce ^ 1};
  unsigned char b[CDDP__TCP_HELLO_BYTES];
  cddp__tcp_hello_encode(&h, b);
  CHECK(send(fd, b, sizeof b, 0) == (ssize_t)sizeof b);
  expect_closed(fd);
  int idle = stranger_connect(&sa, len); /* connects and says nothing */
  sem_post(&stranger_done);
  job_join(j);
  for (int r = 0; r < 2; r++) CHECK_OK(j->r[r].init_result);
  close(idle);
  free(j);
}

/* ---- real processes over a real TCP store; one is SIGKILLed mid-job ---- */
static int store_port;
static void killed_rank(int rank, int world, void *arg) {
  cddp_store_t *s;
  cddp_comm_t *c;
  CHECK_OK(cddp_store_tcp_connect(&s, "127.0.0.1", store_port, NULL, 5000));
  cddp_comm_config_t cfg;
  cddp_comm_config_default(&cfg);
  cfg.transport = "tcp", cfg.timeout_ms = 20000;
  CHECK_OK(cddp_comm_init(&c, s, rank, world, 0, &cfg));
  CHECK(strcmp(cddp_comm_transport(c), "tcp") == 0);
  size_t n = 1 << 20;
  float *x = calloc(n, sizeof *x);
  for (int it = 0;; it++) {
    if (rank == 2 && it == 3) {
      char t[32];
      snprintf(t, sizeof t, "%llu", (unsigned long long)cddp__now_ns());
      CHECK_OK(cddp_store_set(s, "victim/died_ns", t, strlen(t) + 1));
      kill(getpid(), SIGKILL);
    }
    cddp_result_t r = cddp_allreduce(c, x, x, n, CDDP_F32, CDDP_SUM);
    if (r == CDDP_OK) continue;
    CHECK(r == CDDP_REMOTE);
    if (!strstr(cddp_last_error(), "rank 2 ")) TEST_FAIL("rank %d: error does not name rank 2: %s", rank, cddp_last_error());
    void *v;
    size_t len;
    CHECK_OK(cddp_store_get(s, "victim/died_ns", &v, &len, 1000));
    double ms = (double)(cddp__now_ns() - strtoull(v, NULL, 10)) / 1e6;
    free(v);
    if (ms > 2000) TEST_FAIL("rank %d noticed after %.0f ms", rank, ms);
    break;
  }
  cddp_comm_destroy(c);
  cddp_store_close(s);
  free(x);
}
TEST(tcp_sigkilled_peer_is_named_within_2s) {
  cddp_test_store_child_t srv;
  CHECK((store_port = cddp_test_store_child_start(&srv)) > 0);
  int failed = cddp_test_fork_ranks(4, killed_rank, NULL, 30);
  CHECK(cddp_test_store_child_stop(&srv));
  CHECK_EQ(failed, 1); /* the victim itself */
}

/* ---- a forming generation given up: rank 0 published its address and died before it
 * connected, so rank 1 waits in accept; the store announces the next generation and rank 1
 * must give up now, not at the comm timeout (10 s here, 300 s by default). ---- */
static void *bump_after_300ms(void *arg) {
  usleep(300 * 1000);
  int64_t g;
  cddp__job_announce_t a = cddp__job_announce_replace(0, 1);
  cddp__gen_bump(arg, &a, &g);
  return NULL;
}

TEST(tcp_bootstrap_gives_up_with_its_generation) {
  cddp_store_t *base, *gen, *view;
  CHECK_OK(cddp_store_mem_create(&base));
  CHECK_OK(cddp__gen_view(&gen, base, 0, cddp__deadline_ms(20000)));
  CHECK_OK(cddp_store_prefix_create(&view, gen, "comm/r0/", 0));
  cddp_comm_config_t cfg = {"native", "tcp", 1, 10000, CDDP_ALGO_AUTO};
  cddp__peer_t peers[2] = {{.host = "testhost0", .host_id = "id", .pid = getpid()},
                           {.host = "testhost1", .host_id = "id", .pid = getpid()}};
  int aborted = 0;
  cddp__comm_ctx_t ctx = {1, 2, 0, view, &cfg, peers, &aborted, 0, view};
  pthread_t th;
  CHECK(pthread_create(&th, NULL, bump_after_300ms, base) == 0);
  uint64_t t0 = cddp__now_ns();
  void *st = NULL;
  cddp_result_t r = cddp__transport_tcp.init(&ctx, &st);
  double ms = ms_since(t0);
  pthread_join(th, NULL);
  if (r == CDDP_OK) cddp__transport_tcp.destroy(st);
  CHECK_RESULT(r, CDDP_ABORTED);
  if (!strstr(cddp_last_error(), "generation 1")) TEST_FAIL("error does not name generation 1: %s", cddp_last_error());
  if (ms < 250 || ms > 2000 * cddp_test_scale()) TEST_FAIL("gave up after %.0f ms (want soon after the announcement at 300 ms)", ms);
  cddp_store_close(view);
  cddp_store_close(gen);
  cddp_store_close(base);
}
