/* store_tcp.c - the TCP store client: blocking calls under a mutex, each bounded by a deadline. */
#include <errno.h>
#include <openssl/crypto.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/check.h"
#include "common/clock.h"
#include "common/knobs.h"
#include "common/log.h"
#include "common/sock.h"
#include "store/failover.h"
#include "store/wire.h"

typedef struct tcp_store {
  cddp_store_t base;
  pthread_mutex_t mu;
  int fd;
  int broken; /* a failed call left the stream in an unknown state */
  int has_will; /* a WILL is registered: close says BYE first */
  char ep[300]; /* "host:port" for messages */
  char host[256];
  int port;
  cddp__wire_buf_t out, in;
  /* failover (store/failover.h): the epoch of the peers list the server published (-1: none,
   * so a lost server is an error as before), when to read it again, and what a new server
   * needs: the token and the will */
  int64_t epoch;
  uint64_t peek_at;   /* UINT64_MAX: never (a connection to this one server: cddp__store_tcp_connect_here) */
  char *token;
  char *will_key, *will_val;
  size_t will_len;
  /* the registry of the process's clients (below): its copies of fd and epoch, and the link */
  int64_t era;         /* cddp__failover_era() when it was made: it fails over in that era only */
  int reg_fd;
  int64_t reg_epoch;
  struct tcp_store *reg_next;
} tcp_store_t;

/* Every client of the process, so that when one of them moves to a later epoch the others still
 * connected to an earlier host are cut (shutdown): none of them goes on with a host the job
 * left, even one that was idle while that host was frozen or cut off, and wakes up answering. */
static pthread_mutex_t reg_mu = PTHREAD_MUTEX_INITIALIZER;
static struct tcp_store *reg_head;

static void reg_update(tcp_store_t *t) {
  __atomic_store_n(&t->reg_fd, t->fd, __ATOMIC_RELEASE);
  __atomic_store_n(&t->reg_epoch, t->epoch, __ATOMIC_RELEASE);
}

static void reg_add(tcp_store_t *t) {
  reg_update(t);
  pthread_mutex_lock(&reg_mu);
  t->reg_next = reg_head, reg_head = t;
  pthread_mutex_unlock(&reg_mu);
}

static void reg_del(tcp_store_t *t) {
  pthread_mutex_lock(&reg_mu);
  for (tcp_store_t **p = &reg_head; *p; p = &(*p)->reg_next)
    if (*p == t) {
      *p = t->reg_next;
      break;
    }
  pthread_mutex_unlock(&reg_mu);
}

static void cut_stale(int64_t epoch, int64_t era) {
  pthread_mutex_lock(&reg_mu);
  for (tcp_store_t *t = reg_head; t; t = t->reg_next) {
    if (t->era > era) continue; /* made after a give-up (a node that came back): not the cutter's to cut */
    int64_t e = __atomic_load_n(&t->reg_epoch, __ATOMIC_ACQUIRE);
    int fd = __atomic_load_n(&t->reg_fd, __ATOMIC_ACQUIRE);
    if (e >= 0 && e < epoch && fd >= 0) shutdown(fd, SHUT_RDWR);
  }
  pthread_mutex_unlock(&reg_mu);
}

#define T(s) ((tcp_store_t *)(s))
#define SLACK_MS 1000 /* a parked GET/WAIT is answered by the server at its timeout; allow this */
#define PEEK_EVERY_MS 2000 /* how often a failover client reads the peers list again, at least: */
                           /* and 2/3 of the heartbeat timeout, which grows with the job's size */
#define PROBE_MS 500       /* connecting to one peer while failing over */
#define PROBE_WAIT_MS 200  /* a peer that is not serving yet: how long to wait for its list */

static cddp_result_t failover(tcp_store_t *t);

/* When the peers list is due again: the store's steady load per client is one peek per this */
static uint64_t next_peek(void) {
  int64_t every = CDDP_MAX((int64_t)PEEK_EVERY_MS, 2 * cddp__knob_int(CDDP_KNOB_HEARTBEAT_TIMEOUT_MS) / 3);
  return cddp__now_ns() + (uint64_t)every * 1000000ull;
}

static cddp_result_t lost(tcp_store_t *t, const char *what, const char *why) {
  t->broken = 1;
  return cddp__fail(CDDP_REMOTE, "store %s: %s: %s", t->ep, what, why);
}

static cddp_result_t send_out(tcp_store_t *t, uint64_t deadline, const char *what) {
  if (t->out.oom) return cddp__fail(CDDP_SYSTEM, "store %s: %s: out of memory", t->ep, what);
  cddp_result_t r = cddp__sock_write_all(t->fd, t->out.p, t->out.len, deadline);
  if (r == CDDP_TIMEOUT) {
    t->broken = 1;
    return cddp__fail(CDDP_TIMEOUT, "store %s: %s: send timed out", t->ep, what);
  }
  return r == CDDP_OK ? CDDP_OK : lost(t, what, strerror(errno));
}

