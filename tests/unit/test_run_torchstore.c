/* test_run_torchstore.c - the agent's torch TCPStore (launcher/torchstore.c) over real sockets,
 * in torch 1.13's wire format: every request a rendezvous sends, a WAIT parked until another
 * connection sets its key, requests split across writes and several in one write, a request
 * it does not serve, and a field larger than torch sends. (test_torchrun.sh and test_warm.sh
 * have torch itself use it.) */
#include <netinet/in.h>
#include <poll.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/sock.h"
#include "launcher/torchstore.h"
#include "test.h"

typedef struct req {
  uint8_t b[4096];
  size_t n;
} req_t;

static void u8(req_t *r, uint8_t v) { r->b[r->n++] = v; }
static void u64(req_t *r, uint64_t v) { memcpy(r->b + r->n, &v, 8), r->n += 8; }
static void str(req_t *r, const char *s) {
  u64(r, strlen(s));
  memcpy(r->b + r->n, s, strlen(s)), r->n += strlen(s);
}

static int client(int port) {
  int fd = -1;
  CHECK(cddp__sock_connect("127.0.0.1", port, CDDP__SOCK_NUMERIC, UINT64_MAX, &fd) == CDDP_OK);
  cddp__sock_nonblock(fd, 0);
  cddp__sock_timeouts(fd, 5000);
  return fd;
}

static void send_req(int fd, const req_t *r) { CHECK(write(fd, r->b, r->n) == (ssize_t)r->n); }
static void recv_n(int fd, void *p, size_t n) { CHECK(cddp__sock_read_all(fd, p, n, UINT64_MAX) == CDDP_OK); }
static int64_t recv_i64(int fd) {
  int64_t v;
  recv_n(fd, &v, 8);
  return v;
}
static uint8_t recv_u8(int fd) {
  uint8_t v;
  recv_n(fd, &v, 1);
  return v;
}
static void recv_vec(int fd, char *out, size_t size) {
  uint64_t n;
  recv_n(fd, &n, 8);
  CHECK(n < size);
  recv_n(fd, out, n);
  out[n] = '\0';
}
/* whether fd has nothing to read for ms (the server holds its answer) */
static int quiet(int fd, int ms) {
  struct pollfd p = {.fd = fd, .events = POLLIN};
  return poll(&p, 1, ms) == 0;
}

enum { SET, COMPARE_SET, GET, ADD, CHECK_, WAIT, GETNUMKEYS, WATCH_KEY, DELETE_KEY };

/* COMPARE_SET key expected desired: the answer is want */
static void compare_set(int fd, const char *key, const char *expected, const char *desired, const char *want) {
  req_t r = {0};
  char v[256];
  u8(&r, COMPARE_SET), str(&r, key), str(&r, expected), str(&r, desired);
  send_req(fd, &r);
  recv_vec(fd, v, sizeof v);
  if (strcmp(v, want)) TEST_FAIL("compare_set(%s, '%s', '%s') gave '%s', not '%s'", key, expected, desired, v, want);
}

