/* test_store_tcp.c - the TCP store end to end: auth, strangers, failures, 1,000 clients, ranks. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cddp/store.h"
#include "common/clock.h"
#include "store/store_internal.h"
#include "store/wire.h"
#include "test.h"

static double ms_since(uint64_t t0) { return (cddp__now_ns() - t0) / 1e6; }

static cddp_store_t *connect_ok(int port, const char *token) {
  cddp_store_t *s = NULL;
  CHECK_OK(cddp_store_tcp_connect(&s, "127.0.0.1", port, token, 5000));
  return s;
}

TEST(auth_right_wrong_missing_token) {
  cddp_store_server_t *srv;
  CHECK_OK(cddp_store_server_start(&srv, "127.0.0.1", 0, "job-token"));
  int port = cddp_store_server_port(srv);
  cddp_store_t *good = connect_ok(port, "job-token"), *bad = NULL;
  CHECK_OK(cddp_store_set(good, "k", "v", 1));
  char ep[64];
  snprintf(ep, sizeof ep, "127.0.0.1:%d", port);
  CHECK_RESULT(cddp_store_tcp_connect(&bad, "127.0.0.1", port, "wrong", 5000), CDDP_AUTH);
  CHECK(bad == NULL);
  CHECK(strstr(cddp_last_error(), "refused") && strstr(cddp_last_error(), ep));
  CHECK_RESULT(cddp_store_tcp_connect(&bad, "127.0.0.1", port, NULL, 5000), CDDP_AUTH);
  CHECK(strstr(cddp_last_error(), "CDDP_TOKEN") != NULL);
  CHECK_RESULT(cddp_store_tcp_connect(&bad, "127.0.0.1", port, "", 5000), CDDP_AUTH);
  /* the good client carries on */
  int64_t r;
  CHECK_OK(cddp_store_add(good, "n", 2, &r));
  CHECK_EQ(r, 2);
  void *v;
  size_t n;
  CHECK_OK(cddp_store_get(good, "k", &v, &n, 0));
  CHECK(n == 1 && !memcmp(v, "v", 1));
  free(v);
  /* the three refusals are counted where a job can read them */
  CHECK_OK(cddp_store_get(good, CDDP_STORE_REFUSED_KEY, &v, &n, 0));
  CHECK(n > 12 && !memcmp(v, "3 127.0.0.1:", 12));
  free(v);
  cddp_store_close(good);
  cddp_store_server_stop(srv);
}

TEST(no_token_server_accepts_any_client) {
  cddp_store_server_t *srv;
  CHECK_OK(cddp_store_server_start(&srv, "127.0.0.1", 0, ""));
  cddp_store_t *a = connect_ok(cddp_store_server_port(srv), NULL);
  cddp_store_t *b = connect_ok(cddp_store_server_port(srv), "some-token");
  CHECK_OK(cddp_store_set(a, "x", "1", 1));
  CHECK_OK(cddp_store_wait(b, (const char *[]){"x"}, 1, 1000));
  cddp_store_close(a);
  cddp_store_close(b);
  cddp_store_server_stop(srv);
}

/* A listener that is not a cddp store: answers each connection with reply, then closes
 * (reply NULL: stays silent until the test ends). */
struct fake {
  int lfd, port;
  const void *reply;
  size_t len;
};
static void *fake_server(void *arg) {
  struct fake *f = arg;
  int c = accept(f->lfd, NULL, NULL);
  if (c < 0) return NULL;
  char buf[256];
  if (f->reply) {
    (void)!recv(c, buf, sizeof buf, 0);
    (void)!send(c, f->reply, f->len, MSG_NOSIGNAL);
    usleep(100000);
    close(c);
  } else {
    sleep(30);
  }
  return NULL;
}
static void fake_start(struct fake *f, pthread_t *th) {
  f->lfd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t l = sizeof a;
  CHECK(bind(f->lfd, (struct sockaddr *)&a, sizeof a) == 0 && listen(f->lfd, 8) == 0);
  getsockname(f->lfd, (struct sockaddr *)&a, &l);
  f->port = ntohs(a.sin_port);
  pthread_create(th, NULL, fake_server, f);
}

TEST(stranger_is_reported_remote) {
  struct fake f = {.reply = "HTTP/1.1 400 Bad Request\r\n\r\n", .len = 28};
  pthread_t th;
  fake_start(&f, &th);
  cddp_store_t *s = NULL;
  CHECK_RESULT(cddp_store_tcp_connect(&s, "127.0.0.1", f.port, "t", 3000), CDDP_REMOTE);
  CHECK(strstr(cddp_last_error(), "not a cddp store") != NULL);
  pthread_join(th, NULL);
  close(f.lfd);
}

