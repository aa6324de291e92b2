/* torchstore.c - torch 1.x's TCPStore protocol, served by the agent (torchstore.h).
 *
 * The wire format (torch 1.13's c10d TCPStore, little-endian as the hosts are): a request is
 * one query byte, then its fields; a string or byte vector is a uint64 length and the bytes.
 *   SET 0: key, value                      (no reply)
 *   COMPARE_SET 1: key, expected, desired  -> value   (a missing key is set when expected is
 *                                                     empty; else expected comes back, as torch)
 *   GET 2: key                             -> value   (clients WAIT first; a missing key: empty)
 *   ADD 3: key, int64                      -> int64   (kept as decimal text, as torch keeps it)
 *   CHECK 4: uint64 n, n keys              -> uint8 0 ready / 1 not ready
 *   WAIT 5: uint64 n, n keys               -> uint8 0 once every key exists
 *   GETNUMKEYS 6                           -> int64
 *   DELETE_KEY 8: key                      -> int64 keys deleted
 * WATCH_KEY 7 (callbacks; no rendezvous uses it) and anything else close the connection. No
 * authentication, as torch's own: it carries what rank 0's TCPStore would have carried. */
#include "launcher/torchstore.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/check.h"
#include "common/log.h"
#include "common/sock.h"

#define BUCKETS 1024
#define FIELD_MAX (256u << 20) /* a key or value larger than this is not torch's: the peer is dropped */
#define CONNS_MAX 65536

enum { Q_SET, Q_COMPARE_SET, Q_GET, Q_ADD, Q_CHECK, Q_WAIT, Q_GETNUMKEYS, Q_WATCH_KEY, Q_DELETE_KEY };

typedef struct entry {
  struct entry *next;
  size_t klen, vlen;
  uint8_t *val;
  uint8_t key[]; /* klen bytes */
} entry_t;

typedef struct buf {
  uint8_t *p;
  size_t len, cap, off; /* off: consumed from the front */
} buf_t;

typedef struct conn {
  int fd;
  buf_t in, out;
  int waiting; /* a WAIT is parked: in.off .. holds it, answered when its keys exist */
} conn_t;

struct cddp__torch_store {
  int lfd, wake[2];
  pthread_t thread;
  entry_t *bucket[BUCKETS];
  size_t nkeys;
  conn_t *conn;
  int nconn, capconn;
};

static uint32_t hash(const uint8_t *k, size_t n) {
  uint32_t h = 2166136261u; /* FNV-1a */
  for (size_t i = 0; i < n; i++) h = (h ^ k[i]) * 16777619u;
  return h % BUCKETS;
}

static entry_t **find(cddp__torch_store_t *ts, const uint8_t *k, size_t n) {
  entry_t **e = &ts->bucket[hash(k, n)];
  while (*e && !((*e)->klen == n && !memcmp((*e)->key, k, n))) e = &(*e)->next;
  return e;
}

static int put(cddp__torch_store_t *ts, const uint8_t *k, size_t kn, const uint8_t *v, size_t vn) {
  entry_t **slot = find(ts, k, kn), *e = *slot;
  uint8_t *copy = malloc(vn ? vn : 1);
  if (!copy) return -1;
  memcpy(copy, v, vn);
  if (!e) {
    if (!(e = malloc(sizeof *e + kn))) return free(copy), -1;
    *e = (entry_t){.klen = kn};
    memcpy(e->key, k, kn);
    *slot = e;
    ts->nkeys++;
  } else {
    free(e->val);
  }
  e->val = copy, e->vlen = vn;
  return 0;
}

static int reserve(buf_t *b, size_t more) {
  if (b->off && b->off == b->len) b->off = b->len = 0;
  if (b->len + more <= b->cap) return 0;
  if (b->off) { /* slide the unconsumed part to the front first */
    memmove(b->p, b->p + b->off, b->len - b->off);
    b->len -= b->off, b->off = 0;
    if (b->len + more <= b->cap) return 0;
  }
  size_t cap = CDDP_MAX(b->cap * 2, b->len + more);
  uint8_t *p = realloc(b->p, cap);
  if (!p) return -1;
  b->p = p, b->cap = cap;
  return 0;
}