/* Reads exactly n more bytes into t->in. */
static cddp_result_t recv_n(tcp_store_t *t, size_t n, uint64_t deadline, const char *what) {
  if (cddp__wire_reserve(&t->in, n) != 0)
    return cddp__fail(CDDP_SYSTEM, "store %s: %s: out of memory", t->ep, what);
  cddp_result_t r = cddp__sock_read_all(t->fd, t->in.p + t->in.len, n, deadline);
  if (r == CDDP_OK) {
    t->in.len += n;
    return CDDP_OK;
  }
  if (r == CDDP_TIMEOUT) {
    t->broken = 1;
    return cddp__fail(CDDP_TIMEOUT, "store %s: %s: no answer in time", t->ep, what);
  }
  return lost(t, what, errno ? strerror(errno) : "the server closed the connection");
}

/* Receives one response frame and decodes it into *m (pointing into t->in). */
static cddp_result_t recv_msg(tcp_store_t *t, uint32_t max_len, uint64_t deadline,
                              const char *what, cddp__wire_msg_t *m) {
  cddp__wire_frame_t f;
  size_t used;
  const char *err = "bad frame";
  t->in.len = 0;
  CDDP_CHECK(recv_n(t, CDDP__WIRE_HDR, deadline, what));
  int r = cddp__wire_parse(t->in.p, t->in.len, max_len, &f, &used, &err);
  if (r == CDDP__WIRE_NEED_MORE) {
    CDDP_CHECK(recv_n(t, used - t->in.len, deadline, what));
    r = cddp__wire_parse(t->in.p, t->in.len, max_len, &f, &used, &err);
  }
  if (r != CDDP__WIRE_FRAME || cddp__wire_decode_response(&f, m, &err) != 0) {
    t->broken = 1;
    return cddp__fail(CDDP_REMOTE, "store %s: %s: bad answer (%s); is it a cddp store?", t->ep,
                      what, err);
  }
  return CDDP_OK;
}

static uint64_t call_deadline(tcp_store_t *t, int req_timeout_ms) {
  int64_t b = t->base.timeout_ms;
  if (req_timeout_ms > 0) b = CDDP_MAX(b, (int64_t)req_timeout_ms + SLACK_MS);
  /* a store that may move answers within two heartbeat timeouts or is taken for lost (a host
   * frozen or cut off keeps its connections open): the call goes to its successor */
  if (t->epoch >= 0)
    b = CDDP_MIN(b, (int64_t)CDDP_MAX(req_timeout_ms, 0) + 2 * cddp__knob_int(CDDP_KNOB_HEARTBEAT_TIMEOUT_MS) + SLACK_MS);
  return cddp__deadline_ms(b);
}

/* Sends t->out and receives the answer; maps ERROR answers to their code. Call locked. */
static cddp_result_t roundtrip_once(tcp_store_t *t, int req_timeout_ms, const char *what,
                                    cddp__wire_msg_t *m) {
  uint64_t deadline = call_deadline(t, req_timeout_ms);
  CDDP_CHECK(send_out(t, deadline, what));
  CDDP_CHECK(recv_msg(t, CDDP__WIRE_MAX_LEN, deadline, what, m));
  if (m->op == CDDP__OP_ERROR) {
    cddp_result_t code = m->flag > 0 && m->flag < CDDP_RESULT_COUNT ? (cddp_result_t)m->flag
                                                                    : CDDP_INTERNAL;
    return cddp__fail(code, "store %s: %.*s", t->ep, (int)m->val.n, m->val.p);
  }
  return CDDP_OK;
}

/* A client that connected before its server published a peers list (and has not read it
 * since: a long wait) takes the process's list when its server is on it. */
static void epoch_from_view(tcp_store_t *t) {
  if (t->epoch < 0) t->epoch = cddp__failover_epoch_of(t->host, t->port), reg_update(t);
}

/* roundtrip_once, and when the connection broke under a store that may move: the same
 * request again at the store's new host. */
static cddp_result_t roundtrip(tcp_store_t *t, int req_timeout_ms, const char *what,
                               cddp__wire_msg_t *m) {
  for (int moves = 0;; moves++) {
    cddp_result_t r = roundtrip_once(t, req_timeout_ms, what, m);
    if (r != CDDP_OK && t->broken) epoch_from_view(t);
    if (r == CDDP_OK || !t->broken || t->epoch < 0 || moves == 4) return r;
    CDDP_CHECK(failover(t));
  }
}

static cddp_result_t expect(tcp_store_t *t, const cddp__wire_msg_t *m, uint8_t op, const char *what) {
  if (m->op == op) return CDDP_OK;
  t->broken = 1;
  return cddp__fail(CDDP_REMOTE, "store %s: %s: unexpected answer opcode 0x%02x", t->ep, what, m->op);
}

static cddp_result_t peek_peers(tcp_store_t *t, int wait_ms, uint64_t deadline, cddp__peers_t *p);

/* Reads the peers list again when it is due (members come and go, and a list may appear). A
 * peek that fails leaves t->broken set when its answer may still be on the way, and why in why. */
static void refresh_peers(tcp_store_t *t, char *why, size_t whysize) {
  cddp__peers_t *p = malloc(sizeof *p);
  cddp_result_t r = p ? peek_peers(t, 0, call_deadline(t, 0), p) : CDDP_SYSTEM;
  if (r != CDDP_OK) snprintf(why, whysize, "%s", cddp_last_error());
  if (r == CDDP_OK) {
    int host = p->n > 0 && p->p[0].port == t->port && !strcmp(p->p[0].host, t->host); /* not a standby's copy */
    if (host && p->epoch > t->epoch) t->epoch = p->epoch, reg_update(t);
    cddp__failover_note(p);
  }
  free(p);
  cddp__clear_error();
  t->peek_at = next_peek();
}

