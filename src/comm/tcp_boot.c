/* tcp_boot.c - TCP bootstrap: listen, publish "tcp/addr/<rank>", connect lower->higher, handshake. */
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include "comm/netif.h"
#include "comm/tcp.h"
#include "common/check.h"
#include "common/clock.h"
#include "common/sock.h"
#include "store/store_internal.h"

#define FENCE_EVERY_NS 200000000ull /* how often the accept loop asks the store if its generation stands */
#define MAX_STRANGERS 32 /* half-open strangers kept at once; more are closed at once */
/* Explicit buffers: with the kernel's autotuning from a small start, 64 KiB loopback
 * segments against a small receive buffer made transfers crawl (576-byte probes). The
 * kernel caps this at net.core.[rw]mem_max. */
#define SOCK_BUF_BYTES (4 << 20)

enum { CONNECTING, WAIT_ACK, READ_HELLO };

typedef struct conn {
  int fd, state, peer, stream;
  size_t got;
  uint64_t nonce; /* outgoing: the acceptor's nonce, read with its address */
  unsigned char buf[CDDP__TCP_HELLO_BYTES];
  char from[80]; /* accepted: the remote address, for the rejection log line */
} conn_t;

typedef struct boot {
  cddp__tcp_t *t;
  uint64_t nonce;
  conn_t *c;
  int nc, cap;
} boot_t;

static int aborted(const cddp__tcp_t *t) { return __atomic_load_n(t->ctx->aborted, __ATOMIC_ACQUIRE) != 0; }

static void drop(boot_t *b, int i) {
  if (b->c[i].fd >= 0) close(b->c[i].fd);
  b->c[i] = b->c[--b->nc];
}

/* Waits for peer's published address, in slices so abort is noticed. */
static cddp_result_t peer_addr(boot_t *b, int p, uint64_t deadline, struct sockaddr_storage *sa,
                               socklen_t *len, uint64_t *nonce) {
  char key[64], pn[128];
  snprintf(key, sizeof key, "tcp/addr/%d", p);
  for (;;) {
    void *val = NULL;
    size_t vlen = 0;
    int slice = CDDP_MIN(cddp__ms_left(deadline), 100);
    cddp_result_t r = cddp_store_get(b->t->ctx->store, key, &val, &vlen, slice);
    if (r == CDDP_OK) {
      r = cddp__tcp_addr_parse((const char *)val, sa, len, nonce);
      free(val);
      return r;
    }
    if (r != CDDP_TIMEOUT) return r;
    if (aborted(b->t)) return cddp__fail(CDDP_ABORTED, "aborted while waiting for the address of %s",
                                          cddp__peer_name(b->t->ctx, p, pn, sizeof pn));
    if (cddp__ms_left(deadline) == 0)
      return cddp__fail(CDDP_TIMEOUT, "timed out waiting for %s to publish its TCP address (%s)",
                        cddp__peer_name(b->t->ctx, p, pn, sizeof pn), key);
  }
}

static conn_t *add(boot_t *b) {
  if (b->nc == b->cap) {
    int cap = b->cap ? 2 * b->cap : 16;
    conn_t *c = realloc(b->c, (size_t)cap * sizeof *c);
    if (!c) return NULL;
    b->c = c, b->cap = cap;
  }
  conn_t *c = &b->c[b->nc++];
  memset(c, 0, sizeof *c);
  c->fd = -1;
  return c;
}

static void hello_for(const cddp__tcp_t *t, int kind, int peer, int stream, uint64_t nonce,
                      unsigned char out[CDDP__TCP_HELLO_BYTES]) {
  cddp__tcp_hello_t h = {CDDP__TCP_MAGIC, CDDP__TCP_VERSION, (uint16_t)kind, (uint32_t)t->ctx->round,
                         (uint32_t)t->world, (uint32_t)t->rank, (uint32_t)peer, (uint32_t)stream,
                         (uint32_t)t->nstreams, nonce};
  cddp__tcp_hello_encode(&h, out);
}

