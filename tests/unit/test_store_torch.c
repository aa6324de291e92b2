/* test_store_torch.c - the store server's torch TCPStore engine (store/torch_proto.c) over real
 * sockets, in torch 1.13's wire format and in 2.x's: every request a rendezvous sends, a WAIT
 * parked until another connection sets its key, requests split across writes and several in
 * one write, a request it does not serve, a field larger than torch sends; 2.x's validation,
 * ping, append and multi-key queries; cddp's own clients on the same listener, whose keys torch's
 * clients cannot see; a key space per round of the job; a torch client is not swept as a stranger. (test_torchrun.sh and test_warm.sh have torch itself use it.) */
#include <netinet/in.h>
#include <poll.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/sock.h"
#include "cddp/store.h"
#include "store/store_internal.h"
#include "store/torch_proto.h"
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

static void recv_n(int fd, void *p, size_t n);

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
/* torch 2.x's numbers */
enum { V2_VALIDATE, V2_SET, V2_COMPARE_SET, V2_GET, V2_ADD, V2_CHECK, V2_WAIT, V2_GETNUMKEYS, V2_DELETE_KEY,
       V2_APPEND, V2_MULTI_GET, V2_MULTI_SET, V2_CANCEL_WAIT, V2_PING, V2_QUEUE_PUSH };

static int start(cddp_store_server_t **srv) {
  CHECK(cddp__store_server_start_torch(srv, "127.0.0.1", 0, NULL, NULL) == CDDP_OK);
  return cddp_store_server_port(*srv);
}

/* a torch 2.x client: VALIDATE, then PING with a nonce that comes back */
static int client2(int port) {
  int fd = client(port);
  req_t r = {0};
  uint32_t magic = CDDP__TORCH_MAGIC, nonce = 0x12345678u, back = 0;
  u8(&r, V2_VALIDATE), memcpy(r.b + r.n, &magic, 4), r.n += 4;
  u8(&r, V2_PING), memcpy(r.b + r.n, &nonce, 4), r.n += 4;
  send_req(fd, &r);
  recv_n(fd, &back, 4);
  CHECK_EQ(back, nonce);
  return fd;
}

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
  cddp_store_server_t *ts;
  int port = start(&ts);
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
  cddp_store_server_stop(ts);
}

TEST(torchstore_wait_parks_until_another_sets) {
  cddp_store_server_t *ts;
  int port = start(&ts);
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
  cddp_store_server_stop(ts);
}

TEST(torchstore_drops_what_it_does_not_serve) {
  cddp_store_server_t *ts;
  int port = start(&ts);
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
  cddp_store_server_stop(ts);
}