/* Locks and starts a request frame; REMOTE (unlocked) when the connection is unusable. */
static cddp_result_t begin(tcp_store_t *t, uint8_t op, size_t *start) {
  char why[400] = "an earlier failure";
  pthread_mutex_lock(&t->mu);
  /* twice: a peek that timed out broke the stream as any call does, and its late answer must
   * never be read as the answer to this request (it was: "unexpected answer opcode 0x93") */
  for (int pass = 0;; pass++) {
    if (t->epoch >= 0 && cddp__failover_epoch() > t->epoch) t->broken = 1; /* the job's store moved on */
    if (t->broken) epoch_from_view(t);
    if (t->broken && t->epoch >= 0) {
      t->out.len = 0;
      (void)failover(t);
    }
    if (t->broken) {
      pthread_mutex_unlock(&t->mu);
      return cddp__fail(CDDP_REMOTE, "store %s: connection unusable after %s", t->ep, why);
    }
    if (pass > 0 || cddp__now_ns() < t->peek_at) break;
    refresh_peers(t, why, sizeof why);
  }
  t->out.len = 0;
  t->out.oom = 0;
  *start = cddp__wire_begin(&t->out, op);
  return CDDP_OK;
}

static cddp_result_t c_set(cddp_store_t *s, const char *key, const void *val, size_t len) {
  size_t st = 0;
  cddp__wire_msg_t m;
  CDDP_CHECK(begin(T(s), CDDP__OP_SET, &st));
  cddp__wire_str(&T(s)->out, key, strlen(key));
  cddp__wire_str(&T(s)->out, val, len);
  cddp__wire_end(&T(s)->out, st);
  cddp_result_t r = roundtrip(T(s), 0, "set", &m);
  if (r == CDDP_OK) r = expect(T(s), &m, CDDP__OP_OK, "set");
  pthread_mutex_unlock(&T(s)->mu);
  return r;
}

static cddp_result_t c_get(cddp_store_t *s, const char *key, void **val, size_t *len, int t) {
  size_t st = 0;
  cddp__wire_msg_t m;
  CDDP_CHECK(begin(T(s), CDDP__OP_GET, &st));
  cddp__wire_u32(&T(s)->out, (uint32_t)t);
  cddp__wire_str(&T(s)->out, key, strlen(key));
  cddp__wire_end(&T(s)->out, st);
  cddp_result_t r = roundtrip(T(s), t, "get", &m);
  if (r == CDDP_OK && m.op == CDDP__OP_TIMEOUT) {
    r = cddp__fail(CDDP_TIMEOUT, "store get: key %s absent after %d ms (store %s)", key, t, T(s)->ep);
  } else if (r == CDDP_OK && (r = expect(T(s), &m, CDDP__OP_VALUE, "get")) == CDDP_OK) {
    if (!(*val = cddp__memdup_nul(m.val.p, m.val.n)))
      r = cddp__fail(CDDP_SYSTEM, "store get %s: out of memory", key);
    else
      *len = m.val.n;
  }
  pthread_mutex_unlock(&T(s)->mu);
  return r;
}

static cddp_result_t c_add(cddp_store_t *s, const char *key, int64_t d, int64_t *res) {
  size_t st = 0;
  cddp__wire_msg_t m;
  CDDP_CHECK(begin(T(s), CDDP__OP_ADD, &st));
  cddp__wire_u64(&T(s)->out, (uint64_t)d);
  cddp__wire_str(&T(s)->out, key, strlen(key));
  cddp__wire_end(&T(s)->out, st);
  cddp_result_t r = roundtrip(T(s), 0, "add", &m);
  if (r == CDDP_OK && (r = expect(T(s), &m, CDDP__OP_INT, "add")) == CDDP_OK) *res = m.num;
  pthread_mutex_unlock(&T(s)->mu);
  return r;
}

static cddp_result_t c_cas(cddp_store_t *s, const char *key, const void *e, size_t el,
                           const void *d, size_t dl, void **cur, size_t *cl) {
  size_t st = 0;
  cddp__wire_msg_t m;
  CDDP_CHECK(begin(T(s), CDDP__OP_CAS, &st));
  cddp__wire_str(&T(s)->out, key, strlen(key));
  cddp__wire_u8(&T(s)->out, e != NULL);
  cddp__wire_str(&T(s)->out, e, e ? el : 0);
  cddp__wire_str(&T(s)->out, d, dl);
  cddp__wire_end(&T(s)->out, st);
  cddp_result_t r = roundtrip(T(s), 0, "compare_set", &m);
  if (r == CDDP_OK && (r = expect(T(s), &m, CDDP__OP_VALUE, "compare_set")) == CDDP_OK &&
      m.flag) {
    if (!(*cur = cddp__memdup_nul(m.val.p, m.val.n)))
      r = cddp__fail(CDDP_SYSTEM, "store compare_set %s: out of memory", key);
    else
      *cl = m.val.n;
  }
  pthread_mutex_unlock(&T(s)->mu);
  return r;
}