TEST(other_protocol_version_is_reported_remote) {
  cddp__wire_buf_t b = {0};
  size_t st = cddp__wire_begin(&b, CDDP__OP_CHALLENGE);
  cddp__wire_u32(&b, CDDP__WIRE_MAGIC);
  cddp__wire_u16(&b, 99);
  cddp__wire_u8(&b, 0);
  uint8_t nonce[32] = {0};
  cddp__wire_raw(&b, nonce, 32);
  cddp__wire_end(&b, st);
  struct fake f = {.reply = b.p, .len = b.len};
  pthread_t th;
  fake_start(&f, &th);
  cddp_store_t *s = NULL;
  CHECK_RESULT(cddp_store_tcp_connect(&s, "127.0.0.1", f.port, NULL, 3000), CDDP_REMOTE);
  CHECK(strstr(cddp_last_error(), "v99") != NULL);
  pthread_join(th, NULL);
  close(f.lfd);
  cddp__wire_buf_free(&b);
}

TEST(silent_peer_times_out_naming_endpoint) {
  struct fake f = {.reply = NULL};
  pthread_t th;
  fake_start(&f, &th);
  cddp_store_t *s = NULL;
  uint64_t t0 = cddp__now_ns();
  CHECK_RESULT(cddp_store_tcp_connect(&s, "127.0.0.1", f.port, NULL, 300), CDDP_TIMEOUT);
  CHECK(ms_since(t0) < 5000);
  char ep[64];
  snprintf(ep, sizeof ep, "127.0.0.1:%d", f.port);
  CHECK(strstr(cddp_last_error(), ep) != NULL);
  close(f.lfd);
  pthread_cancel(th); /* parked in sleep() */
  pthread_join(th, NULL);
}

