/* doctor_probe.c - `cddp doctor`'s own sockets: a listener that answers probes, bounded
 * connects that say how they failed, ping-pong (latency, clock offset) and bulk transfers. */
#include <arpa/inet.h>
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "common/check.h"
#include "common/clock.h"
#include "doctor/doctor.h"

#define MAGIC "CDDPDOC1"
#define CHUNK (1u << 20)
enum { OP_DONE = 0, OP_PING = 1, OP_PUSH = 2, OP_PULL = 3 };

typedef struct hello { char magic[8]; uint32_t rank; uint32_t pad; } hello_t;
typedef struct op { uint32_t op; uint32_t count; uint64_t bytes; } op_t;

static uint64_t real_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void set_timeouts(int fd, int ms) {
  struct timeval tv = {.tv_sec = ms / 1000, .tv_usec = (ms % 1000) * 1000};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

/* 0 on success, -1 on error or EOF (errno says which; 0 for EOF). */
static int full(int fd, void *buf, size_t len, int writing) {
  char *p = buf;
  while (len > 0) {
    ssize_t k = writing ? send(fd, p, len, MSG_NOSIGNAL) : recv(fd, p, len, 0);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) {
      if (k == 0) errno = 0;
      return -1;
    }
    p += k, len -= (size_t)k;
  }
  return 0;
}

static struct addrinfo *resolve(const char *addr, int port) {
  struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICHOST}, *res = NULL;
  char ps[16];
  snprintf(ps, sizeof ps, "%d", port);
  return getaddrinfo(addr, ps, &hints, &res) == 0 ? res : NULL;
}

/* ---- server ---- */

struct cddp__doc_server {
  int fd, port, rank, io_ms;
  int stop;
  pthread_t thread;
  char *buf;
};

static void serve_conn(cddp__doc_server_t *s, int fd) {
  set_timeouts(fd, s->io_ms);
  hello_t h;
  if (full(fd, &h, sizeof h, 0) || memcmp(h.magic, MAGIC, 8)) return; /* a stranger: drop it */
  hello_t me = {.rank = htonl((uint32_t)s->rank)};
  memcpy(me.magic, MAGIC, 8);
  if (full(fd, &me, sizeof me, 1)) return;
  for (;;) {
    op_t o;
    if (full(fd, &o, sizeof o, 0)) return;
    uint32_t op = ntohl(o.op), count = ntohl(o.count);
    uint64_t bytes = be64toh(o.bytes);
    if (op == OP_DONE) return;
    if (op == OP_PING) {
      for (uint32_t i = 0; i < count; i++) {
        uint64_t msg[2];
        if (full(fd, msg, 8, 0)) return;
        msg[1] = htobe64(real_ns());
        if (full(fd, msg, 16, 1)) return;
      }
    } else if (op == OP_PUSH || op == OP_PULL) {
      for (uint64_t left = bytes; left > 0;) {
        size_t k = left < CHUNK ? (size_t)left : CHUNK;
        if (full(fd, s->buf, k, op == OP_PULL)) return;
        left -= k;
      }
      char ack = 'k';
      if (op == OP_PUSH && full(fd, &ack, 1, 1)) return;
    } else {
      return;
    }
  }
}

static void *serve(void *arg) {
  cddp__doc_server_t *s = arg;
  while (!__atomic_load_n(&s->stop, __ATOMIC_ACQUIRE)) {
    struct pollfd p = {.fd = s->fd, .events = POLLIN};
    if (poll(&p, 1, 100) <= 0) continue;
    int c = accept4(s->fd, NULL, NULL, SOCK_CLOEXEC);
    if (c < 0) continue;
    serve_conn(s, c); /* one at a time: the schedule never sends two measuring clients */
    close(c);
  }
  return NULL;
}

cddp_result_t cddp__doc_server_start(cddp__doc_server_t **out, const char *addr, int rank, int io_timeout_ms) {
  struct addrinfo *res = resolve(addr, 0);
  if (!res) return cddp__fail(CDDP_INVALID_ARG, "doctor: cannot listen on '%s': not a numeric address", addr);
  cddp__doc_server_t *s = calloc(1, sizeof *s);
  char *buf = malloc(CHUNK);
  int fd = socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  cddp_result_t ret = CDDP_OK;
  if (!s || !buf || fd < 0) {
    ret = cddp__fail_errno(CDDP_SYSTEM, "doctor: listener on %s", addr);
    goto fail;
  }
  if (bind(fd, res->ai_addr, res->ai_addrlen) != 0 || listen(fd, 256) != 0) {
    ret = cddp__fail_errno(CDDP_SYSTEM, "doctor: cannot listen on %s", addr);
    goto fail;
  }
  struct sockaddr_storage sa;
  socklen_t len = sizeof sa;
  getsockname(fd, (struct sockaddr *)&sa, &len);
  s->port = ntohs(sa.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&sa)->sin6_port : ((struct sockaddr_in *)&sa)->sin_port);
  s->fd = fd, s->rank = rank, s->io_ms = io_timeout_ms, s->buf = buf;
  memset(buf, 0x5a, CHUNK);
  if (pthread_create(&s->thread, NULL, serve, s) != 0) {
    ret = cddp__fail(CDDP_SYSTEM, "doctor: cannot start the listener thread");
    goto fail;
  }
  freeaddrinfo(res);
  *out = s;
  return CDDP_OK;