static void encode_wait(tcp_store_t *t, size_t st, const char *const *keys, size_t n, int tmo) {
  cddp__wire_u32(&t->out, (uint32_t)tmo);
  cddp__wire_u32(&t->out, (uint32_t)n);
  for (size_t i = 0; i < n; i++) cddp__wire_str(&t->out, keys[i], strlen(keys[i]));
  cddp__wire_end(&t->out, st);
}

static cddp_result_t wait_answer(tcp_store_t *t, const cddp__wire_msg_t *m,
                                 const char *const *keys, size_t n, int tmo) {
  if (m->op == CDDP__OP_TIMEOUT)
    return cddp__fail(CDDP_TIMEOUT, "store wait: key %s absent after %d ms (store %s)",
                      m->index < n ? keys[m->index] : "?", tmo, t->ep);
  return expect(t, m, CDDP__OP_OK, "wait");
}

static cddp_result_t c_wait(cddp_store_t *s, const char *const *keys, size_t n, int t) {
  size_t st = 0;
  cddp__wire_msg_t m;
  CDDP_CHECK(begin(T(s), CDDP__OP_WAIT, &st));
  encode_wait(T(s), st, keys, n, t);
  cddp_result_t r = roundtrip(T(s), t, "wait", &m);
  if (r == CDDP_OK) r = wait_answer(T(s), &m, keys, n, t);
  pthread_mutex_unlock(&T(s)->mu);
  return r;
}

static cddp_result_t c_del(cddp_store_t *s, const char *key, int *existed) {
  size_t st = 0;
  cddp__wire_msg_t m;
  CDDP_CHECK(begin(T(s), CDDP__OP_DEL, &st));
  cddp__wire_str(&T(s)->out, key, strlen(key));
  cddp__wire_end(&T(s)->out, st);
  cddp_result_t r = roundtrip(T(s), 0, "delete", &m);
  if (r == CDDP_OK && (r = expect(T(s), &m, CDDP__OP_INT, "delete")) == CDDP_OK)
    *existed = m.num != 0;
  pthread_mutex_unlock(&T(s)->mu);
  return r;
}

static cddp_result_t c_num_keys(cddp_store_t *s, int64_t *n) {
  size_t st = 0;
  cddp__wire_msg_t m;
  CDDP_CHECK(begin(T(s), CDDP__OP_NUMKEYS, &st));
  cddp__wire_end(&T(s)->out, st);
  cddp_result_t r = roundtrip(T(s), 0, "num_keys", &m);
  if (r == CDDP_OK && (r = expect(T(s), &m, CDDP__OP_INT, "num_keys")) == CDDP_OK) *n = m.num;
  pthread_mutex_unlock(&T(s)->mu);
  return r;
}

#define BYE_MS 1000 /* how long close waits for the server to take the goodbye */

static void c_close(cddp_store_t *s) {
  reg_del(T(s));
  if (T(s)->has_will && !T(s)->broken) { /* a proper goodbye: the server drops the will */
    size_t st = 0;
    cddp__wire_msg_t m;
    if (begin(T(s), CDDP__OP_BYE, &st) == CDDP_OK) {
      cddp__wire_end(&T(s)->out, st);
      T(s)->base.timeout_ms = CDDP_MIN(T(s)->base.timeout_ms, BYE_MS);
      (void)roundtrip_once(T(s), 0, "goodbye", &m);
      pthread_mutex_unlock(&T(s)->mu);
    }
  }
  if (T(s)->fd >= 0) close(T(s)->fd);
  cddp__wire_buf_free(&T(s)->out);
  cddp__wire_buf_free(&T(s)->in);
  free(T(s)->token);
  free(T(s)->will_key);
  free(T(s)->will_val);
  pthread_mutex_destroy(&T(s)->mu);
  free(s);
}

static const cddp_store_ops_t tcp_ops = {
    .name = "tcp", .set = c_set, .get = c_get, .add = c_add, .compare_set = c_cas,
    .wait = c_wait, .del = c_del, .num_keys = c_num_keys, .close = c_close,
};

cddp_result_t cddp__store_tcp_will(cddp_store_t *s, const char *key, const void *val, size_t len) {
  if (!s || s->ops != &tcp_ops) return cddp__fail(CDDP_INVALID_ARG, "store will: needs a TCP store client");
  size_t kn = key ? strnlen(key, CDDP_STORE_MAX_KEY + 1) : 0;
  if (kn == 0 || kn > CDDP_STORE_MAX_KEY || len > CDDP_STORE_MAX_VALUE || (len && !val))
    return cddp__fail(CDDP_INVALID_ARG, "store will: bad key or value");
  size_t st = 0;
  cddp__wire_msg_t m;
  char *k = strndup(key, kn), *v = malloc(len + 1);
  if (!k || !v) {
    free(k), free(v);
    return cddp__fail(CDDP_SYSTEM, "store will: out of memory");
  }
  if (len) memcpy(v, val, len);
  cddp_result_t r = begin(T(s), CDDP__OP_WILL, &st);
  if (r != CDDP_OK) {
    free(k), free(v);
    return r;
  }
  cddp__wire_str(&T(s)->out, key, kn);
  cddp__wire_str(&T(s)->out, val, len);
  cddp__wire_end(&T(s)->out, st);
  /* kept first: a move inside the call registers it at the new host */
  free(T(s)->will_key), free(T(s)->will_val);
  T(s)->will_key = k, T(s)->will_val = v, T(s)->will_len = len;
  r = roundtrip(T(s), 0, "will", &m);
  if (r == CDDP_OK) r = expect(T(s), &m, CDDP__OP_OK, "will");
  if (r == CDDP_OK) T(s)->has_will = 1;
  pthread_mutex_unlock(&T(s)->mu);
  return r;
}

