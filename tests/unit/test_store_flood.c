/* test_store_flood.c - the store under a descriptor flood: a stranger's HELLO-only connections
 * beyond the open-file limit neither wedge it nor spin it; the job's clients are answered, idle
 * strangers are dropped with or without a token, and SIGTERM still ends it. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cddp/store.h"
#include "common/clock.h"
#include "store/store_internal.h"
#include "store/wire.h"
#include "test.h"

#define NOFILE 64   /* the store's descriptor limit, soft and hard */
#define FLOOD 200   /* the stranger's connections: well past it */

static double ms_since(uint64_t t0) { return (cddp__now_ns() - t0) / 1e6; }

/* `cddp store` in a child, as its main does it (signals to sigwait), under a hard limit of
 * NOFILE descriptors. Returns the port; *pid is the child. */
static int flood_store(const char *token, int handshake_ms, pid_t *pid) {
  int pfd[2];
  CHECK(pipe(pfd) == 0);
  fflush(NULL);
  *pid = fork();
  if (*pid == 0) {
    struct rlimit rl = {NOFILE, NOFILE};
    if (setrlimit(RLIMIT_NOFILE, &rl) != 0) _exit(3);
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    cddp_store_server_t *srv;
    if (cddp_store_server_start(&srv, "127.0.0.1", 0, token) != CDDP_OK) _exit(1);
    cddp__store_server_set_handshake_ms(srv, handshake_ms);
    int port = cddp_store_server_port(srv);
    (void)!write(pfd[1], &port, sizeof port);
    int sig;
    while (sigwait(&set, &sig) != 0) {
    }
    cddp_store_server_stop(srv);
    _exit(0);
  }
  close(pfd[1]);
  int port = 0;
  CHECK(read(pfd[0], &port, sizeof port) == sizeof port);
  close(pfd[0]);
  return port;
}

/* A stranger's connection that sends a valid HELLO and then nothing. */
static int hello_only(int port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  CHECK(fd >= 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                          .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  CHECK(connect(fd, (struct sockaddr *)&a, sizeof a) == 0);
  cddp__wire_buf_t b = {0};
  size_t st = cddp__wire_begin(&b, CDDP__OP_HELLO);
  cddp__wire_u32(&b, CDDP__WIRE_MAGIC);
  cddp__wire_u16(&b, CDDP__WIRE_VERSION);
  cddp__wire_end(&b, st);
  CHECK(send(fd, b.p, b.len, MSG_NOSIGNAL) == (ssize_t)b.len);
  cddp__wire_buf_free(&b);
  return fd;
}

/* CPU seconds (user + system) the process has used so far. */
static double cpu_s(pid_t pid) {
  char path[64], buf[1024];
  snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
  FILE *f = fopen(path, "r");
  CHECK(f != NULL);
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = 0;
  char *p = strrchr(buf, ')');
  CHECK(p != NULL);
  unsigned long ut = 0, st = 0;
  /* after ")": state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime stime */
  CHECK(sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut, &st) == 2);
  return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

/* SIGTERM, then the child must exit 0 within 2 s (the spec says 1 s; the slack is for a loaded
 * CI machine: a wedged store never exits at all). */
static void term_and_reap(pid_t pid) {
  uint64_t t0 = cddp__now_ns();
  CHECK(kill(pid, SIGTERM) == 0);
  int status = 0;
  while (waitpid(pid, &status, WNOHANG) == 0) {
    if (ms_since(t0) > 2000) {
      kill(pid, SIGKILL);
      waitpid(pid, NULL, 0);
      TEST_FAIL("the store ignored SIGTERM for %.0f ms under the flood", ms_since(t0));
    }
    usleep(10000);
  }
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  fprintf(stderr, "# SIGTERM obeyed in %.0f ms\n", ms_since(t0));
}

static void flood_then_serve(const char *token) {
  pid_t pid;
  int port = flood_store(token, 60000, &pid); /* the sweep cannot help: only shedding can */
  cddp_store_t *early = NULL, *late = NULL;
  CHECK_OK(cddp_store_tcp_connect(&early, "127.0.0.1", port, token, 5000));
  int fds[FLOOD];
  for (int i = 0; i < FLOOD; i++) fds[i] = hello_only(port);
  usleep(200000);
  /* a job's client connected before the flood is still answered */
  uint64_t t0 = cddp__now_ns();
  CHECK_OK(cddp_store_set(early, "k", "v", 1));
  fprintf(stderr, "# call of an earlier client under the flood: %.1f ms\n", ms_since(t0));
  /* and a new one gets in: the oldest stranger makes room */
  t0 = cddp__now_ns();
  CHECK_OK(cddp_store_tcp_connect(&late, "127.0.0.1", port, token, 5000));
  void *v = NULL;
  size_t n = 0;
  CHECK_OK(cddp_store_get(late, "k", &v, &n, 1000));
  CHECK(n == 1 && !memcmp(v, "v", 1));
  free(v);
  fprintf(stderr, "# new client's connect + get under the flood: %.1f ms\n", ms_since(t0));
  /* no spinning: a store with nothing to do uses next to no CPU, flood or not */
  double c0 = cpu_s(pid);
  usleep(500000);
  double used = cpu_s(pid) - c0;
  fprintf(stderr, "# store CPU over 0.5 s of an idle flood: %.2f s\n", used);
  CHECK(used < 0.2);
  cddp_store_close(early);
  cddp_store_close(late);
  term_and_reap(pid);
  for (int i = 0; i < FLOOD; i++) close(fds[i]);
}

TEST(flood_past_the_fd_limit_with_a_token) { flood_then_serve("job-token"); }

TEST(flood_past_the_fd_limit_without_a_token) { flood_then_serve(NULL); }

/* Without a token a HELLO is all a stranger needs to be "in"; it is still dropped when it asks
 * nothing within the handshake time, while the job's idle client stays. */
TEST(hello_only_stranger_dropped_without_a_token) {
  pid_t pid;
  int port = flood_store(NULL, 300, &pid);
  cddp_store_t *good = NULL;
  CHECK_OK(cddp_store_tcp_connect(&good, "127.0.0.1", port, NULL, 5000));
  int fd = hello_only(port);
  struct timeval tv = {5, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  char buf[256];
  uint64_t t0 = cddp__now_ns();
  ssize_t r;
  while ((r = recv(fd, buf, sizeof buf, 0)) > 0) { /* the CHALLENGE, then the close */
  }
  CHECK_EQ(r, 0);
  CHECK(ms_since(t0) < 4000);
  close(fd);
  usleep(300000);
  CHECK_OK(cddp_store_set(good, "k", "v", 1)); /* idle as long, never dropped */
  cddp_store_close(good);
  term_and_reap(pid);
}