static int emit(conn_t *c, const void *data, size_t n) {
  if (reserve(&c->out, n) != 0) return -1;
  memcpy(c->out.p + c->out.len, data, n);
  c->out.len += n;
  return 0;
}

static int emit_vec(conn_t *c, const uint8_t *v, size_t n) {
  uint64_t len = n;
  return emit(c, &len, sizeof len) || emit(c, v, n) ? -1 : 0;
}

/* A cursor over one request in the input: fields are taken while they are complete. */
typedef struct cursor {
  const uint8_t *p;
  size_t left, used;
  int short_; /* the request is not all here yet */
  int bad;    /* a field is larger than torch would send */
} cursor_t;

static uint64_t take_u64(cursor_t *cu) {
  uint64_t v = 0;
  if (cu->left < 8) return cu->short_ = 1, 0;
  memcpy(&v, cu->p, 8);
  cu->p += 8, cu->left -= 8, cu->used += 8;
  return v;
}

static const uint8_t *take_vec(cursor_t *cu, size_t *n) {
  uint64_t len = take_u64(cu);
  if (cu->short_) return NULL;
  if (len > FIELD_MAX) return cu->bad = 1, NULL;
  if (cu->left < len) return cu->short_ = 1, NULL;
  const uint8_t *v = cu->p;
  cu->p += len, cu->left -= len, cu->used += len;
  *n = (size_t)len;
  return v;
}

/* Whether every key of a CHECK/WAIT request (after its query byte) exists; -1 when the
 * request is incomplete or bad (cu says which). */
static int all_exist(cddp__torch_store_t *ts, cursor_t *cu) {
  uint64_t n = take_u64(cu);
  if (cu->short_) return -1;
  if (n > FIELD_MAX) return cu->bad = 1, -1;
  int all = 1;
  for (uint64_t i = 0; i < n; i++) {
    size_t kn = 0;
    const uint8_t *k = take_vec(cu, &kn);
    if (!k && (cu->short_ || cu->bad)) return -1;
    if (all && !*find(ts, k, kn)) all = 0;
  }
  return all;
}

/* Serves the requests complete in c's input: 1 when one (a WAIT not yet satisfied) is parked
 * or the rest is incomplete, -1 to drop the connection. */