void cddp__store_tcp_abandon(cddp_store_t *s) {
  if (s && s->ops == &tcp_ops) T(s)->has_will = 0; /* no goodbye: as if the process died */
  cddp_store_close(s);
}

/* ---- test and benchmark hooks: a WAIT split in two so one thread can park many ---- */

cddp_result_t cddp__store_tcp_wait_begin(cddp_store_t *s, const char *const *keys, size_t n,
                                         int timeout_ms) {
  size_t st = 0;
  CDDP_CHECK(begin(T(s), CDDP__OP_WAIT, &st));
  encode_wait(T(s), st, keys, n, timeout_ms);
  cddp_result_t r = send_out(T(s), call_deadline(T(s), timeout_ms), "wait");
  pthread_mutex_unlock(&T(s)->mu);
  return r;
}

cddp_result_t cddp__store_tcp_wait_end(cddp_store_t *s, const char *const *keys, size_t n,
                                       int timeout_ms) {
  cddp__wire_msg_t m;
  pthread_mutex_lock(&T(s)->mu);
  cddp_result_t r =
      recv_msg(T(s), CDDP__WIRE_MAX_LEN, call_deadline(T(s), timeout_ms), "wait", &m);
  if (r == CDDP_OK) r = wait_answer(T(s), &m, keys, n, timeout_ms);
  pthread_mutex_unlock(&T(s)->mu);
  return r;
}

/* ---- connecting ---- */

/* One attempt over every address of host. 0 with *fd connected, or -1 with why (-2: host is a
 * name the resolver says does not exist, which retrying will not change). */
static int try_connect(const char *host, int port, uint64_t deadline, int *fd, char *why,
                       size_t whysize) {
  cddp_result_t r = cddp__sock_connect(host, port, CDDP__SOCK_NONBLOCK, deadline, fd);
  if (r == CDDP_OK) {
    cddp__sock_nodelay(*fd);
    return 0;
  }
  /* a refused or timed-out connect says why in errno; a lookup or socket() in its line */
  if (r == CDDP_TIMEOUT || r == CDDP_REMOTE) snprintf(why, whysize, "%s", strerror(errno));
  else snprintf(why, whysize, "%s", cddp_last_error());
  return r == CDDP_NOT_FOUND ? -2 : -1;
}

/* A store answers HELLO from its event loop at once; a port that accepts and stays silent
 * this long is held by another program, said then instead of after the whole connect bound. */
#define HELLO_ANSWER_MS 5000