TEST(torchstore_2x_requests) {
  cddp_store_server_t *ts;
  int port = start(&ts);
  int fd = client2(port), b = client2(port);
  req_t r = {0};
  char v[256];
  u8(&r, V2_SET), str(&r, "k"), str(&r, "ab");
  u8(&r, V2_APPEND), str(&r, "k"), str(&r, "cd");
  u8(&r, V2_APPEND), str(&r, "fresh"), str(&r, "x");
  u8(&r, V2_GET), str(&r, "k");
  send_req(fd, &r);
  recv_vec(fd, v, sizeof v);
  CHECK(!strcmp(v, "abcd"));
  r.n = 0, u8(&r, V2_MULTI_SET), u64(&r, 2), str(&r, "m1"), str(&r, "one"), str(&r, "m2"), str(&r, "two");
  u8(&r, V2_MULTI_GET), u64(&r, 3), str(&r, "m2"), str(&r, "fresh"), str(&r, "m1");
  send_req(fd, &r);
  recv_vec(fd, v, sizeof v);
  CHECK(!strcmp(v, "two"));
  recv_vec(fd, v, sizeof v);
  CHECK(!strcmp(v, "x"));
  recv_vec(fd, v, sizeof v);
  CHECK(!strcmp(v, "one"));
  r.n = 0, u8(&r, V2_ADD), str(&r, "n"), u64(&r, 4);
  u8(&r, V2_GETNUMKEYS);
  u8(&r, V2_CHECK), u64(&r, 2), str(&r, "n"), str(&r, "nope");
  u8(&r, V2_DELETE_KEY), str(&r, "fresh");
  send_req(fd, &r);
  CHECK_EQ(recv_i64(fd), 4);
  CHECK_EQ(recv_i64(fd), 5);
  CHECK_EQ(recv_u8(fd), 1); /* NOT_READY */
  CHECK_EQ(recv_i64(fd), 1);
  r.n = 0, u8(&r, V2_COMPARE_SET), str(&r, "n"), str(&r, "4"), str(&r, "5");
  send_req(fd, &r);
  recv_vec(fd, v, sizeof v);
  CHECK(!strcmp(v, "5"));
  /* WAIT parks until b sets the key; CANCEL_WAIT afterwards answers WAIT_CANCELED */
  r.n = 0, u8(&r, V2_WAIT), u64(&r, 1), str(&r, "later"), u8(&r, V2_CANCEL_WAIT);
  send_req(fd, &r);
  CHECK(quiet(fd, 100));
  r.n = 0, u8(&r, V2_MULTI_SET), u64(&r, 1), str(&r, "later"), str(&r, "now");
  send_req(b, &r);
  CHECK_EQ(recv_u8(fd), 0); /* STOP_WAITING */
  CHECK_EQ(recv_u8(fd), 1); /* WAIT_CANCELED */
  /* torch's client gives up on a WAIT (its own timeout): CANCEL_WAIT reaches the parked
   * connection, which answers WAIT_CANCELED and goes on */
  r.n = 0, u8(&r, V2_WAIT), u64(&r, 1), str(&r, "never");
  send_req(fd, &r);
  CHECK(quiet(fd, 100));
  r.n = 0, u8(&r, V2_CANCEL_WAIT), u8(&r, V2_GET), str(&r, "later");
  send_req(fd, &r);
  CHECK_EQ(recv_u8(fd), 1);
  recv_vec(fd, v, sizeof v);
  CHECK(!strcmp(v, "now"));
  /* the queue queries are not served: that client is closed, the others go on */
  r.n = 0, u8(&r, V2_QUEUE_PUSH), str(&r, "q"), str(&r, "x");
  send_req(b, &r);
  char x;
  CHECK_EQ(read(b, &x, 1), 0);
  r.n = 0, u8(&r, V2_GETNUMKEYS);
  send_req(fd, &r);
  CHECK_EQ(recv_i64(fd), 5);
  close(fd), close(b);
  cddp_store_server_stop(ts);
}

TEST(torchstore_2x_wrong_magic_is_closed) {
  cddp_store_server_t *ts;
  int port = start(&ts);
  int fd = client(port);
  req_t r = {0};
  uint32_t magic = CDDP__TORCH_MAGIC;
  u8(&r, V2_VALIDATE), memcpy(r.b + r.n, &magic, 4), r.n += 4;
  u8(&r, V2_VALIDATE), u64(&r, 0); /* a second VALIDATE, with magic 0 */
  send_req(fd, &r);
  char x;
  CHECK_EQ(read(fd, &x, 1), 0);
  close(fd);
  cddp_store_server_stop(ts);
}