static int serve(cddp__torch_store_t *ts, conn_t *c) {
  while (c->in.len > c->in.off) {
    cursor_t cu = {.p = c->in.p + c->in.off + 1, .left = c->in.len - c->in.off - 1, .used = 1};
    int q = c->in.p[c->in.off], r = 0;
    size_t kn = 0, vn = 0, en = 0;
    const uint8_t *k, *v, *e;
    c->waiting = 0;
    switch (q) {
    case Q_SET:
      if ((k = take_vec(&cu, &kn)) && (v = take_vec(&cu, &vn))) r = put(ts, k, kn, v, vn);
      break;
    case Q_COMPARE_SET:
      if ((k = take_vec(&cu, &kn)) && (e = take_vec(&cu, &en)) && (v = take_vec(&cu, &vn))) {
        entry_t *have = *find(ts, k, kn);
        if (!have && en == 0) r = put(ts, k, kn, v, vn) || emit_vec(c, v, vn);
        else if (!have) r = emit_vec(c, e, en);
        else if (have->vlen == en && !memcmp(have->val, e, en)) r = put(ts, k, kn, v, vn) || emit_vec(c, v, vn);
        else r = emit_vec(c, have->val, have->vlen);
      }
      break;
    case Q_GET:
      if ((k = take_vec(&cu, &kn))) {
        entry_t *have = *find(ts, k, kn);
        r = have ? emit_vec(c, have->val, have->vlen) : emit_vec(c, NULL, 0);
      }
      break;
    case Q_ADD: {
      if (!(k = take_vec(&cu, &kn))) break;
      int64_t delta = (int64_t)take_u64(&cu);
      if (cu.short_) break;
      entry_t *have = *find(ts, k, kn);
      char text[32];
      long long now = 0;
      if (have) {
        snprintf(text, sizeof text, "%.*s", (int)CDDP_MIN(have->vlen, sizeof text - 1), (const char *)have->val);
        now = strtoll(text, NULL, 10);
      }
      now += delta;
      int n = snprintf(text, sizeof text, "%lld", now);
      int64_t out = now;
      r = put(ts, k, kn, (const uint8_t *)text, (size_t)n) || emit(c, &out, sizeof out);
      break;
    }
    case Q_CHECK: {
      int all = all_exist(ts, &cu);
      uint8_t out = all ? 0 : 1;
      if (all >= 0) r = emit(c, &out, 1);
      break;
    }
    case Q_WAIT: {
      int all = all_exist(ts, &cu);
      if (all == 0) return c->waiting = 1; /* parked: looked at again after each SET, ADD, COMPARE_SET */
      uint8_t out = 0;
      if (all > 0) r = emit(c, &out, 1);
      break;
    }
    case Q_GETNUMKEYS: {
      int64_t out = (int64_t)ts->nkeys;
      r = emit(c, &out, sizeof out);
      break;
    }
    case Q_DELETE_KEY:
      if ((k = take_vec(&cu, &kn))) {
        entry_t **slot = find(ts, k, kn), *have = *slot;
        int64_t out = have != NULL;
        if (have) *slot = have->next, free(have->val), free(have), ts->nkeys--;
        r = emit(c, &out, sizeof out);
      }
      break;
    default:
      CDDP_INFO(CDDP_SUB_RUN, "torch store: request %d (%s) is not served; closing that connection", q,
                q == Q_WATCH_KEY ? "WATCH_KEY" : "unknown");
      return -1;
    }
    if (cu.bad || r != 0) return -1;
    if (cu.short_) return 1;
    c->in.off += cu.used;
  }
  return 1;
}

static void drop(cddp__torch_store_t *ts, int i) {
  close(ts->conn[i].fd);
  free(ts->conn[i].in.p);
  free(ts->conn[i].out.p);
  ts->conn[i] = ts->conn[--ts->nconn];
}

static void accept_all(cddp__torch_store_t *ts) {
  for (;;) {
    int fd = cddp__sock_accept(ts->lfd, CDDP__SOCK_NONBLOCK, NULL);
    if (fd < 0) return;
    if (ts->nconn == ts->capconn) {
      int cap = ts->capconn ? ts->capconn * 2 : 16;
      conn_t *more = cap <= CONNS_MAX ? realloc(ts->conn, (size_t)cap * sizeof *more) : NULL;
      if (!more) {
        close(fd);
        continue;
      }
      ts->conn = more, ts->capconn = cap;
    }
    cddp__sock_nodelay(fd);
    ts->conn[ts->nconn++] = (conn_t){.fd = fd};
  }
}

/* Reads what c has, serves it; -1 when the peer left or broke the protocol. */
static int readable(cddp__torch_store_t *ts, conn_t *c) {
  for (;;) {
    if (reserve(&c->in, 65536) != 0) return -1;
    ssize_t n = recv(c->fd, c->in.p + c->in.len, c->in.cap - c->in.len, 0);
    if (n > 0) {
      c->in.len += (size_t)n;
      continue;
    }
    if (n == 0) return -1;
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) break;
    return -1;
  }
  return c->waiting ? 1 : serve(ts, c);
}

static int flush(conn_t *c) {
  while (c->out.len > c->out.off) {
    ssize_t n = send(c->fd, c->out.p + c->out.off, c->out.len - c->out.off, MSG_NOSIGNAL);
    if (n > 0) c->out.off += (size_t)n;
    else if (n < 0 && errno == EINTR) continue;
    else return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) ? 0 : -1;
  }
  c->out.off = c->out.len = 0;
  return 0;
}

