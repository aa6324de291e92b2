/* test_sock.c - the network module: listen on port 0 and connect, bounded connects that name
 * host:port, lookups that fail at once, write_all / read_all under signals, addresses as text. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/sock.h"
#include "test.h"

static double ms_since(uint64_t t0) { return (double)(cddp__now_ns() - t0) / 1e6; }

static struct sockaddr_in loopback(int port) {
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                          .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  return a;
}

/* A listener on 127.0.0.1, port 0 (a free one): returns its fd, *port the port bound. */
static int listen_lo(int backlog, int *port) {
  int fd;
  struct sockaddr_in a = loopback(0);
  CHECK_OK(cddp__sock_socket(AF_INET, 0, &fd));
  CHECK_OK(cddp__sock_listen(fd, (struct sockaddr *)&a, sizeof a, 0, backlog, port));
  CHECK(*port > 0);
  return fd;
}

static int has(const char *text) { return strstr(cddp_last_error(), text) != NULL; }

TEST(listen_on_port_zero_and_connect) {
  int port, lfd = listen_lo(16, &port), c, s;
  struct sockaddr_storage from;
  /* by address and by name; blocking unless asked */
  const char *hosts[] = {"127.0.0.1", "localhost"};
  for (int i = 0; i < 2; i++) {
    CHECK_OK(cddp__sock_connect(hosts[i], port, 0, cddp__deadline_ms(2000), &c));
    CHECK((fcntl(c, F_GETFL) & O_NONBLOCK) == 0);
    CHECK((fcntl(c, F_GETFD) & FD_CLOEXEC) != 0);
    CHECK((s = cddp__sock_accept(lfd, CDDP__SOCK_NONBLOCK, &from)) >= 0);
    CHECK((fcntl(s, F_GETFL) & O_NONBLOCK) != 0);
    char text[64];
    cddp__sockaddr_text((struct sockaddr *)&from, text, sizeof text);
    CHECK(strncmp(text, "127.0.0.1:", 10) == 0); /* "localhost" may try ::1 first: refused, next */
    CHECK_OK(cddp__sock_write_all(c, "hello", 5, CDDP__SOCK_FOREVER));
    char buf[5];
    CHECK_OK(cddp__sock_read_all(s, buf, 5, cddp__deadline_ms(2000)));
    CHECK(memcmp(buf, "hello", 5) == 0);
    close(s), close(c);
  }
  CHECK_OK(cddp__sock_connect("127.0.0.1", port, CDDP__SOCK_NONBLOCK | CDDP__SOCK_NUMERIC, CDDP__SOCK_FOREVER, &c));
  CHECK((fcntl(c, F_GETFL) & O_NONBLOCK) != 0);
  close(c);
  /* the port is taken now: a second bind says so, naming it, with errno EADDRINUSE */
  int fd2;
  struct sockaddr_in a = loopback(port);
  CHECK_OK(cddp__sock_socket(AF_INET, 0, &fd2));
  CHECK_RESULT(cddp__sock_listen(fd2, (struct sockaddr *)&a, sizeof a, CDDP__SOCK_REUSEADDR, 16, NULL), CDDP_SYSTEM);
  CHECK_EQ(errno, EADDRINUSE);
  char want[64];
  snprintf(want, sizeof want, "bind 127.0.0.1:%d: ", port);
  CHECK(has(want));
  close(fd2), close(lfd);
}

TEST(free_port_and_port_in_use) {
  int port = cddp__sock_free_port();
  CHECK(port > 0);
  CHECK_EQ(cddp__sock_port_in_use(port), 0);
  int fd;
  struct sockaddr_in any = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  CHECK_OK(cddp__sock_socket(AF_INET, 0, &fd));
  CHECK_OK(cddp__sock_listen(fd, (struct sockaddr *)&any, sizeof any, CDDP__SOCK_REUSEADDR, 4, NULL));
  CHECK_EQ(cddp__sock_port_in_use(port), 1);
  close(fd);
  CHECK_EQ(cddp__sock_host_is_local("127.0.0.1"), 1);
  CHECK_EQ(cddp__sock_host_is_local("192.0.2.77"), 0); /* TEST-NET-1: nobody's address */
}

TEST(loopback_addresses_are_told_apart) {
  CHECK_EQ(cddp__sock_host_is_loopback("127.0.0.1"), 1);
  CHECK_EQ(cddp__sock_host_is_loopback("127.1.2.3"), 1);
  CHECK_EQ(cddp__sock_host_is_loopback("::1"), 1);
  CHECK_EQ(cddp__sock_host_is_loopback("128.0.0.1"), 0);
  CHECK_EQ(cddp__sock_host_is_loopback("0.0.0.0"), 0);
  CHECK_EQ(cddp__sock_host_is_loopback("::"), 0);
  CHECK_EQ(cddp__sock_host_is_loopback("localhost"), 0); /* a name: not numeric, binds all */
  CHECK_EQ(cddp__sock_host_is_loopback(""), 0);
  CHECK_EQ(cddp__sock_host_is_loopback(NULL), 0);
}

