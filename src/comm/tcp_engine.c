/* tcp_engine.c - the transfer engine: pipelined chunks striped over streams, one thread, poll(). */
#include <errno.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "comm/reduce.h"
#include "comm/tcp.h"
#include "common/check.h"
#include "common/clock.h"

#define MAX_STREAMS 64

/* Position of one stream in its list of chunks: (s, k), k = stream, stream + S, ... */
typedef struct pos {
  int s, started, done, wb; /* wb: would block, wait for poll */
  size_t k, off;
  const char *src;          /* send: current chunk */
  char *buf;                /* recv: where bytes land (dst or staging) */
  size_t len;
  size_t hoff, hlen;        /* stream 0's first chunk: the header's bytes done, and its size */
  cddp__tcp_rslot_t slot;
} pos_t;

typedef struct run {
  cddp__tcp_t *t;
  const cddp__tcp_xfer_t *x;
  int S;
  pos_t sp[MAX_STREAMS], rp[MAX_STREAMS];
  cddp__fp_t hsend, hrecv;  /* the headers (desync.h): this rank's call, and the sender's */
} run_t;

static void advance(pos_t *p, int stream, int S, size_t K, int nsteps) {
  p->started = 0;
  p->k += (size_t)S;
  if (p->k >= K) p->k = (size_t)stream, p->s++;
  if (p->s >= nsteps) p->done = 1;
}

static const char *peer(run_t *r, int rank, char *buf, size_t size) {
  return cddp__peer_name(r->t->ctx, rank, buf, size);
}

static int is_aborted(const cddp__tcp_t *t) {
  return __atomic_load_n(t->ctx->aborted, __ATOMIC_ACQUIRE) != 0;
}

/* One send or receive of what is left of p's chunk, after what is left of its header (hdr)
 * when it has one: a header costs no extra system call or round trip. A small chunk goes with
 * its header through the transport's bounce buffer as one plain send / recv: a copy of a few KiB
 * costs less than the kernel's sendmsg / recvmsg path with two iovecs (docs/bench.md). */
static ssize_t io(cddp__tcp_t *t, int fd, pos_t *p, cddp__fp_t *hdr, char *data, int sending) {
  if (p->hoff >= p->hlen)
    return sending ? send(fd, data + p->off, p->len - p->off, MSG_NOSIGNAL | MSG_DONTWAIT)
                   : recv(fd, data + p->off, p->len - p->off, MSG_DONTWAIT);
  size_t hl = p->hlen - p->hoff, dl = p->len - p->off;
  if (hl + dl <= sizeof t->bounce) {
    if (sending) {
      memcpy(t->bounce, (char *)hdr + p->hoff, hl);
      memcpy(t->bounce + hl, data + p->off, dl);
      return send(fd, t->bounce, hl + dl, MSG_NOSIGNAL | MSG_DONTWAIT);
    }
    ssize_t n = recv(fd, t->bounce, hl + dl, MSG_DONTWAIT);
    if (n > 0) {
      size_t h = CDDP_MIN((size_t)n, hl);
      memcpy((char *)hdr + p->hoff, t->bounce, h);
      memcpy(data + p->off, t->bounce + h, (size_t)n - h);
    }
    return n;
  }
  struct iovec iov[2] = {{(char *)hdr + p->hoff, p->hlen - p->hoff}, {data + p->off, p->len - p->off}};
  struct msghdr m = {.msg_iov = iov, .msg_iovlen = p->len > p->off ? 2 : 1};
  return sending ? sendmsg(fd, &m, MSG_NOSIGNAL | MSG_DONTWAIT) : recvmsg(fd, &m, MSG_DONTWAIT);
}

/* n bytes moved: the header's first. */
static void take(pos_t *p, size_t n) {
  size_t h = CDDP_MIN(n, p->hlen - p->hoff);
  p->hoff += h;
  p->off += n - h;
}

static int header_ok(const run_t *r) {
  return r->hrecv.tag == CDDP__FP_MAGIC && cddp__fp_same(&r->hrecv, &r->hsend);
}