TEST(garbage_closes_only_that_connection) {
  cddp_store_server_t *srv;
  CHECK_OK(cddp_store_server_start(&srv, "127.0.0.1", 0, "tok"));
  int port = cddp_store_server_port(srv);
  cddp_store_t *good = connect_ok(port, "tok");
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                          .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  CHECK(connect(fd, (struct sockaddr *)&a, sizeof a) == 0);
  CHECK(send(fd, "\xff\xff\xff\xff garbage", 12, 0) == 12);
  char buf[16];
  struct timeval tv = {5, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  CHECK_EQ(recv(fd, buf, sizeof buf, 0), 0); /* closed by the server */
  close(fd);
  CHECK_OK(cddp_store_set(good, "still", "here", 4));
  cddp_store_close(good);
  cddp_store_server_stop(srv);
}

TEST(unreachable_endpoint_times_out) {
  int port = cddp_test_free_port();
  cddp_store_t *s = NULL;
  uint64_t t0 = cddp__now_ns();
  CHECK_RESULT(cddp_store_tcp_connect(&s, "127.0.0.1", port, NULL, 300), CDDP_TIMEOUT);
  double ms = ms_since(t0);
  CHECK(ms >= 290 && ms < 3000 * cddp_test_scale());
  char ep[64];
  snprintf(ep, sizeof ep, "127.0.0.1:%d unreachable", port);
  CHECK(strstr(cddp_last_error(), ep) != NULL);
}

/* A host name that does not exist is not retried until the timeout: it is named at once.
 * (Where the resolver itself is unreachable, EAI_AGAIN, the connect keeps trying: a timeout
 * that still names the resolution.) */
TEST(unknown_host_fails_fast_naming_it) {
  cddp_store_t *s = NULL;
  uint64_t t0 = cddp__now_ns();
  cddp_result_t r = cddp_store_tcp_connect(&s, "cddp-no-such-host-9", 29999, NULL, 4000);
  double ms = ms_since(t0);
  CHECK(s == NULL);
  CHECK(strstr(cddp_last_error(), "cannot resolve host 'cddp-no-such-host-9'") != NULL);
  if (r == CDDP_NOT_FOUND) CHECK(ms < 3000 * cddp_test_scale());
  else CHECK_EQ(r, CDDP_TIMEOUT);
}

static void *start_late(void *arg) {
  int port = *(int *)arg;
  usleep(200000);
  cddp_store_server_t *srv;
  if (cddp_store_server_start(&srv, "127.0.0.1", port, NULL) != CDDP_OK) abort();
  return srv;
}

TEST(connect_retries_until_server_starts) {
  int port = cddp_test_free_port();
  pthread_t th;
  pthread_create(&th, NULL, start_late, &port);
  cddp_store_t *s = connect_ok(port, NULL);
  CHECK_OK(cddp_store_set(s, "a", "b", 1));
  cddp_store_close(s);
  void *srv;
  pthread_join(th, &srv);
  cddp_store_server_stop(srv);
}

TEST(port_in_use_fails_fast_naming_port) {
  cddp_store_server_t *srv, *srv2 = NULL;
  CHECK_OK(cddp_store_server_start(&srv, NULL, 0, NULL));
  int port = cddp_store_server_port(srv);
  uint64_t t0 = cddp__now_ns();
  CHECK_RESULT(cddp_store_server_start(&srv2, NULL, port, NULL), CDDP_SYSTEM);
  CHECK(ms_since(t0) < 2000);
  char want[64];
  snprintf(want, sizeof want, "port %d is in use", port);
  CHECK(strstr(cddp_last_error(), want) != NULL);
  CHECK(srv2 == NULL);
  cddp_store_server_stop(srv);
}

/* 1,000 clients on one server: connect + authenticate + add, then 1,000 parked waits
 * woken by one set. The hooks let one thread park them all. */
TEST_TIMEOUT(thousand_clients, 120) {
  enum { N = 1000 };
  struct rlimit rl;
  getrlimit(RLIMIT_NOFILE, &rl);
  if (rl.rlim_max < 2 * N + 64) TEST_FAIL("open-file hard limit %ld too low", (long)rl.rlim_max);
  cddp_store_server_t *srv;
  CHECK_OK(cddp_store_server_start(&srv, "127.0.0.1", 0, "tok"));
  int port = cddp_store_server_port(srv);
  static cddp_store_t *c[N];
  uint64_t t0 = cddp__now_ns();
  for (int i = 0; i < N; i++) {
    c[i] = connect_ok(port, "tok");
    int64_t r;
    CHECK_OK(cddp_store_add(c[i], "arrived", 1, &r));
    CHECK_EQ(r, i + 1);
  }
  double connect_ms = ms_since(t0);
  const char *go[] = {"go"};
  for (int i = 0; i < N; i++) CHECK_OK(cddp__store_tcp_wait_begin(c[i], go, 1, 30000));
  cddp_store_t *setter = connect_ok(port, "tok");
  int64_t nk; /* the server keeps serving while 1,000 waits are parked */
  CHECK_OK(cddp_store_num_keys(setter, &nk));
  CHECK_EQ(nk, 1);
  t0 = cddp__now_ns();
  CHECK_OK(cddp_store_set(setter, "go", "1", 1));
  for (int i = 0; i < N; i++) CHECK_OK(cddp__store_tcp_wait_end(c[i], go, 1, 30000));
  double wake_ms = ms_since(t0);
  fprintf(stderr, "1000 clients: connect+auth+add %.0f ms, wake all %.1f ms\n", connect_ms, wake_ms);
  int64_t v;
  CHECK_OK(cddp_store_add(setter, "arrived", 0, &v));
  CHECK_EQ(v, N);
  for (int i = 0; i < N; i++) cddp_store_close(c[i]);
  cddp_store_close(setter);
  cddp_store_server_stop(srv);
}

/* Runs a store server in a child process (so that this process stays single-threaded
 * when it forks ranks: forking a process while another thread holds a libc or libcrypto
 * lock can deadlock the child). Returns the port; *pid is the server process. */
static int server_process(const char *token, pid_t *pid) {
  int pfd[2];
  CHECK(pipe(pfd) == 0);
  fflush(NULL);
  *pid = fork();
  if (*pid == 0) {
    cddp_store_server_t *srv;
    if (cddp_store_server_start(&srv, "127.0.0.1", 0, token) != CDDP_OK) _exit(1);
    int port = cddp_store_server_port(srv);
    (void)!write(pfd[1], &port, sizeof port);
    pause();
    _exit(0);
  }
  close(pfd[1]);
  int port = 0;
  CHECK(read(pfd[0], &port, sizeof port) == sizeof port);
  close(pfd[0]);
  return port;
}

static void server_process_end(pid_t pid) {
  kill(pid, SIGKILL);
  waitpid(pid, NULL, 0);
}

struct ranks_arg {
  int port;
  int rounds;
};

/* Each rank: a counter barrier per round under a per-round prefix. */
static void barrier_rank(int rank, int world, void *arg) {
  struct ranks_arg *ra = arg;
  cddp_store_t *base = connect_ok(ra->port, "tok");
  for (int round = 0; round < ra->rounds; round++) {
    char pfx[32];
    snprintf(pfx, sizeof pfx, "job/r%d/", round);
    cddp_store_t *s;
    CHECK_OK(cddp_store_prefix_create(&s, base, pfx, 0));
    char key[48], val[48];
    snprintf(key, sizeof key, "addr/%d", rank);
    snprintf(val, sizeof val, "rank-%d-round-%d", rank, round);
    CHECK_OK(cddp_store_set(s, key, val, strlen(val)));
    int64_t arrived;
    CHECK_OK(cddp_store_add(s, "arrived", 1, &arrived));
    CHECK(arrived >= 1 && arrived <= world);
    if (arrived == world) CHECK_OK(cddp_store_set(s, "done", "1", 1));
    CHECK_OK(cddp_store_wait(s, (const char *[]){"done"}, 1, 20000));
    /* after the barrier every rank's key is there */
    for (int r = 0; r < world; r++) {
      snprintf(key, sizeof key, "addr/%d", r);
      snprintf(val, sizeof val, "rank-%d-round-%d", r, round);
      void *v;
      size_t n;
      CHECK_OK(cddp_store_get(s, key, &v, &n, 0));
      CHECK(n == strlen(val) && !memcmp(v, val, n));
      free(v);
    }
    cddp_store_close(s);
  }
  cddp_store_close(base);
}

TEST(forked_ranks_counter_barrier) {
  pid_t spid;
  struct ranks_arg ra = {server_process("tok", &spid), 3};
  CHECK_EQ(cddp_test_fork_ranks(8, barrier_rank, &ra, 60), 0);
  cddp_store_t *s = connect_ok(ra.port, "tok");
  int64_t n;
  CHECK_OK(cddp_store_num_keys(s, &n));
  CHECK_EQ(n, 3 * (8 + 2));
  cddp_store_close(s);
  server_process_end(spid);
}

static void late_setter_rank(int rank, int world, void *arg) {
  usleep(100000);
  cddp_store_t *s = connect_ok(*(int *)arg, "tok");
  CHECK_OK(cddp_store_set(s, "from-child", "x", 1));
  cddp_store_close(s);
}

TEST(wait_woken_by_another_process) {
  pid_t spid;
  int port = server_process("tok", &spid);
  cddp_store_t *s = connect_ok(port, "tok");
  pid_t pid = fork();
  if (pid == 0) {
    late_setter_rank(0, 1, &port);
    _exit(0);
  }
  CHECK_OK(cddp_store_wait(s, (const char *[]){"from-child"}, 1, 10000));
  int st;
  waitpid(pid, &st, 0);
  CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  cddp_store_close(s);
  server_process_end(spid);
}

static void *kill_later(void *arg) {
  usleep(200000);
  kill(*(pid_t *)arg, SIGKILL);
  return NULL;
}

TEST(server_killed_mid_call_returns_remote) {
  pid_t pid;
  int port = server_process(NULL, &pid);
  cddp_store_t *s = connect_ok(port, NULL);
  pthread_t th;
  pthread_create(&th, NULL, kill_later, &pid);
  uint64_t t0 = cddp__now_ns();
  CHECK_RESULT(cddp_store_wait(s, (const char *[]){"never"}, 1, 30000), CDDP_REMOTE);
  CHECK(ms_since(t0) < 3000);
  char ep[64];
  snprintf(ep, sizeof ep, "127.0.0.1:%d", port);
  CHECK(strstr(cddp_last_error(), ep) != NULL);
  CHECK_RESULT(cddp_store_set(s, "k", "v", 1), CDDP_REMOTE); /* and stays failed, no hang */
  pthread_join(th, NULL);
  waitpid(pid, NULL, 0);
  cddp_store_close(s);
}

static void *stop_later(void *arg) {
  usleep(150000);
  cddp_store_server_stop(arg);
  return NULL;
}

TEST(server_stop_wakes_parked_clients) {
  cddp_store_server_t *srv;
  CHECK_OK(cddp_store_server_start(&srv, "127.0.0.1", 0, NULL));
  cddp_store_t *s = connect_ok(cddp_store_server_port(srv), NULL);
  void *v;
  pthread_t th;
  pthread_create(&th, NULL, stop_later, srv);
  uint64_t t0 = cddp__now_ns();
  CHECK_RESULT(cddp_store_get(s, "never", &v, NULL, 30000), CDDP_REMOTE);
  CHECK(ms_since(t0) < 3000);
  pthread_join(th, NULL);
  cddp_store_close(s);
}

TEST(call_timeout_bounds_a_call) {
  /* a short store timeout does not cut a longer get short (the bound extends) */
  cddp_store_server_t *srv;
  CHECK_OK(cddp_store_server_start(&srv, "127.0.0.1", 0, NULL));
  cddp_store_t *s = connect_ok(cddp_store_server_port(srv), NULL);
  cddp_store_set_timeout(s, 50);
  void *v;
  uint64_t t0 = cddp__now_ns();
  CHECK_RESULT(cddp_store_get(s, "none", &v, NULL, 400), CDDP_TIMEOUT);
  CHECK(ms_since(t0) >= 390);
  CHECK(strstr(cddp_last_error(), "absent") != NULL); /* the server's answer, not a lost link */
  CHECK_OK(cddp_store_set(s, "k", "v", 1));           /* the connection is still good */
  cddp_store_close(s);
  cddp_store_server_stop(srv);
}

static void *shared_adder(void *arg) {
  for (int i = 0; i < 200; i++)
    if (cddp_store_add(arg, "shared", 1, NULL) != CDDP_OK) abort();
  return NULL;
}

TEST(threads_share_one_connection) {
  cddp_store_server_t *srv;
  CHECK_OK(cddp_store_server_start(&srv, "127.0.0.1", 0, "tok"));
  cddp_store_t *s = connect_ok(cddp_store_server_port(srv), "tok");
  pthread_t th[4];
  for (int i = 0; i < 4; i++) pthread_create(&th[i], NULL, shared_adder, s);
  for (int i = 0; i < 4; i++) pthread_join(th[i], NULL);
  int64_t v;
  CHECK_OK(cddp_store_add(s, "shared", 0, &v));
  CHECK_EQ(v, 800);
  cddp_store_close(s);
  cddp_store_server_stop(srv);
}

TEST(idle_unauthenticated_client_is_dropped) {
  cddp_store_server_t *srv;
  CHECK_OK(cddp_store_server_start(&srv, "127.0.0.1", 0, "tok"));
  cddp__store_server_set_handshake_ms(srv, 200);
  int port = cddp_store_server_port(srv);
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                          .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  CHECK(connect(fd, (struct sockaddr *)&a, sizeof a) == 0);
  cddp_store_t *good = connect_ok(port, "tok"); /* authenticated: never dropped */
  struct timeval tv = {5, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  char buf[8];
  uint64_t t0 = cddp__now_ns();
  CHECK_EQ(recv(fd, buf, sizeof buf, 0), 0); /* closed by the server */
  CHECK(ms_since(t0) < 3000);
  close(fd);
  usleep(300000);
  CHECK_OK(cddp_store_set(good, "k", "v", 1));
  cddp_store_close(good);
  cddp_store_server_stop(srv);
}

/* The will: a connection that ends without a goodbye (a crash) sets its key at once and wakes
 * the waiters; a proper close drops it; a later will replaces the earlier one. */
TEST(will_fires_on_abrupt_close_only) {
  cddp_store_server_t *srv;
  CHECK_OK(cddp_store_server_start(&srv, "127.0.0.1", 0, "tok"));
  int port = cddp_store_server_port(srv);
  cddp_store_t *watcher = connect_ok(port, "tok");
  /* proper close: no key */
  cddp_store_t *a = connect_ok(port, "tok");
  CHECK_OK(cddp__store_tcp_will(a, "dead/a", "gone", 4));
  cddp_store_close(a);
  usleep(50000);
  CHECK_RESULT(cddp_store_wait(watcher, (const char *[]){"dead/a"}, 1, 100), CDDP_TIMEOUT);
  /* abrupt close: the key appears and a parked wait wakes within milliseconds */
  cddp_store_t *b = connect_ok(port, "tok");
  CHECK_OK(cddp__store_tcp_will(b, "dead/first", "x", 1));
  CHECK_OK(cddp__store_tcp_will(b, "dead/b", "crashed", 7)); /* replaces the first */
  CHECK_OK(cddp__store_tcp_wait_begin(watcher, (const char *[]){"dead/b"}, 1, 5000));
  usleep(20000);
  uint64_t t0 = cddp__now_ns();
  cddp__store_tcp_abandon(b);
  CHECK_OK(cddp__store_tcp_wait_end(watcher, (const char *[]){"dead/b"}, 1, 5000));
  CHECK(ms_since(t0) < 1000 * cddp_test_scale()); /* "milliseconds": far below the 5 s wait */
  void *v = NULL;
  size_t n = 0;
  CHECK_OK(cddp_store_get(watcher, "dead/b", &v, &n, 0));
  CHECK(n == 7 && !memcmp(v, "crashed", 7));
  free(v);
  CHECK_RESULT(cddp_store_wait(watcher, (const char *[]){"dead/first"}, 1, 0), CDDP_TIMEOUT);
  /* a key already there stands (a round's outcome is not overwritten by a late death); a will
   * goes on the connection under a prefix view (cddp__store_prefix_inner) */
  cddp_store_t *c = connect_ok(port, "tok"), *view;
  CHECK_OK(cddp_store_set(watcher, "round/event", "done", 4));
  CHECK_OK(cddp__store_tcp_will(c, "round/event", "lost", 4));
  CHECK_OK(cddp_store_prefix_create(&view, c, "job/", 0));
  CHECK(cddp__store_prefix_inner(view) == c && cddp__store_prefix_inner(c) == c);
  cddp_store_close(view);
  cddp__store_tcp_abandon(c);
  usleep(50000);
  CHECK_OK(cddp_store_get(watcher, "round/event", &v, &n, 0));
  CHECK(n == 4 && !memcmp(v, "done", 4));
  free(v);
  /* only TCP clients carry a will */
  cddp_store_t *mem;
  CHECK_OK(cddp_store_mem_create(&mem));
  CHECK_RESULT(cddp__store_tcp_will(mem, "k", "v", 1), CDDP_INVALID_ARG);
  cddp_store_close(mem);
  cddp_store_close(watcher);
  cddp_store_server_stop(srv);
}

static int stopped(void *pid) { return cddp_test_proc_state(*(pid_t *)pid) == 'T'; }

/* This process's socket connected to 127.0.0.1:port (the client's, found by its peer), or -1. */
static int fd_to(int port) {
  for (int fd = 3; fd < 1024; fd++) {
    struct sockaddr_in a;
    socklen_t n = sizeof a;
    if (getpeername(fd, (struct sockaddr *)&a, &n) == 0 && a.sin_family == AF_INET &&
        ntohs(a.sin_port) == port)
      return fd;
  }
  return -1;
}

static int readable(void *fd) {
  struct pollfd p = {.fd = *(int *)fd, .events = POLLIN};
  return poll(&p, 1, 0) == 1 && (p.revents & POLLIN);
}

TEST(late_answer_is_never_read_as_the_next) {
  /* the client's periodic read of the peers list times out while the server is frozen; its
   * late TIMEOUT answer (0x93) was then read as the answer to the call that followed. Ordered
   * by the server's state, never by sleeps: stopped ('T') before the call, so the peek can
   * only time out; the late answer waiting on the client's socket before the next call. */
  pid_t pid;
  int port = server_process(NULL, &pid);
  cddp_store_t *s = connect_ok(port, NULL);
  int fd = fd_to(port);
  CHECK(fd >= 0);
  cddp_store_set_timeout(s, 200 * cddp_test_scale());
  usleep(2100000); /* the peers list is due again (every 2 s by the client's clock: never early) */
  kill(pid, SIGSTOP);
  CHECK(cddp_test_wait_for(stopped, &pid, 5));
  CHECK_RESULT(cddp_store_add(s, "n", 1, NULL), CDDP_REMOTE);
  CHECK(strstr(cddp_last_error(), "unexpected answer") == NULL);
  CHECK(strstr(cddp_last_error(), "peers") != NULL); /* says which read failed */
  kill(pid, SIGCONT);
  CHECK(cddp_test_wait_for(readable, &fd, 10)); /* the late answer has come: it must not be taken for anything */
  CHECK_RESULT(cddp_store_add(s, "n", 1, NULL), CDDP_REMOTE);
  CHECK(strstr(cddp_last_error(), "unexpected answer") == NULL);
  cddp_store_close(s);
  cddp_store_t *fresh = connect_ok(port, NULL);
  int64_t n = -1;
  CHECK_OK(cddp_store_add(fresh, "n", 0, &n));
  CHECK_EQ(n, 0); /* the add was never sent on the stream with an answer owed */
  cddp_store_close(fresh);
  server_process_end(pid);
}