TEST(torchstore_requests) {
  cddp__torch_store_t *ts;
  int port = 0;
  CHECK(cddp__torch_store_start(AF_INET, &ts, &port) == CDDP_OK);
  CHECK(port > 0);
  int fd = client(port);
  req_t r = {0};
  char v[256];
  /* what a 1.13 client sends first: ADD init/ 1 */
  u8(&r, ADD), str(&r, "init/"), u64(&r, 1);
  send_req(fd, &r);
  CHECK_EQ(recv_i64(fd), 1);
  r.n = 0, u8(&r, ADD), str(&r, "init/"), u64(&r, (uint64_t)-3);
  send_req(fd, &r);
  CHECK_EQ(recv_i64(fd), -2);
  r.n = 0, u8(&r, GET), str(&r, "init/");
  send_req(fd, &r);
  recv_vec(fd, v, sizeof v);
  CHECK(!strcmp(v, "-2")); /* kept as text, as torch keeps it */
  r.n = 0, u8(&r, SET), str(&r, "/worker/attempt_0/k"), str(&r, "val\0ue");
  u8(&r, GET), str(&r, "/worker/attempt_0/k"); /* two requests in one write */
  send_req(fd, &r);
  recv_vec(fd, v, sizeof v);
  CHECK(!strcmp(v, "val"));
  r.n = 0, u8(&r, CHECK_), u64(&r, 2), str(&r, "/worker/attempt_0/k"), str(&r, "init/");
  send_req(fd, &r);
  CHECK_EQ(recv_u8(fd), 0);
  r.n = 0, u8(&r, CHECK_), u64(&r, 2), str(&r, "/worker/attempt_0/k"), str(&r, "nope");
  send_req(fd, &r);
  CHECK_EQ(recv_u8(fd), 1);
  r.n = 0, u8(&r, GETNUMKEYS);
  send_req(fd, &r);
  CHECK_EQ(recv_i64(fd), 2);
  /* compare_set: equal -> swapped; unequal -> the current value; missing + empty -> set;
   * missing + not empty -> the expected value back (torch's answer) */
  compare_set(fd, "init/", "-2", "7", "7");
  compare_set(fd, "init/", "-2", "9", "7");
  compare_set(fd, "cs", "", "first", "first");
  compare_set(fd, "missing", "x", "y", "x");
  r.n = 0, u8(&r, DELETE_KEY), str(&r, "cs");
  u8(&r, DELETE_KEY), str(&r, "cs");
  send_req(fd, &r);
  CHECK_EQ(recv_i64(fd), 1);
  CHECK_EQ(recv_i64(fd), 0);
  close(fd);
  cddp__torch_store_stop(ts);
}

TEST(torchstore_wait_parks_until_another_sets) {
  cddp__torch_store_t *ts;
  int port = 0;
  CHECK(cddp__torch_store_start(AF_INET, &ts, &port) == CDDP_OK);
  int a = client(port), b = client(port);
  req_t r = {0};
  u8(&r, WAIT), u64(&r, 2), str(&r, "rank0/addr"), str(&r, "rank1/addr");
  send_req(a, &r);
  CHECK(quiet(a, 100));
  r.n = 0, u8(&r, SET), str(&r, "rank0/addr"), str(&r, "x");
  send_req(b, &r);
  CHECK(quiet(a, 100)); /* one of two keys */
  /* the other key arrives in two pieces */
  r.n = 0, u8(&r, SET), str(&r, "rank1/addr"), str(&r, "y");
  CHECK(write(b, r.b, 5) == 5);
  CHECK(quiet(a, 50));
  CHECK(write(b, r.b + 5, r.n - 5) == (ssize_t)(r.n - 5));
  CHECK_EQ(recv_u8(a), 0); /* STOP_WAITING */
  /* a request sent while parked is answered after the wait */
  r.n = 0, u8(&r, WAIT), u64(&r, 1), str(&r, "late"), u8(&r, GETNUMKEYS);
  send_req(a, &r);
  CHECK(quiet(a, 100));
  r.n = 0, u8(&r, ADD), str(&r, "late"), u64(&r, 5);
  send_req(b, &r);
  CHECK_EQ(recv_i64(b), 5);
  CHECK_EQ(recv_u8(a), 0);
  CHECK_EQ(recv_i64(a), 3);
  close(a), close(b);
  cddp__torch_store_stop(ts);
}

TEST(torchstore_drops_what_it_does_not_serve) {
  cddp__torch_store_t *ts;
  int port = 0;
  CHECK(cddp__torch_store_start(AF_INET, &ts, &port) == CDDP_OK);
  int a = client(port), b = client(port), c = client(port);
  req_t r = {0};
  u8(&r, WATCH_KEY), str(&r, "k");
  send_req(a, &r);
  char x;
  CHECK_EQ(read(a, &x, 1), 0); /* closed */
  r.n = 0, u8(&r, SET), u64(&r, (uint64_t)1 << 40); /* a 1 TiB key */
  send_req(b, &r);
  CHECK_EQ(read(b, &x, 1), 0);
  /* the others go on */
  r.n = 0, u8(&r, ADD), str(&r, "k"), u64(&r, 2);
  send_req(c, &r);
  CHECK_EQ(recv_i64(c), 2);
  close(a), close(b), close(c);
  cddp__torch_store_stop(ts);
}