fail:
  if (fd >= 0) close(fd);
  free(buf);
  free(s);
  freeaddrinfo(res);
  return ret;
}

int cddp__doc_server_port(const cddp__doc_server_t *s) { return s->port; }

void cddp__doc_server_stop(cddp__doc_server_t *s) {
  if (!s) return;
  __atomic_store_n(&s->stop, 1, __ATOMIC_RELEASE);
  pthread_join(s->thread, NULL);
  close(s->fd);
  free(s->buf);
  free(s);
}

/* ---- client ---- */

static cddp__doc_reach_t classify(int err) {
  switch (err) {
    case 0: return CDDP__REACH_OK;
    case ECONNREFUSED: return CDDP__REACH_REFUSED;
    case ETIMEDOUT: return CDDP__REACH_TIMEOUT;
    case EHOSTUNREACH: return CDDP__REACH_NOROUTE;
    case ENETUNREACH: return CDDP__REACH_NETUNREACH;
    default: return CDDP__REACH_OTHER;
  }
}

/* Non-blocking connect started; -1 with *r set when it failed at once. */
static int start_connect(const char *addr, int port, cddp__doc_reach_t *r) {
  struct addrinfo *res = resolve(addr, port);
  if (!res) return *r = CDDP__REACH_OTHER, -1;
  int fd = socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd >= 0 && connect(fd, res->ai_addr, res->ai_addrlen) != 0 && errno != EINPROGRESS) {
    *r = classify(errno);
    close(fd);
    fd = -1;
  }
  freeaddrinfo(res);
  return fd;
}

static int hello_exchange(int fd, int my_rank, int peer_rank) {
  hello_t h = {.rank = htonl((uint32_t)my_rank)}, back;
  memcpy(h.magic, MAGIC, 8);
  if (full(fd, &h, sizeof h, 1) || full(fd, &back, sizeof back, 0)) return -1;
  return memcmp(back.magic, MAGIC, 8) || (int)ntohl(back.rank) != peer_rank ? -2 : 0;
}

void cddp__doc_probe_all(int n, const char *const *addr, const int *port, const int *rank, int my_rank,
                         int timeout_ms, cddp__doc_reach_t *result) {
  int *fd = malloc((size_t)n * sizeof *fd);
  struct pollfd *p = malloc((size_t)n * sizeof *p);
  if (!fd || !p) {
    for (int i = 0; i < n; i++) result[i] = CDDP__REACH_OTHER;
    free(fd), free(p);
    return;
  }
  for (int i = 0; i < n; i++) {
    result[i] = CDDP__REACH_UNTRIED;
    fd[i] = start_connect(addr[i], port[i], &result[i]);
  }
  uint64_t deadline = cddp__deadline_ms(timeout_ms);
  for (;;) {
    int k = 0;
    for (int i = 0; i < n; i++)
      if (fd[i] >= 0 && result[i] == CDDP__REACH_UNTRIED) p[k++] = (struct pollfd){.fd = fd[i], .events = POLLOUT};
    int left = cddp__ms_left(deadline);
    if (k == 0 || left == 0) break;
    if (poll(p, (nfds_t)k, left) < 0 && errno != EINTR) break;
    for (int j = 0; j < k; j++) {
      if (!p[j].revents) continue;
      int i = 0;
      while (fd[i] != p[j].fd) i++;
      int err = 0;
      socklen_t len = sizeof err;
      getsockopt(fd[i], SOL_SOCKET, SO_ERROR, &err, &len);
      result[i] = classify(err);
      if (err == 0) result[i] = CDDP__REACH_OK;
    }
  }
  for (int i = 0; i < n; i++) {
    if (fd[i] < 0) continue;
    if (result[i] == CDDP__REACH_UNTRIED) result[i] = CDDP__REACH_TIMEOUT;
    if (result[i] == CDDP__REACH_OK) {
      int fl = fcntl(fd[i], F_GETFL);
      fcntl(fd[i], F_SETFL, fl & ~O_NONBLOCK);
      set_timeouts(fd[i], timeout_ms);
      int h = hello_exchange(fd[i], my_rank, rank[i]);
      if (h == -2 || (h == -1 && errno == 0)) result[i] = CDDP__REACH_WRONG_PEER;
      else if (h == -1) result[i] = errno == EAGAIN || errno == EWOULDBLOCK ? CDDP__REACH_TIMEOUT : classify(errno);
      else {
        op_t o = {.op = htonl(OP_DONE)};
        full(fd[i], &o, sizeof o, 1);
      }
    }
    close(fd[i]);
  }
  free(fd);
  free(p);
}