/* cddp's clients and torch's meet on one listener, each in a key space of its own. */
TEST(torchstore_shares_the_listener_with_cddp_clients) {
  cddp_store_server_t *ts;
  int port = start(&ts);
  cddp_store_t *s = NULL;
  CHECK(cddp_store_tcp_connect(&s, "127.0.0.1", port, NULL, 5000) == CDDP_OK);
  CHECK(cddp_store_set(s, "job", "secret", 6) == CDDP_OK);
  int fd = client2(port), old = client(port);
  req_t r = {0};
  u8(&r, V2_CHECK), u64(&r, 1), str(&r, "job");
  send_req(fd, &r);
  CHECK_EQ(recv_u8(fd), 1); /* NOT_READY: torch's clients do not see the job's keys */
  r.n = 0, u8(&r, SET), str(&r, "job"), str(&r, "torch's"); /* 1.x: lands in torch's space */
  send_req(old, &r);
  r.n = 0, u8(&r, V2_WAIT), u64(&r, 1), str(&r, "job");
  send_req(fd, &r);
  CHECK_EQ(recv_u8(fd), 0);
  void *val = NULL;
  size_t len = 0;
  CHECK(cddp_store_get(s, "job", &val, &len, 5000) == CDDP_OK);
  CHECK(len == 6 && !memcmp(val, "secret", 6));
  free(val);
  cddp_store_close(s);
  close(fd), close(old);
  cddp_store_server_stop(ts);
}

/* The torch keys belong to the round the job's round key names when a client comes: a client that
 * comes after it changed finds none of the last round's keys, and the last round's clients
 * (parked or not) are closed. */
TEST(torchstore_a_round_of_keys_each) {
  cddp_store_server_t *ts;
  CHECK(cddp__store_server_start_torch(&ts, "127.0.0.1", 0, NULL, "job/torch/round") == CDDP_OK);
  int port = cddp_store_server_port(ts);
  cddp_store_t *s = NULL;
  CHECK(cddp_store_tcp_connect(&s, "127.0.0.1", port, NULL, 5000) == CDDP_OK);
  CHECK(cddp_store_set(s, "job/torch/round", "0", 1) == CDDP_OK);
  int a = client(port), parked = client2(port);
  req_t r = {0};
  u8(&r, ADD), str(&r, "init/"), u64(&r, 2);
  send_req(a, &r);
  CHECK_EQ(recv_i64(a), 2);
  r.n = 0, u8(&r, V2_WAIT), u64(&r, 1), str(&r, "never");
  send_req(parked, &r);
  CHECK(quiet(parked, 50));
  CHECK(cddp_store_set(s, "job/torch/round", "1", 1) == CDDP_OK);
  CHECK(quiet(parked, 50)); /* a new round begins with its first client, not with the key */
  int b = client(port);
  r.n = 0, u8(&r, ADD), str(&r, "init/"), u64(&r, 1);
  send_req(b, &r);
  CHECK_EQ(recv_i64(b), 1); /* round 0's count is gone */
  char x;
  CHECK_EQ(read(parked, &x, 1), 0); /* round 0's clients are closed */
  send_req(a, &r);
  CHECK_EQ(read(a, &x, 1), 0);
  int c = client2(port); /* another client of round 1 sees its keys */
  r.n = 0, u8(&r, V2_ADD), str(&r, "init/"), u64(&r, 1);
  send_req(c, &r);
  CHECK_EQ(recv_i64(c), 2);
  cddp_store_close(s);
  close(a), close(b), close(c), close(parked);
  cddp_store_server_stop(ts);
}

/* A torch client that sent a request is the job's: the sweep of silent strangers leaves it be. */
TEST(torchstore_client_outlives_the_handshake_time) {
  cddp_store_server_t *ts;
  int port = start(&ts);
  cddp__store_server_set_handshake_ms(ts, 100);
  int fd = client2(port), idle = client(port);
  usleep(1500 * 1000); /* the sweep runs every handshake_ms / 4 */
  char x;
  CHECK_EQ(read(idle, &x, 1), 0); /* connected and silent: swept */
  req_t r = {0};
  uint32_t nonce = 77, back = 0;
  u8(&r, V2_PING), memcpy(r.b + r.n, &nonce, 4), r.n += 4;
  send_req(fd, &r);
  recv_n(fd, &back, 4);
  CHECK_EQ(back, nonce);
  close(fd), close(idle);
  cddp_store_server_stop(ts);
}

/* torch 1.x opens a second connection beside its client's, for watchKey's callbacks, and never
 * writes on it; dropped, torch's listener thread spins on the closed socket for the rest of the
 * run. Such a silent connection from the host of a proven 1.x client outlives the hello timeout;
 * one with no such client (before it proved itself, or beside a 2.x client: above) is dropped. */