static cddp_result_t handshake(tcp_store_t *t, const char *token, uint64_t deadline) {
  cddp__wire_msg_t m;
  uint64_t hello_deadline = CDDP_MIN(deadline, cddp__deadline_ms(HELLO_ANSWER_MS));
  size_t st = cddp__wire_begin(&t->out, CDDP__OP_HELLO);
  cddp__wire_u32(&t->out, CDDP__WIRE_MAGIC);
  cddp__wire_u16(&t->out, CDDP__WIRE_VERSION);
  cddp__wire_end(&t->out, st);
  CDDP_CHECK(send_out(t, deadline, "handshake"));
  cddp_result_t r = recv_msg(t, CDDP__WIRE_MAX_LEN_HANDSHAKE, hello_deadline, "handshake", &m);
  if (r == CDDP_TIMEOUT && hello_deadline < deadline)
    return cddp__fail(CDDP_REMOTE, "store %s: port %d accepts connections but did not answer the handshake "
                      "within %d s: another program holds it (not a cddp or torch store), or the store is frozen", t->ep, t->port,
                      HELLO_ANSWER_MS / 1000);
  if (r == CDDP_REMOTE) {
    char detail[256];
    snprintf(detail, sizeof detail, "%s", cddp_last_error());
    return cddp__fail(CDDP_REMOTE, "store %s is not a cddp store (no valid handshake: %s)",
                      t->ep, detail);
  }
  CDDP_CHECK(r);
  if (m.op != CDDP__OP_CHALLENGE || m.magic != CDDP__WIRE_MAGIC)
    return cddp__fail(CDDP_REMOTE, "store %s is not a cddp store (bad handshake)", t->ep);
  if (m.version != CDDP__WIRE_VERSION)
    return cddp__fail(CDDP_REMOTE, "store %s speaks protocol v%u, this client v%d (mixed cddp versions?)",
                      t->ep, m.version, CDDP__WIRE_VERSION);
  if (!m.flag) { /* no token: a first request at once tells the server we are no idle stranger */
    t->out.len = 0;
    st = cddp__wire_begin(&t->out, CDDP__OP_NUMKEYS);
    cddp__wire_end(&t->out, st);
    CDDP_CHECK(send_out(t, deadline, "handshake"));
    CDDP_CHECK(recv_msg(t, CDDP__WIRE_MAX_LEN, deadline, "handshake", &m));
    return m.op == CDDP__OP_INT ? CDDP_OK
                                : cddp__fail(CDDP_REMOTE, "store %s: bad reply to its first request", t->ep);
  }
  uint8_t sn[CDDP__WIRE_NONCE], cn[CDDP__WIRE_NONCE], mac[CDDP__WIRE_MAC], want[CDDP__WIRE_MAC];
  memcpy(sn, m.nonce, sizeof sn);
  if (cddp__wire_nonce(cn) != 0) return cddp__fail_errno(CDDP_SYSTEM, "store %s: getrandom", t->ep);
  if (cddp__wire_mac(token, sn, cn, mac) != 0 || cddp__wire_mac(token, cn, sn, want) != 0)
    return cddp__fail(CDDP_INTERNAL, "store %s: HMAC-SHA256 failed in libcrypto", t->ep);
  t->out.len = 0;
  st = cddp__wire_begin(&t->out, CDDP__OP_AUTH);
  cddp__wire_raw(&t->out, cn, sizeof cn);
  cddp__wire_raw(&t->out, mac, sizeof mac);
  cddp__wire_end(&t->out, st);
  CDDP_CHECK(send_out(t, deadline, "authentication"));
  r = recv_msg(t, CDDP__WIRE_MAX_LEN_HANDSHAKE, deadline, "authentication", &m);
  if ((r == CDDP_REMOTE && t->broken) || (r == CDDP_OK && m.op == CDDP__OP_AUTH_FAIL))
    return cddp__fail(CDDP_AUTH, "token refused by store %s (%s)", t->ep,
                      token && *token ? "wrong CDDP_TOKEN / CDDP_TOKEN_FILE"
                                      : "it requires one: set CDDP_TOKEN or CDDP_TOKEN_FILE");
  CDDP_CHECK(r);
  if (m.op != CDDP__OP_AUTH_OK || CRYPTO_memcmp(m.mac, want, sizeof want) != 0)
    return cddp__fail(CDDP_AUTH, "store %s could not prove it holds the job token", t->ep);
  return CDDP_OK;
}

/* ---- failover: the store's host is lost; another listed server takes over ---- */

/* GET of the peers list (waiting up to wait_ms for it): OK with *p, NOT_FOUND when the server
 * publishes none, or the call's error. Uses t->out. */
static cddp_result_t peek_peers(tcp_store_t *t, int wait_ms, uint64_t deadline, cddp__peers_t *p) {
  cddp__wire_msg_t m;
  t->out.len = 0, t->out.oom = 0;
  size_t st = cddp__wire_begin(&t->out, CDDP__OP_GET);
  cddp__wire_u32(&t->out, (uint32_t)wait_ms);
  cddp__wire_str(&t->out, CDDP__PEERS_KEY, strlen(CDDP__PEERS_KEY));
  cddp__wire_end(&t->out, st);
  CDDP_CHECK(send_out(t, deadline, "peers"));
  CDDP_CHECK(recv_msg(t, CDDP__WIRE_MAX_LEN, deadline, "peers", &m));
  if (m.op != CDDP__OP_VALUE) return cddp__fail(CDDP_NOT_FOUND, "store %s publishes no peers list", t->ep);
  if (cddp__peers_parse(m.val.p, m.val.n, p) != 0)
    return cddp__fail(CDDP_INVALID_ARG, "store %s: malformed %s", t->ep, CDDP__PEERS_KEY);
  return CDDP_OK;
}

/* The will again, at a new host (t->out is free). */
static cddp_result_t will_again(tcp_store_t *t, uint64_t deadline) {
  cddp__wire_msg_t m;
  t->out.len = 0, t->out.oom = 0;
  size_t st = cddp__wire_begin(&t->out, CDDP__OP_WILL);
  cddp__wire_str(&t->out, t->will_key, strlen(t->will_key));
  cddp__wire_str(&t->out, t->will_val, t->will_len);
  cddp__wire_end(&t->out, st);
  CDDP_CHECK(send_out(t, deadline, "will"));
  CDDP_CHECK(recv_msg(t, CDDP__WIRE_MAX_LEN, deadline, "will", &m));
  return m.op == CDDP__OP_OK ? CDDP_OK : cddp__fail(CDDP_REMOTE, "store %s refused the will", t->ep);
}

/* Takes the server peer when it is the store of an epoch >= min_epoch (its list's epoch, and
 * its list names it first: a standby keeps a copy that names the host first): OK with t
 * connected there (the will registered again), or an error with t->fd closed. */