static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

void cddp__doc_measure(const char *addr, int port, int peer_rank, int my_rank, int iters, uint64_t bytes,
                       int timeout_ms, cddp__doc_meas_t *m) {
  memset(m, 0, sizeof *m);
  cddp__doc_reach_t r = CDDP__REACH_UNTRIED;
  int fd = start_connect(addr, port, &r);
  uint64_t *rtt = calloc((size_t)(iters > 0 ? iters : 1), sizeof *rtt);
  char *buf = malloc(CHUNK);
  const char *what = "connect";
  if (fd < 0 || !rtt || !buf) goto fail;
  struct pollfd p = {.fd = fd, .events = POLLOUT};
  int err = 0;
  socklen_t len = sizeof err;
  if (poll(&p, 1, timeout_ms) != 1 || getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) || err) {
    r = err ? classify(err) : CDDP__REACH_TIMEOUT;
    goto fail;
  }
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  set_timeouts(fd, timeout_ms);
  what = "handshake";
  if (hello_exchange(fd, my_rank, peer_rank)) goto fail;
  what = "ping-pong";
  op_t o = {.op = htonl(OP_PING), .count = htonl((uint32_t)iters)};
  if (full(fd, &o, sizeof o, 1)) goto fail;
  uint64_t best = UINT64_MAX;
  for (int i = 0; i < iters; i++) {
    uint64_t msg[2], t0 = real_ns(), m0 = cddp__now_ns();
    msg[0] = htobe64(t0);
    if (full(fd, msg, 8, 1) || full(fd, msg, 16, 0)) goto fail;
    uint64_t m1 = cddp__now_ns(), t3 = real_ns(), ts = be64toh(msg[1]);
    rtt[i] = m1 - m0;
    if (rtt[i] < best) {
      best = rtt[i];
      m->offset_ms = ((double)ts - ((double)t0 + (double)t3) / 2) / 1e6;
      m->offset_err_ms = (double)rtt[i] / 2e6;
    }
  }
  qsort(rtt, (size_t)iters, sizeof *rtt, cmp_u64);
  m->lat_us = iters > 0 ? (double)rtt[iters / 2] / 2e3 : 0;
  if (bytes > 0) {
    what = "sending bytes";
    memset(buf, 0xa5, CHUNK);
    o = (op_t){.op = htonl(OP_PUSH), .bytes = htobe64(bytes)};
    uint64_t t0 = cddp__now_ns();
    if (full(fd, &o, sizeof o, 1)) goto fail;
    for (uint64_t left = bytes; left > 0;) {
      size_t k = left < CHUNK ? (size_t)left : CHUNK;
      if (full(fd, buf, k, 1)) goto fail;
      left -= k;
    }
    char ack;
    if (full(fd, &ack, 1, 0)) goto fail;
    m->bw_to = (double)bytes * 8 / (double)(cddp__now_ns() - t0);
    what = "receiving bytes";
    o.op = htonl(OP_PULL);
    t0 = cddp__now_ns();
    if (full(fd, &o, sizeof o, 1)) goto fail;
    for (uint64_t left = bytes; left > 0;) {
      size_t k = left < CHUNK ? (size_t)left : CHUNK;
      if (full(fd, buf, k, 0)) goto fail;
      left -= k;
    }
    m->bw_from = (double)bytes * 8 / (double)(cddp__now_ns() - t0);
  }
  o = (op_t){.op = htonl(OP_DONE)};
  full(fd, &o, sizeof o, 1);
  m->ok = 1;
  close(fd);
  free(rtt), free(buf);
  return;
fail:;
  int e = errno;
  if (r != CDDP__REACH_UNTRIED && r != CDDP__REACH_OK) snprintf(m->err, sizeof m->err, "%s: %s", what, cddp__doc_reach_str(r));
  else if (e == EAGAIN || e == EWOULDBLOCK) snprintf(m->err, sizeof m->err, "%s: no answer within %d ms", what, timeout_ms);
  else snprintf(m->err, sizeof m->err, "%s: %s", what, e ? strerror(e) : "peer closed the connection");
  if (fd >= 0) close(fd);
  free(rtt), free(buf);
}