/* Where a store reached as HOST listens: its one address when it is this host's, a loopback one
 * only when asked by number or as localhost; else every interface, with the reason. */
TEST(listen_address_follows_the_endpoint) {
  char out[64], why[400];
  CHECK_EQ(cddp__sock_listen_addr_for("127.0.0.1", out, sizeof out, why, sizeof why), 1);
  CHECK(!strcmp(out, "127.0.0.1"));
  CHECK_EQ(cddp__sock_listen_addr_for("localhost", out, sizeof out, why, sizeof why), 1);
  CHECK(!strcmp(out, "127.0.0.1") || !strcmp(out, "::1"));
  CHECK_EQ(cddp__sock_listen_addr_for("0.0.0.0", out, sizeof out, why, sizeof why), 0);
  CHECK_EQ(why[0], 0); /* every interface, as asked: nothing to say */
  CHECK_EQ(cddp__sock_listen_addr_for(NULL, out, sizeof out, why, sizeof why), 0);
  CHECK_EQ(cddp__sock_listen_addr_for("192.0.2.77", out, sizeof out, why, sizeof why), 0); /* TEST-NET-1 */
  CHECK(strstr(why, "is no address of this host") != NULL);
  CHECK_EQ(cddp__sock_listen_addr_for("no-such-host.invalid", out, sizeof out, why, sizeof why), 0);
  CHECK(strstr(why, "does not resolve") != NULL);
  CHECK_EQ(out[0], 0);
}

TEST(refused_connect_names_host_port) {
  int port = cddp__sock_free_port(), fd;
  uint64_t t0 = cddp__now_ns();
  CHECK_RESULT(cddp__sock_connect("127.0.0.1", port, 0, cddp__deadline_ms(2000), &fd), CDDP_REMOTE);
  CHECK_EQ(errno, ECONNREFUSED);
  CHECK_EQ(fd, -1);
  CHECK(ms_since(t0) < 1000);
  char want[64];
  snprintf(want, sizeof want, "connect to 127.0.0.1:%d: Connection refused", port);
  CHECK(has(want));
}

/* A listener whose accept queue is full drops further SYNs: a connect to it hangs in SYN_SENT,
 * the way one to a silent host does. The module's bound ends it and names host:port. */
TEST(connect_timeout_is_bounded_and_names_host_port) {
  int port, lfd = listen_lo(0, &port);
  int held[64], nheld = 0, stuck = 0;
  for (; nheld < 64 && !stuck; nheld++) {
    struct sockaddr_in a = loopback(port);
    CHECK_OK(cddp__sock_socket(AF_INET, CDDP__SOCK_NONBLOCK, &held[nheld]));
    CHECK_OK(cddp__sock_connect_start(held[nheld], (struct sockaddr *)&a, sizeof a));
    struct pollfd p = {.fd = held[nheld], .events = POLLOUT};
    stuck = poll(&p, 1, 200) == 0;
  }
  if (!stuck) TEST_FAIL("the kernel completed %d connects to a listener with backlog 0", nheld);
  int fd;
  uint64_t t0 = cddp__now_ns();
  CHECK_RESULT(cddp__sock_connect("127.0.0.1", port, 0, cddp__deadline_ms(300), &fd), CDDP_TIMEOUT);
  double ms = ms_since(t0);
  CHECK(ms >= 290 && ms < 2000 * cddp_test_scale());
  CHECK_EQ(errno, ETIMEDOUT);
  CHECK_EQ(fd, -1);
  char want[64];
  snprintf(want, sizeof want, "connect to 127.0.0.1:%d: ", port);
  CHECK(has(want));
  for (int i = 0; i < nheld; i++) close(held[i]);
  close(lfd);
}

/* A name that does not exist fails at once with NOT_FOUND, never a retry: by the rules of
 * CDDP__SOCK_NUMERIC without asking anyone, and through the resolver for a name under
 * .invalid (RFC 6761) where one answers (EAI_AGAIN, no resolver reachable, is SYSTEM). */