/* An accepted connection said hello: who is it? NULL when acceptable, else why not. */
static const char *check_hello(boot_t *b, const cddp__tcp_hello_t *h, int dec) {
  const cddp__tcp_t *t = b->t;
  if (dec == -1) return "bad magic (not a cddp peer)";
  if (dec == -2) return "unsupported protocol version";
  if (h->kind != CDDP__TCP_HELLO) return "not a hello";
  if (h->nonce != b->nonce) return "wrong nonce (another communicator or job)";
  if (h->round != (uint32_t)t->ctx->round) return "wrong round";
  if (h->world != (uint32_t)t->world || h->to != (uint32_t)t->rank) return "wrong world or rank";
  if (h->from >= (uint32_t)t->rank || !cddp__tcp_needs(t->rank, t->world, (int)h->from))
    return "rank not expected to connect here";
  if (h->nstreams != (uint32_t)t->nstreams) return "different CDDP_NSTREAMS";
  if (h->stream >= (uint32_t)t->nstreams) return "bad stream index";
  if (t->fds[h->from * (uint32_t)t->nstreams + h->stream] >= 0) return "duplicate stream";
  return NULL;
}

/* Advances connection i after poll said it is ready. 1 = finished (fd installed or
 * dropped), 0 = keep waiting, <0 = failure recorded. */
static int step(boot_t *b, int i, short revents) {
  cddp__tcp_t *t = b->t;
  conn_t *c = &b->c[i];
  char pn[128];
  if (c->state == CONNECTING) {
    int err = cddp__sock_connect_error(c->fd);
    if (err) {
      errno = err;
      return -(int)cddp__fail_errno(CDDP_REMOTE, "connect to %s (stream %d)",
                              cddp__peer_name(t->ctx, c->peer, pn, sizeof pn), c->stream);
    }
    hello_for(t, CDDP__TCP_HELLO, c->peer, c->stream, c->nonce, c->buf);
    if (send(c->fd, c->buf, sizeof c->buf, MSG_NOSIGNAL) != (ssize_t)sizeof c->buf)
      return -(int)cddp__fail_errno(CDDP_REMOTE, "hello to %s", cddp__peer_name(t->ctx, c->peer, pn, sizeof pn));
    c->state = WAIT_ACK, c->got = 0;
    return 0;
  }
  ssize_t n = recv(c->fd, c->buf + c->got, sizeof c->buf - c->got, 0);
  if (n < 0 && (errno == EAGAIN || errno == EINTR)) return 0;
  if (n <= 0) {
    if (c->state == READ_HELLO) { /* a stranger or a port scan went away */
      CDDP_INFO(CDDP_SUB_NET, "NET/Socket: connection from %s closed before its hello", c->from);
      drop(b, i);
      return 1;
    }
    return -(int)cddp__fail(CDDP_REMOTE, "%s closed the connection during the handshake (stream %d)",
                      cddp__peer_name(t->ctx, c->peer, pn, sizeof pn), c->stream);
  }
  c->got += (size_t)n;
  if (c->got < sizeof c->buf) return 0;
  cddp__tcp_hello_t h;
  int dec = cddp__tcp_hello_decode(c->buf, &h);
  if (c->state == WAIT_ACK) {
    if (dec || h.kind != CDDP__TCP_ACK || h.from != (uint32_t)c->peer || h.to != (uint32_t)t->rank ||
        h.stream != (uint32_t)c->stream || h.round != (uint32_t)t->ctx->round || h.nonce != c->nonce)
      return -(int)cddp__fail(CDDP_REMOTE, "%s sent a bad handshake reply (stale address?)",
                        cddp__peer_name(t->ctx, c->peer, pn, sizeof pn));
    t->fds[c->peer * t->nstreams + c->stream] = c->fd;
    c->fd = -1;
    drop(b, i);
    return 1;
  }
  const char *why = check_hello(b, &h, dec);
  if (why) {
    if (h.nstreams != (uint32_t)t->nstreams && !dec && h.nonce == b->nonce)
      return -(int)cddp__fail(CDDP_INVALID_USAGE, "%s uses CDDP_NSTREAMS=%u, this rank %d",
                        cddp__peer_name(t->ctx, (int)h.from, pn, sizeof pn), h.nstreams, t->nstreams);
    CDDP_WARN("rejected a TCP connection from %s: %s", c->from, why);
    drop(b, i);
    return 1;
  }
  hello_for(t, CDDP__TCP_ACK, (int)h.from, (int)h.stream, h.nonce, c->buf);
  if (send(c->fd, c->buf, sizeof c->buf, MSG_NOSIGNAL) != (ssize_t)sizeof c->buf) {
    CDDP_WARN("handshake reply to %s failed: %s", c->from, strerror(errno));
    drop(b, i);
    return 1;
  }
  t->fds[h.from * (uint32_t)t->nstreams + h.stream] = c->fd;
  c->fd = -1;
  drop(b, i);
  return 1;
}