/* 1 = progress, 0 = none (blocked), -1 = failed (recorded). */
static int send_some(run_t *r, int i) {
  const cddp__tcp_xfer_t *x = r->x;
  pos_t *p = &r->sp[i];
  int fd = r->t->fds[x->to * r->S + i], progress = 0;
  while (!p->done) {
    if (!p->started) {
      int need = p->s + x->dep;
      if (need > 0 && r->t->done[p->k] < need) return progress; /* waits for a receive */
      x->send_at(x, p->s, p->k, &p->src, &p->len);
      p->off = 0, p->started = 1;
    }
    if (p->off < p->len || p->hoff < p->hlen) {
      ssize_t n = io(r->t, fd, p, &r->hsend, (char *)p->src, 1);
      if (n < 0) {
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) return p->wb = 1, progress;
        char pn[128];
        cddp__tcp_fail(r->t, CDDP_REMOTE, "%s: send failed during %s: %s",
                       peer(r, x->to, pn, sizeof pn), x->what, strerror(errno));
        return -1;
      }
      take(p, (size_t)n), progress = 1;
      if (p->off < p->len || p->hoff < p->hlen) return p->wb = 1, progress; /* socket buffer full */
    }
    advance(p, i, r->S, x->K, x->nsend);
    progress = 1; /* even an empty chunk frees what waits on it */
  }
  return progress;
}

static int recv_some(run_t *r, int i) {
  cddp__tcp_t *t = r->t;
  const cddp__tcp_xfer_t *x = r->x;
  pos_t *p = &r->rp[i];
  int fd = t->fds[x->from * r->S + i], progress = 0;
  while (!p->done) {
    if (!p->started) {
      x->recv_at(x, p->s, p->k, &p->slot);
      p->len = p->slot.len;
      p->buf = p->slot.mine ? t->staging[i] : p->slot.dst;
      p->off = 0, p->started = 1;
    }
    if (p->off < p->len || p->hoff < p->hlen) {
      int had_header = p->hoff == p->hlen;
      ssize_t n = io(t, fd, p, &r->hrecv, p->buf, 0);
      if (n <= 0) {
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return p->wb = 1, progress;
        char pn[128];
        cddp__tcp_fail(t, CDDP_REMOTE, "%s: %s during %s", peer(r, x->from, pn, sizeof pn),
                       n == 0 ? "connection closed" : strerror(errno), x->what);
        return -1;
      }
      take(p, (size_t)n), progress = 1;
      if (!had_header && p->hoff == p->hlen && !header_ok(r)) {
        cddp__tcp_desync(t, r->hrecv.tag == CDDP__FP_MAGIC ? &r->hrecv : NULL, x->from);
        return -1;
      }
      if (p->off < p->len || p->hoff < p->hlen) return p->wb = 1, progress; /* drained for now */
    }
    if (p->slot.mine && p->len) {
      size_t es = cddp_dtype_size(x->dt);
      const void *a = p->slot.mine_first ? (const void *)p->slot.mine : p->buf;
      const void *b = p->slot.mine_first ? (const void *)p->buf : p->slot.mine;
      cddp__reduce2(p->slot.dst, a, b, p->len / es, x->dt, x->op, p->slot.scale);
    }
    t->done[p->k] = p->s + 1;
    advance(p, i, r->S, x->K, x->nrecv);
    progress = 1;
  }
  return progress;
}