static cddp_result_t probe(tcp_store_t *t, const cddp__peer_t *peer, uint64_t deadline, int64_t min_epoch) {
  uint64_t d = CDDP_MIN(deadline, cddp__deadline_ms(PROBE_MS + PROBE_WAIT_MS));
  int fd = -1;
  if (cddp__sock_connect(peer->host, peer->port, CDDP__SOCK_NONBLOCK, d, &fd) != CDDP_OK) return CDDP_REMOTE;
  cddp__sock_nodelay(fd);
  t->fd = fd, t->broken = 0;
  t->out.len = 0, t->out.oom = 0; /* the handshake starts a fresh stream */
  snprintf(t->ep, sizeof t->ep, "%s:%d", peer->host, peer->port);
  cddp__peers_t *p = malloc(sizeof *p);
  cddp_result_t r = p ? handshake(t, t->token, d) : CDDP_SYSTEM;
  if (r == CDDP_OK) r = peek_peers(t, PROBE_WAIT_MS, d, p);
  if (r == CDDP_OK && p->epoch < min_epoch)
    r = cddp__fail(CDDP_REMOTE, "store %s is at epoch %lld, not %lld", t->ep, (long long)p->epoch, (long long)min_epoch);
  if (r == CDDP_OK && (p->n == 0 || p->p[0].port != peer->port || strcmp(p->p[0].host, peer->host)))
    r = cddp__fail(CDDP_REMOTE, "store %s is a standby (the store is at %s:%d)", t->ep, p->n ? p->p[0].host : "?",
                   p->n ? p->p[0].port : 0);
  if (r == CDDP_OK && t->has_will) r = will_again(t, d);
  if (r == CDDP_OK) {
    t->epoch = p->epoch;
    snprintf(t->host, sizeof t->host, "%s", peer->host);
    t->port = peer->port;
    t->peek_at = next_peek();
    cddp__failover_note(p);
  } else {
    CDDP_TRACE(CDDP_SUB_STORE, "store: failover: not %s: %s", t->ep, cddp_last_error());
    close(fd);
    t->fd = -1;
  }
  free(p);
  return r;
}

/* The connection broke and the store may move: polls the listed peers until one publishes an
 * epoch past the lost one, bounded by CDDP_STORE_FAILOVER_MS. The request in t->out is kept.
 * Call locked. */
static cddp_result_t failover(tcp_store_t *t) {
  char lost[300];
  snprintf(lost, sizeof lost, "%s", t->ep);
  int lost_port = t->port;
  char lost_host[256];
  snprintf(lost_host, sizeof lost_host, "%s", t->host);
  cddp__failover_lost(lost_host, lost_port, t->epoch);
  cddp__wire_buf_t req = t->out;
  memset(&t->out, 0, sizeof t->out);
  reg_update(t); /* ... with fd -1 first: nobody shuts down an fd number being reused */
  __atomic_store_n(&t->reg_fd, -1, __ATOMIC_RELEASE);
  if (t->fd >= 0) close(t->fd);
  t->fd = -1;
  /* this process took the epoch for lost: none of its clients acts on that store again, even
   * when it answers once more after a link flap (they fail over with this one) */
  cut_stale(t->epoch + 1, t->era);
  int ms = (int)cddp__knob_int(CDDP_KNOB_STORE_FAILOVER_MS);
  uint64_t t0 = cddp__now_ns(), deadline = cddp__deadline_ms(ms);
  cddp__peers_t *p = malloc(sizeof *p);
  cddp_result_t r = CDDP_TIMEOUT;
  while (p && r != CDDP_OK && t->era == cddp__failover_era() && cddp__failover_view(p) == 0) {
    for (int i = 0; i < p->n && r != CDDP_OK; i++)
      if (!(p->p[i].port == lost_port && !strcmp(p->p[i].host, lost_host))) r = probe(t, &p->p[i], deadline, t->epoch + 1);
    if (r == CDDP_OK || cddp__ms_left(deadline) == 0) break;
    usleep(100000);
  }
  free(p);
  cddp__wire_buf_free(&t->out);
  t->out = req;
  if (r != CDDP_OK) {
    t->broken = 1;
    snprintf(t->ep, sizeof t->ep, "%s", lost);
    if (t->era != cddp__failover_era())
      return cddp__fail(CDDP_REMOTE, "store %s lost, and this node gave up on it (nobody takes it over with this node)",
                        lost);
    return cddp__fail(CDDP_REMOTE, "store %s lost, and no listed peer took the store over within %.1f s "
                      "(CDDP_STORE_FAILOVER_MS)", lost, ms / 1e3);
  }
  reg_update(t);
  cut_stale(t->epoch, t->era);
  CDDP_INFO(CDDP_SUB_STORE, "store: %s lost; the store is now at %s (epoch %lld; %.2f s to find it%s)", lost, t->ep,
            (long long)t->epoch, (cddp__now_ns() - t0) / 1e9, t->has_will ? "; the will moved with it" : "");
  return CDDP_OK;
}

static cddp_result_t connect_as(cddp_store_t **out, const char *host, int port, const char *token, int timeout_ms,
                                int here);

cddp_result_t cddp_store_tcp_connect(cddp_store_t **out, const char *host, int port,
                                     const char *token, int timeout_ms) {
  return connect_as(out, host, port, token, timeout_ms, 0);
}

cddp_result_t cddp__store_tcp_connect_here(cddp_store_t **out, const char *host, int port, const char *token,
                                           int timeout_ms) {
  return connect_as(out, host, port, token, timeout_ms, 1);
}