static void accept_all(boot_t *b, int lfd) {
  for (;;) {
    struct sockaddr_storage sa;
    int fd = cddp__sock_accept(lfd, CDDP__SOCK_NONBLOCK, &sa);
    if (fd < 0) return; /* EAGAIN, or a transient error: poll again */
    int strangers = 0;
    for (int i = 0; i < b->nc; i++) strangers += b->c[i].state == READ_HELLO;
    conn_t *c = strangers < MAX_STRANGERS ? add(b) : NULL;
    if (!c) {
      close(fd);
      continue;
    }
    c->fd = fd, c->state = READ_HELLO, c->peer = -1;
    cddp__sockaddr_text((struct sockaddr *)&sa, c->from, sizeof c->from);
  }
}

cddp_result_t cddp__tcp_bootstrap(cddp__tcp_t *t) {
  const cddp__comm_ctx_t *ctx = t->ctx;
  boot_t b = {.t = t};
  cddp_result_t ret = CDDP_OK;
  int lfd = -1, port = 0, S = t->nstreams;
  uint64_t deadline = cddp__deadline_ms(ctx->cfg->timeout_ms);
  cddp__netif_t nif;
  char addr[128], key[64], ip[64], pn[128];
  struct pollfd *pfd = NULL;

  CDDP_CHECK_GOTO(cddp__netif_choose(&nif), ret, fail);
  CDDP_CHECK_GOTO(cddp__tcp_listen((struct sockaddr *)&nif.addr, nif.addrlen, SOCK_BUF_BYTES, t->cc, &lfd, &port),
                  ret, fail);
  if (getrandom(&b.nonce, sizeof b.nonce, 0) != sizeof b.nonce) b.nonce = cddp__now_ns() ^ (uint64_t)getpid() << 32;
  cddp__sockaddr_set_port(&nif.addr, port);
  cddp__tcp_addr_format((struct sockaddr *)&nif.addr, b.nonce, addr, sizeof addr);
  snprintf(key, sizeof key, "tcp/addr/%d", t->rank);
  CDDP_CHECK_GOTO(cddp_store_set(ctx->store, key, addr, strlen(addr) + 1), ret, fail);

  int expect_in = 0, npeers = 0;
  for (int p = 0; p < t->world; p++) {
    if (!cddp__tcp_needs(t->rank, t->world, p)) continue;
    npeers++;
    if (p < t->rank) { expect_in += S; continue; }
    struct sockaddr_storage sa;
    socklen_t salen;
    uint64_t nonce;
    CDDP_CHECK_GOTO(peer_addr(&b, p, deadline, &sa, &salen, &nonce), ret, fail);
    for (int s = 0; s < S; s++) {
      conn_t *c = add(&b);
      if (!c) { ret = cddp__fail(CDDP_SYSTEM, "out of memory"); goto fail; }
      c->state = CONNECTING, c->peer = p, c->stream = s;
      CDDP_CHECK_GOTO(cddp__sock_socket(sa.ss_family, CDDP__SOCK_NONBLOCK, &c->fd), ret, fail);
      cddp__tcp_preconnect(c->fd, SOCK_BUF_BYTES, t->cc);
      if (cddp__sock_connect_start(c->fd, (struct sockaddr *)&sa, salen) != CDDP_OK) {
        ret = cddp__fail_errno(CDDP_REMOTE, "connect to %s at %s",
                               cddp__peer_name(ctx, p, pn, sizeof pn), cddp__sockaddr_ip((struct sockaddr *)&sa, ip, sizeof ip));
        goto fail;
      }
      c->nonce = nonce;
    }
  }

  /* one loop drives the outgoing connections and the accepts until every stream is up */
  pfd = calloc((size_t)CDDP_MAX(1, t->world * S + MAX_STRANGERS) + 2, sizeof *pfd);
  if (!pfd) { ret = cddp__fail(CDDP_SYSTEM, "out of memory"); goto fail; }
  uint64_t next_fence = cddp__now_ns() + FENCE_EVERY_NS;
  for (;;) {
    int have_in = 0, pending_out = 0;
    for (int p = 0; p < t->rank; p++)
      for (int s = 0; s < S; s++) have_in += t->fds[p * S + s] >= 0;
    for (int i = 0; i < b.nc; i++) pending_out += b.c[i].state != READ_HELLO;
    if (have_in == expect_in && pending_out == 0) break;
    if (aborted(t)) { ret = cddp__fail(CDDP_ABORTED, "aborted while connecting to peers"); goto fail; }
    int ms = cddp__ms_left(deadline);
    if (ms == 0) {
      int who = -1;
      for (int i = 0; i < b.nc && who < 0; i++) if (b.c[i].state != READ_HELLO) who = b.c[i].peer;
      for (int p = 0; p < t->rank && who < 0; p++)
        for (int s = 0; s < S && who < 0; s++)
          if (cddp__tcp_needs(t->rank, t->world, p) && t->fds[p * S + s] < 0) who = p;
      ret = cddp__fail(CDDP_TIMEOUT, "timed out after %d ms connecting TCP streams with %s",
                       ctx->cfg->timeout_ms, cddp__peer_name(ctx, who, pn, sizeof pn));
      goto fail;
    }
    int n = 0;
    pfd[n++] = (struct pollfd){lfd, POLLIN, 0};
    pfd[n++] = (struct pollfd){t->wakefd, POLLIN, 0};
    for (int i = 0; i < b.nc; i++)
      pfd[n++] = (struct pollfd){b.c[i].fd, b.c[i].state == CONNECTING ? POLLOUT : POLLIN, 0};
    int rc = poll(pfd, (nfds_t)n, CDDP_MIN(ms, 100));
    if (rc < 0 && errno != EINTR) { ret = cddp__fail_errno(CDDP_SYSTEM, "poll while connecting"); goto fail; }
    /* a peer that published its address and died before connecting is never heard from
     * here: the store says when its generation was given up (the job re-forms without us) */
    if (cddp__now_ns() >= next_fence) {
      if ((ret = cddp__store_fence(ctx->store)) != CDDP_OK) goto fail;
      next_fence = cddp__now_ns() + FENCE_EVERY_NS;
    }
    if (rc <= 0) continue;
    if (pfd[1].revents) {
      uint64_t v;
      if (read(t->wakefd, &v, sizeof v) < 0) { /* already drained */ }
    }
    /* walk backwards: step() may drop entry i by moving the last one into it */
    int nconn = b.nc;
    for (int i = nconn - 1; i >= 0; i--) {
      if (!pfd[2 + i].revents) continue;
      int r = step(&b, i, pfd[2 + i].revents);
      if (r < 0) { ret = (cddp_result_t)-r; goto fail; }
    }
    if (pfd[0].revents) accept_all(&b, lfd);
  }
  for (int i = 0; i < t->world * S; i++) if (t->fds[i] >= 0) cddp__tcp_tune(t->fds[i]);
  CDDP_INFO(CDDP_SUB_NET, "NET/TCP: rank %d listening on %s via %s, %d stream(s) to each of %d peer(s), congestion control %s",
            t->rank, addr, nif.name, S, npeers, t->cc ? t->cc : "(system)");

exit:
  for (int i = b.nc - 1; i >= 0; i--) drop(&b, i); /* strangers still half-open */
  free(b.c);
  free(pfd);
  if (lfd >= 0) close(lfd);
  return ret;
fail:
  goto exit;
}