cddp_result_t cddp__tcp_xfer_run(cddp__tcp_t *t, const cddp__tcp_xfer_t *x) {
  run_t *r = &(run_t){.t = t, .x = x, .S = t->nstreams};
  int S = r->S;
  if (S > MAX_STREAMS) return cddp__fail(CDDP_INTERNAL, "%d streams > %d", S, MAX_STREAMS);
  if (t->done_cap < x->K) {
    int *d = realloc(t->done, x->K * sizeof *d);
    if (!d) return cddp__fail(CDDP_SYSTEM, "out of memory for %zu chunk counters", x->K);
    t->done = d, t->done_cap = x->K;
  }
  memset(t->done, 0, x->K * sizeof *t->done);
  for (int i = 0; i < S; i++) {
    r->sp[i] = (pos_t){.k = (size_t)i, .done = x->to < 0 || x->nsend == 0 || (size_t)i >= x->K};
    r->rp[i] = (pos_t){.k = (size_t)i, .done = x->from < 0 || x->nrecv == 0 || (size_t)i >= x->K};
  }
  if (t->fp.seq) { /* every transfer of a checked call starts with it on stream 0, both ways */
    r->hsend = t->fp;
    r->hsend.tag = CDDP__FP_MAGIC;
    r->sp[0].hlen = r->sp[0].done ? 0 : sizeof r->hsend;
    r->rp[0].hlen = r->rp[0].done ? 0 : sizeof r->hrecv;
  }
  struct pollfd pfd[2 * MAX_STREAMS + 1];
  for (;;) {
    int progress = 0, pending = 0;
    for (int i = 0; i < S; i++) {
      if (r->sp[i].done) continue;
      pending = 1;
      if (r->sp[i].wb) continue;
      int n = send_some(r, i);
      if (n < 0) return CDDP_REMOTE;
      progress |= n;
    }
    for (int i = 0; i < S; i++) {
      if (r->rp[i].done) continue;
      pending = 1;
      if (r->rp[i].wb) continue;
      int n = recv_some(r, i);
      if (n < 0) return CDDP_REMOTE;
      progress |= n;
    }
    if (!pending) {
      for (int i = 0; i < S; i++) if (!r->rp[i].done || !r->sp[i].done) pending = 1;
      if (!pending) return CDDP_OK;
    }
    if (is_aborted(t)) return cddp__tcp_fail(t, CDDP_ABORTED, "communicator aborted during %s", x->what);
    if (progress) continue;
    /* nothing moved: sleep until a socket is ready, wake() is called, or the deadline */
    int n = 0;
    for (int i = 0; i < S; i++) {
      if (!r->sp[i].done && r->sp[i].wb) pfd[n++] = (struct pollfd){t->fds[x->to * S + i], POLLOUT, 0};
      if (!r->rp[i].done && r->rp[i].wb) pfd[n++] = (struct pollfd){t->fds[x->from * S + i], POLLIN, 0};
    }
    if (n == 0) return cddp__tcp_fail(t, CDDP_INTERNAL, "%s: schedule stalled (no socket to wait for)", x->what);
    pfd[n++] = (struct pollfd){t->wakefd, POLLIN, 0};
    int ms = cddp__ms_left(t->deadline), rc = 0;
    if (ms > 0) rc = poll(pfd, (nfds_t)n, ms);
    if (rc < 0 && errno == EINTR) continue;
    if (rc < 0) return cddp__tcp_fail(t, CDDP_SYSTEM, "poll during %s: %s", x->what, strerror(errno));
    if (rc == 0) {
      int who = x->from, stream = -1;
      for (int i = 0; i < S && stream < 0; i++) if (!r->rp[i].done) stream = i;
      if (stream < 0) who = x->to;
      char pn[128];
      return cddp__tcp_fail(t, CDDP_TIMEOUT, "timed out waiting for %s during %s (%s)",
                            peer(r, who, pn, sizeof pn), x->what,
                            who == x->from ? "nothing to receive" : "peer not reading");
    }
    int k = 0;
    for (int i = 0; i < S; i++) {
      if (!r->sp[i].done && r->sp[i].wb) r->sp[i].wb = pfd[k++].revents == 0;
      if (!r->rp[i].done && r->rp[i].wb) r->rp[i].wb = pfd[k++].revents == 0;
    }
    if (pfd[k].revents) {
      uint64_t v;
      if (read(t->wakefd, &v, sizeof v) < 0) { /* drained by someone else: fine */ }
    }
  }
}