TEST(unresolvable_name_fails_at_once) {
  struct addrinfo *res = (struct addrinfo *)1;
  uint64_t t0 = cddp__now_ns();
  CHECK_RESULT(cddp__sock_resolve("localhost", 80, CDDP__SOCK_NUMERIC, &res), CDDP_NOT_FOUND);
  CHECK(res == NULL);
  CHECK(has("cannot resolve host 'localhost'"));
  int fd;
  CHECK_RESULT(cddp__sock_connect("not-an-address", 80, CDDP__SOCK_NUMERIC, cddp__deadline_ms(5000), &fd),
               CDDP_NOT_FOUND);
  CHECK(ms_since(t0) < 100);
  t0 = cddp__now_ns();
  cddp_result_t r = cddp__sock_connect("cddp-no-such-host.invalid", 80, 0, cddp__deadline_ms(5000), &fd);
  CHECK(r == CDDP_NOT_FOUND || r == CDDP_SYSTEM);
  CHECK(has("cannot resolve host 'cddp-no-such-host.invalid': "));
  if (r == CDDP_NOT_FOUND) {
    CHECK(ms_since(t0) < 3000);
    CHECK_RESULT(cddp__sock_host_resolves("cddp-no-such-host.invalid", "TEST_VAR"), CDDP_NOT_FOUND);
    CHECK(has("cannot resolve host 'cddp-no-such-host.invalid' (from TEST_VAR): "));
  }
  CHECK_OK(cddp__sock_host_resolves("127.0.0.1", "TEST_VAR"));
  CHECK_OK(cddp__sock_resolve("::1", 5, 0, &res));
  CHECK_EQ(res->ai_family, AF_INET6);
  freeaddrinfo(res);
  CHECK_OK(cddp__sock_resolve(NULL, 5, CDDP__SOCK_PASSIVE, &res)); /* the IPv4 wildcard */
  char text[64];
  CHECK(strcmp(cddp__sockaddr_text(res->ai_addr, text, sizeof text), "0.0.0.0:5") == 0);
  freeaddrinfo(res);
}

static int signals; /* handlers run on either thread: counted atomically */
static void on_alarm(int sig) { (void)sig, __atomic_fetch_add(&signals, 1, __ATOMIC_RELAXED); }

enum { BIG = 24 << 20 };
static void *writer(void *arg) {
  int fd = *(int *)arg;
  unsigned char *buf = malloc(BIG);
  for (size_t i = 0; i < BIG; i++) buf[i] = (unsigned char)(i * 7 + (i >> 13));
  cddp_result_t r = CDDP_OK;
  for (size_t off = 0; off < BIG && r == CDDP_OK; off += 1 << 20) {
    r = cddp__sock_write_all(fd, buf + off, 1 << 20, CDDP__SOCK_FOREVER);
    usleep(2000); /* lets the reader block, so signals land in its recv */
  }
  free(buf);
  return (void *)(intptr_t)r;
}

/* Blocking sends and recvs interrupted by signals every 200 us (no SA_RESTART: EINTR, or a
 * short count) still move every byte, in order. */
TEST(write_all_read_all_survive_signals) {
  int sv[2];
  CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0);
  struct sigaction sa = {.sa_handler = on_alarm};
  sigemptyset(&sa.sa_mask);
  CHECK(sigaction(SIGALRM, &sa, NULL) == 0);
  struct itimerval it = {.it_interval = {0, 200}, .it_value = {0, 200}};
  CHECK(setitimer(ITIMER_REAL, &it, NULL) == 0);
  pthread_t th;
  CHECK(pthread_create(&th, NULL, writer, &sv[0]) == 0);
  unsigned char *got = malloc(BIG);
  for (size_t off = 0; off < BIG; off += 3 << 20) CHECK_OK(cddp__sock_read_all(sv[1], got + off, 3 << 20, CDDP__SOCK_FOREVER));
  void *wr;
  pthread_join(th, &wr);
  struct itimerval off = {{0, 0}, {0, 0}};
  setitimer(ITIMER_REAL, &off, NULL);
  CHECK_EQ((intptr_t)wr, CDDP_OK);
  for (size_t i = 0; i < BIG; i++)
    if (got[i] != (unsigned char)(i * 7 + (i >> 13))) TEST_FAIL("byte %zu differs", i);
  CHECK(__atomic_load_n(&signals, __ATOMIC_RELAXED) > 10);
  free(got);
  /* the end of the stream: REMOTE, errno 0 */
  close(sv[0]);
  char c;
  CHECK_RESULT(cddp__sock_read_all(sv[1], &c, 1, CDDP__SOCK_FOREVER), CDDP_REMOTE);
  CHECK_EQ(errno, 0);
  CHECK(has("recv from socket "));
  CHECK(has(": closed by the peer"));
  close(sv[1]);
}