TEST(torchstore_1x_second_connection_is_kept) {
  cddp_store_server_t *ts;
  int port = start(&ts);
  cddp__store_server_set_handshake_ms(ts, 100);
  int early = client(port);
  usleep(600 * 1000);
  char x;
  CHECK_EQ(read(early, &x, 1), 0); /* silent, and no torch client proved itself yet: dropped */
  int fd = client(port), second = client(port);
  req_t r = {0};
  u8(&r, ADD), str(&r, "k"), u64(&r, 5);
  send_req(fd, &r);
  CHECK_EQ(recv_i64(fd), 5);
  usleep(600 * 1000);
  CHECK(quiet(second, 0)); /* no end of stream: kept */
  r.n = 0;
  u8(&r, ADD), str(&r, "k"), u64(&r, 1);
  send_req(fd, &r);
  CHECK_EQ(recv_i64(fd), 6);
  close(fd), close(second), close(early);
  cddp_store_server_stop(ts);
}

/* A server that does not serve torch closes a torch client at once. */
TEST(torchstore_not_served_by_a_plain_server) {
  cddp_store_server_t *ts;
  CHECK(cddp_store_server_start(&ts, "127.0.0.1", 0, NULL) == CDDP_OK);
  int fd = client(cddp_store_server_port(ts));
  req_t r = {0};
  u8(&r, ADD), str(&r, "init/"), u64(&r, 1);
  send_req(fd, &r);
  char x;
  CHECK_EQ(read(fd, &x, 1), 0);
  close(fd);
  cddp_store_server_stop(ts);
}

TEST(torchstore_sniff) {
  const uint8_t hello[] = {7, 0, 0, 0, 1, 'C', 'D', 'D', 'P'}, v2[] = {0, 0xCE, 0xF7, 0x85, 0x3C},
                v1_set[] = {0, 3, 0, 0, 0, 0, 0, 0, 0}, v1_add[] = {3, 5};
  CHECK_EQ(cddp__torch_sniff(hello, sizeof hello), CDDP__PROTO_CDDP);
  CHECK_EQ(cddp__torch_sniff(hello, 1), CDDP__PROTO_CDDP);
  CHECK_EQ(cddp__torch_sniff(v2, sizeof v2), CDDP__PROTO_TORCH2);
  CHECK_EQ(cddp__torch_sniff(v2, 4), -1); /* too few bytes to tell */
  CHECK_EQ(cddp__torch_sniff(v1_set, sizeof v1_set), CDDP__PROTO_TORCH1);
  CHECK_EQ(cddp__torch_sniff(v1_add, 1), CDDP__PROTO_TORCH1);
  CHECK_EQ(cddp__torch_sniff(v1_add, 0), -1);
}

/* A torch client that validated and pinged is the job's: idle past the hello timeout (torch
 * keeps its store connection for the whole run and may not call it for minutes), it is kept,
 * while a torch connection that never completed a request is dropped like any stranger. */
TEST(torchstore_idle_client_outlives_the_hello_timeout) {
  cddp_store_server_t *ts;
  int port = start(&ts);
  cddp__store_server_set_handshake_ms(ts, 100);
  int fd = client2(port), mute = client(port);
  req_t half = {0};
  u8(&half, V2_VALIDATE); /* the magic never follows */
  send_req(mute, &half);
  usleep(600 * 1000);
  char x;
  CHECK_EQ(read(mute, &x, 1), 0); /* dropped */
  req_t r = {0};
  uint32_t nonce = 0xabcdef01u, back = 0;
  u8(&r, V2_PING), memcpy(r.b + r.n, &nonce, 4), r.n += 4;
  send_req(fd, &r);
  recv_n(fd, &back, 4);
  CHECK_EQ(back, nonce);
  close(fd), close(mute);
  cddp_store_server_stop(ts);
}