/* Just connected to host:port, whose peers list is p: takes the store it names. A member's
 * standby (any live member may be named as the endpoint) names the store's host first: the
 * client goes there. A server the list does not name (the host before it listed itself;
 * another name for it) stays the store when the one named does not answer. */
static cddp_result_t settle(tcp_store_t *t, const cddp__peers_t *p, const char *host, int port, uint64_t deadline) {
  cddp__failover_note(p);
  if (p->n == 0 || (p->p[0].port == port && !strcmp(p->p[0].host, host))) {
    t->epoch = p->epoch;
    return CDDP_OK;
  }
  cddp__peer_t to = p->p[0];
  int listed = cddp__peers_find(p, host, port) >= 0, keep = t->fd;
  t->fd = -1;
  cddp_result_t r = probe(t, &to, cddp__deadline_ms(CDDP_MAX(cddp__ms_left(deadline), PROBE_MS + PROBE_WAIT_MS)),
                          p->epoch);
  if (r == CDDP_OK) {
    close(keep);
    CDDP_INFO(CDDP_SUB_STORE, "store: %s:%d is a standby; the store is at %s", host, port, t->ep);
    return CDDP_OK;
  }
  if (listed) {
    close(keep);
    return cddp__fail(r, "store %s:%d is a standby; the store it names, %s:%d, does not answer: %s", host, port,
                      to.host, to.port, cddp_last_error());
  }
  t->fd = keep, t->broken = 0, t->out.len = 0, t->epoch = p->epoch;
  snprintf(t->ep, sizeof t->ep, "%s:%d", host, port);
  return CDDP_OK;
}

static cddp_result_t connect_as(cddp_store_t **out, const char *host, int port, const char *token, int timeout_ms,
                                int here) {
  if (!out || !host || !*host)
    return cddp__fail(CDDP_INVALID_ARG, "store tcp: NULL output or empty host");
  *out = NULL;
  if (port <= 0 || port > 65535)
    return cddp__fail(CDDP_INVALID_ARG, "store tcp: bad port %d for host %s", port, host);
  tcp_store_t *t = calloc(1, sizeof *t);
  if (!t) return cddp__fail(CDDP_SYSTEM, "store tcp: out of memory");
  cddp__store_init(&t->base, &tcp_ops);
  pthread_mutex_init(&t->mu, NULL);
  t->fd = -1;
  t->epoch = -1;
  t->era = cddp__failover_era();
  snprintf(t->ep, sizeof t->ep, "%s:%d", host, port);
  snprintf(t->host, sizeof t->host, "%s", host);
  t->port = port;
  if (!(t->token = strdup(token ? token : ""))) {
    c_close(&t->base);
    return cddp__fail(CDDP_SYSTEM, "store tcp: out of memory");
  }
  if (timeout_ms < 0) timeout_ms = t->base.timeout_ms;
  uint64_t deadline = cddp__deadline_ms(timeout_ms);
  int64_t left_at = here ? -1 : cddp__failover_epoch_of(host, port);
  if (left_at >= 0 && cddp__failover_epoch() > left_at) { /* the job's store moved on from there */
    t->epoch = left_at;
    cddp_result_t r = failover(t);
    if (r != CDDP_OK) {
      c_close(&t->base);
      return r;
    }
    reg_add(t);
    *out = &t->base;
    return CDDP_OK;
  }
  char why[200] = "no attempt";
  int backoff_ms = 5, tries = 0;
  int tc;
  while ((tc = try_connect(host, port, deadline, &t->fd, why, sizeof why)) != 0) {
    tries++;
    if (tc == -2) {
      cddp_result_t r = cddp__fail(CDDP_NOT_FOUND, "store %s: %s", t->ep, why);
      c_close(&t->base);
      return r;
    }
    int left = cddp__ms_left(deadline);
    if (left == 0) {
      cddp_result_t r = cddp__fail(CDDP_TIMEOUT, "store %s unreachable after %d ms, %d tries (%s)",
                                   t->ep, timeout_ms, tries, why);
      c_close(&t->base);
      return r;
    }
    usleep((useconds_t)CDDP_MIN(backoff_ms, left) * 1000);
    backoff_ms = CDDP_MIN(backoff_ms * 2, 200);
  }
  cddp_result_t r = handshake(t, token, deadline);
  if (r != CDDP_OK) {
    c_close(&t->base);
    return r;
  }
  t->broken = 0;
  cddp__peers_t *p = here ? NULL : malloc(sizeof *p);
  if (p && peek_peers(t, 0, deadline, p) == CDDP_OK && (r = settle(t, p, host, port, deadline)) != CDDP_OK) {
    free(p);
    c_close(&t->base);
    return r;
  }
  t->peek_at = here ? UINT64_MAX : next_peek();
  free(p);
  cddp__clear_error();
  if (t->broken) { /* the server went away between the handshake and the list */
    r = cddp__fail(CDDP_REMOTE, "store %s closed the connection just after the handshake", t->ep);
    c_close(&t->base);
    return r;
  }
  reg_add(t);
  CDDP_INFO(CDDP_SUB_STORE, "store: connected to %s%s", t->ep, t->epoch >= 0 ? " (it may move: failover on)" : "");
  *out = &t->base;
  return CDDP_OK;
}