/* A non-blocking socket waits until the deadline; a blocking one until its SO_RCVTIMEO, and
 * then says EAGAIN (what doctor's probes tell a silent peer by). Both are TIMEOUT naming the
 * peer's host:port. */
TEST(read_all_times_out_both_ways) {
  int port, lfd = listen_lo(4, &port), c, s;
  CHECK_OK(cddp__sock_connect("127.0.0.1", port, CDDP__SOCK_NONBLOCK, cddp__deadline_ms(2000), &c));
  CHECK((s = cddp__sock_accept(lfd, 0, NULL)) >= 0);
  char buf[4], want[64];
  snprintf(want, sizeof want, "recv from 127.0.0.1:%d: timed out", port);
  uint64_t t0 = cddp__now_ns();
  CHECK_RESULT(cddp__sock_read_all(c, buf, 4, cddp__deadline_ms(200)), CDDP_TIMEOUT);
  CHECK(ms_since(t0) >= 190 && ms_since(t0) < 2000);
  CHECK_EQ(errno, ETIMEDOUT);
  CHECK(has(want));
  cddp__sock_timeouts(s, 150);
  t0 = cddp__now_ns();
  CHECK_RESULT(cddp__sock_read_all(s, buf, 4, CDDP__SOCK_FOREVER), CDDP_TIMEOUT);
  CHECK(ms_since(t0) >= 140 && ms_since(t0) < 2000);
  CHECK(errno == EAGAIN || errno == EWOULDBLOCK);
  CHECK(has("recv from 127.0.0.1:"));
  /* a peer gone: a send fails with REMOTE, not SIGPIPE */
  close(s);
  usleep(50000);
  cddp_result_t r = CDDP_OK;
  for (int i = 0; i < 100 && r == CDDP_OK; i++) r = cddp__sock_write_all(c, "xxxx", 4, cddp__deadline_ms(1000));
  CHECK_EQ(r, CDDP_REMOTE);
  CHECK(errno == EPIPE || errno == ECONNRESET);
  close(c), close(lfd);
}

/* A socket bound to port P that connects to 127.0.0.1:P opens with itself: a connect's
 * outcome counts it as refused (it would otherwise hold the port a server is about to bind). */
TEST(self_connected_socket_counts_as_refused) {
  int port = cddp__sock_free_port(), s;
  CHECK_OK(cddp__sock_socket(AF_INET, 0, &s));
  struct sockaddr_in a = loopback(port);
  CHECK_OK(cddp__sock_listen(s, (struct sockaddr *)&a, sizeof a, CDDP__SOCK_REUSEADDR, -1, NULL));
  CHECK(connect(s, (struct sockaddr *)&a, sizeof a) == 0);
  CHECK_EQ(cddp__sock_connect_error(s), ECONNREFUSED);
  close(s);
  /* an ordinary connection is not */
  int lfd = listen_lo(4, &port), c;
  CHECK_OK(cddp__sock_connect("127.0.0.1", port, 0, cddp__deadline_ms(2000), &c));
  CHECK_EQ(cddp__sock_connect_error(c), 0);
  close(c), close(lfd);
}

TEST(addresses_as_text) {
  struct sockaddr_storage ss = {0};
  struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)&ss;
  a6->sin6_family = AF_INET6;
  CHECK(inet_pton(AF_INET6, "fd00::2", &a6->sin6_addr) == 1);
  cddp__sockaddr_set_port(&ss, 29400);
  char buf[64];
  CHECK_EQ(cddp__sockaddr_port((struct sockaddr *)&ss), 29400);
  CHECK(strcmp(cddp__sockaddr_text((struct sockaddr *)&ss, buf, sizeof buf), "[fd00::2]:29400") == 0);
  CHECK(strcmp(cddp__sockaddr_ip((struct sockaddr *)&ss, buf, sizeof buf), "fd00::2") == 0);
  struct sockaddr_in a = loopback(7);
  CHECK(strcmp(cddp__sockaddr_text((struct sockaddr *)&a, buf, sizeof buf), "127.0.0.1:7") == 0);
  ss.ss_family = AF_UNIX;
  CHECK(strcmp(cddp__sockaddr_text((struct sockaddr *)&ss, buf, sizeof buf), "?:0") == 0);
  /* the route toward loopback starts at loopback */
  CHECK_OK(cddp__sock_route_src("127.0.0.1", 9, &ss));
  CHECK(strcmp(cddp__sockaddr_ip((struct sockaddr *)&ss, buf, sizeof buf), "127.0.0.1") == 0);
  cddp__sock_addr_toward("127.0.0.1", 0, buf, sizeof buf);
  CHECK(strcmp(buf, "127.0.0.1") == 0);
}