static void *serve_main(void *arg) {
  cddp__torch_store_t *ts = arg;
  struct pollfd *pfd = NULL;
  int cap = 0;
  for (;;) {
    if (cap < ts->nconn + 2) {
      cap = ts->nconn + 18;
      struct pollfd *more = realloc(pfd, (size_t)cap * sizeof *pfd);
      if (!more) break;
      pfd = more;
    }
    pfd[0] = (struct pollfd){.fd = ts->wake[0], .events = POLLIN};
    pfd[1] = (struct pollfd){.fd = ts->lfd, .events = POLLIN};
    for (int i = 0; i < ts->nconn; i++)
      pfd[2 + i] = (struct pollfd){.fd = ts->conn[i].fd,
                                   .events = POLLIN | (ts->conn[i].out.len > ts->conn[i].out.off ? POLLOUT : 0)};
    int n = ts->nconn;
    if (poll(pfd, (nfds_t)n + 2, -1) < 0 && errno != EINTR) break;
    if (pfd[0].revents) break;
    int changed = 0;
    for (int i = n - 1; i >= 0; i--) { /* from the end: drop() moves the last one into i */
      conn_t *c = &ts->conn[i];
      short re = pfd[2 + i].revents;
      int ok = 1;
      if (re & (POLLIN | POLLHUP | POLLERR)) {
        size_t keys = ts->nkeys;
        ok = readable(ts, c) >= 0;
        changed |= ts->nkeys != keys || c->in.len; /* a write may have come: parked WAITs look again */
      }
      if (ok && (re & POLLOUT)) ok = flush(c) == 0;
      if (!ok) drop(ts, i);
    }
    if (changed) /* a SET/ADD may satisfy parked WAITs (an overwrite too: cheap to look) */
      for (int i = ts->nconn - 1; i >= 0; i--)
        if (ts->conn[i].waiting && serve(ts, &ts->conn[i]) < 0) drop(ts, i);
    for (int i = ts->nconn - 1; i >= 0; i--)
      if (flush(&ts->conn[i]) != 0) drop(ts, i);
    if (pfd[1].revents & POLLIN) accept_all(ts);
  }
  free(pfd);
  return NULL;
}

cddp_result_t cddp__torch_store_start(int family, cddp__torch_store_t **out, int *port) {
  cddp__torch_store_t *ts = calloc(1, sizeof *ts);
  if (!ts) return cddp__fail(CDDP_SYSTEM, "out of memory");
  ts->lfd = -1, ts->wake[0] = ts->wake[1] = -1;
  struct sockaddr_storage sa = {0};
  socklen_t len = family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in);
  sa.ss_family = (sa_family_t)(family == AF_INET6 ? AF_INET6 : AF_INET); /* the wildcard, port 0 */
  cddp_result_t r = cddp__sock_socket(sa.ss_family, CDDP__SOCK_NONBLOCK, &ts->lfd);
  if (r == CDDP_OK) r = cddp__sock_listen(ts->lfd, (struct sockaddr *)&sa, len, CDDP__SOCK_REUSEADDR, 1024, port);
  if (r == CDDP_OK && pipe2(ts->wake, O_CLOEXEC) != 0) r = cddp__fail_errno(CDDP_SYSTEM, "pipe");
  if (r == CDDP_OK && pthread_create(&ts->thread, NULL, serve_main, ts) != 0)
    r = cddp__fail(CDDP_SYSTEM, "cannot start the torch store's thread");
  if (r != CDDP_OK) {
    if (ts->lfd >= 0) close(ts->lfd);
    if (ts->wake[0] >= 0) close(ts->wake[0]), close(ts->wake[1]);
    free(ts);
    return r;
  }
  *out = ts;
  return CDDP_OK;
}

void cddp__torch_store_stop(cddp__torch_store_t *ts) {
  if (!ts) return;
  (void)!write(ts->wake[1], "x", 1);
  pthread_join(ts->thread, NULL);
  while (ts->nconn) drop(ts, ts->nconn - 1);
  free(ts->conn);
  for (int b = 0; b < BUCKETS; b++)
    for (entry_t *e = ts->bucket[b], *next; e; e = next) next = e->next, free(e->val), free(e);
  close(ts->lfd);
  close(ts->wake[0]);
  close(ts->wake[1]);
  free(ts);
}
