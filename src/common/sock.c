/* sock.c - the one network module: resolve, listen, connect with a timeout, options, write_all /
 * read_all, each failure one line naming host:port (see sock.h). */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/time.h>
#include <unistd.h>

#include "common/check.h"
#include "common/clock.h"
#include "common/sock.h"

/* ---- addresses ---- */

const char *cddp__sockaddr_ip(const struct sockaddr *sa, char *buf, size_t size) {
  const void *a = sa->sa_family == AF_INET6 ? (const void *)&((const struct sockaddr_in6 *)sa)->sin6_addr
                                            : (const void *)&((const struct sockaddr_in *)sa)->sin_addr;
  if ((sa->sa_family != AF_INET && sa->sa_family != AF_INET6) || !inet_ntop(sa->sa_family, a, buf, (socklen_t)size))
    snprintf(buf, size, "?");
  return buf;
}

int cddp__sockaddr_port(const struct sockaddr *sa) {
  if (sa->sa_family == AF_INET6) return ntohs(((const struct sockaddr_in6 *)sa)->sin6_port);
  if (sa->sa_family == AF_INET) return ntohs(((const struct sockaddr_in *)sa)->sin_port);
  return 0;
}

void cddp__sockaddr_set_port(struct sockaddr_storage *sa, int port) {
  if (sa->ss_family == AF_INET6) ((struct sockaddr_in6 *)sa)->sin6_port = htons((uint16_t)port);
  else if (sa->ss_family == AF_INET) ((struct sockaddr_in *)sa)->sin_port = htons((uint16_t)port);
}

const char *cddp__sockaddr_text(const struct sockaddr *sa, char *buf, size_t size) {
  char ip[INET6_ADDRSTRLEN];
  cddp__sockaddr_ip(sa, ip, sizeof ip);
  snprintf(buf, size, sa->sa_family == AF_INET6 ? "[%s]:%d" : "%s:%d", ip, cddp__sockaddr_port(sa));
  return buf;
}

/* The peer of a connected socket as text, for error lines ("socket N" when it has none). */
static const char *peer_text(int fd, char *buf, size_t size) {
  struct sockaddr_storage ss;
  socklen_t len = sizeof ss;
  if (getpeername(fd, (struct sockaddr *)&ss, &len) != 0 || (ss.ss_family != AF_INET && ss.ss_family != AF_INET6))
    snprintf(buf, size, "socket %d", fd);
  else cddp__sockaddr_text((struct sockaddr *)&ss, buf, size);
  return buf;
}

/* ---- resolve ---- */

/* getaddrinfo, numeric first; returns its code (0 on success). */
static int lookup(const char *host, int port, int flags, struct addrinfo **res) {
  struct addrinfo hints = {.ai_family = host ? AF_UNSPEC : AF_INET,
                           .ai_socktype = flags & CDDP__SOCK_DGRAM ? SOCK_DGRAM : SOCK_STREAM,
                           .ai_flags = AI_NUMERICSERV | AI_NUMERICHOST | (flags & CDDP__SOCK_PASSIVE ? AI_PASSIVE : 0)};
  char ps[16];
  snprintf(ps, sizeof ps, "%d", port);
  *res = NULL;
  int gai = getaddrinfo(host, ps, &hints, res);
  if (gai == EAI_NONAME && host && !(flags & CDDP__SOCK_NUMERIC)) {
    hints.ai_flags &= ~AI_NUMERICHOST; /* a name: the user gave it, so it must resolve anyway */
    gai = getaddrinfo(host, ps, &hints, res);
  }
  if (gai != 0) *res = NULL;
  return gai;
}

/* Does this getaddrinfo code say the name does not exist (no point in asking again)? */
static int gai_final(int gai) {
  return gai == EAI_NONAME || gai == EAI_FAIL
#ifdef EAI_NODATA
         || gai == EAI_NODATA
#endif
      ;
}

static cddp_result_t unresolved(const char *host, int gai) {
  return cddp__fail(gai_final(gai) ? CDDP_NOT_FOUND : CDDP_SYSTEM, "cannot resolve host '%s': %s",
                    host ? host : "0.0.0.0", gai_strerror(gai));
}

cddp_result_t cddp__sock_resolve(const char *host, int port, int flags, struct addrinfo **res) {
  int gai = lookup(host, port, flags, res);
  return gai == 0 ? CDDP_OK : unresolved(host, gai);
}

cddp_result_t cddp__sock_host_resolves(const char *host, const char *from) {
  struct addrinfo *res = NULL;
  int gai = lookup(host, 0, 0, &res);
  if (res) freeaddrinfo(res);
  if (gai_final(gai))
    return cddp__fail(CDDP_NOT_FOUND, "cannot resolve host '%s' (from %s): %s", host, from && *from ? from : "?",
                      gai_strerror(gai));
  return CDDP_OK;
}

/* ---- sockets, listen, accept ---- */

static int open_fd(int family, int flags) {
  return socket(family,
                (flags & CDDP__SOCK_DGRAM ? SOCK_DGRAM : SOCK_STREAM) | SOCK_CLOEXEC |
                    (flags & CDDP__SOCK_NONBLOCK ? SOCK_NONBLOCK : 0),
                0);
}

cddp_result_t cddp__sock_socket(int family, int flags, int *fd) {
  *fd = open_fd(family, flags);
  return *fd < 0 ? cddp__fail_errno(CDDP_SYSTEM, "socket") : CDDP_OK;
}

/* bind (+ listen), quietly: 0, or -1 with errno and *stage naming the call that failed. */
static int bind_listen(int fd, const struct sockaddr *sa, socklen_t len, int flags, int backlog, int *port,
                       const char **stage) {
  int one = 1;
  *stage = "bind";
  if (flags & CDDP__SOCK_REUSEADDR) (void)setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (bind(fd, sa, len) != 0) return -1;
  *stage = "listen on";
  if (backlog >= 0 && listen(fd, backlog) != 0) return -1;
  if (port) {
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    *stage = "getsockname of";
    if (getsockname(fd, (struct sockaddr *)&ss, &sl) != 0) return -1;
    *port = cddp__sockaddr_port((struct sockaddr *)&ss);
  }
  return 0;
}

cddp_result_t cddp__sock_listen(int fd, const struct sockaddr *sa, socklen_t len, int flags, int backlog,
                                int *port) {
  const char *stage;
  if (bind_listen(fd, sa, len, flags, backlog, port, &stage) == 0) return CDDP_OK;
  char at[INET6_ADDRSTRLEN + 16];
  return cddp__fail_errno(CDDP_SYSTEM, "%s %s", stage, cddp__sockaddr_text(sa, at, sizeof at));
}

int cddp__sock_accept(int lfd, int flags, struct sockaddr_storage *from) {
  socklen_t len = sizeof *from;
  return accept4(lfd, (struct sockaddr *)from, from ? &len : NULL,
                 SOCK_CLOEXEC | (flags & CDDP__SOCK_NONBLOCK ? SOCK_NONBLOCK : 0));
}

/* ---- connect ---- */

cddp_result_t cddp__sock_connect_start(int fd, const struct sockaddr *sa, socklen_t len) {
  if (connect(fd, sa, len) == 0 || errno == EINPROGRESS) return CDDP_OK;
  char at[INET6_ADDRSTRLEN + 16];
  return cddp__fail_errno(CDDP_REMOTE, "connect to %s", cddp__sockaddr_text(sa, at, sizeof at));
}

static int self_connected(int fd) {
  struct sockaddr_storage me, peer;
  socklen_t ml = sizeof me, pl = sizeof peer;
  if (getsockname(fd, (struct sockaddr *)&me, &ml) != 0 || getpeername(fd, (struct sockaddr *)&peer, &pl) != 0)
    return 0;
  return ml == pl && memcmp(&me, &peer, ml) == 0;
}

int cddp__sock_connect_error(int fd) {
  int err = 0;
  socklen_t el = sizeof err;
  if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el) != 0) err = errno;
  if (!err && self_connected(fd)) err = ECONNREFUSED;
  return err;
}

/* Waits for events on fd until deadline. 1 ready, 0 timed out. A failing poll counts as
 * ready: the next call on fd reports the error. */
static int wait_fd(int fd, short events, uint64_t deadline) {
  for (;;) {
    struct pollfd p = {.fd = fd, .events = events};
    int r = poll(&p, 1, cddp__ms_left(deadline));
    if (r > 0) return 1;
    if (r == 0) return 0;
    if (errno != EINTR) return 1;
  }
}

cddp_result_t cddp__sock_connect_wait(int fd, const struct sockaddr *sa, socklen_t len, uint64_t deadline) {
  CDDP_CHECK(cddp__sock_connect_start(fd, sa, len));
  int err = wait_fd(fd, POLLOUT, deadline) ? cddp__sock_connect_error(fd) : ETIMEDOUT;
  if (!err) return CDDP_OK;
  char at[INET6_ADDRSTRLEN + 16];
  errno = err;
  return cddp__fail_errno(err == ETIMEDOUT ? CDDP_TIMEOUT : CDDP_REMOTE, "connect to %s",
                          cddp__sockaddr_text(sa, at, sizeof at));
}

cddp_result_t cddp__sock_connect(const char *host, int port, int flags, uint64_t deadline, int *fd) {
  struct addrinfo *res = NULL;
  *fd = -1;
  CDDP_CHECK(cddp__sock_resolve(host, port, flags & CDDP__SOCK_NUMERIC, &res));
  cddp_result_t r = CDDP_SYSTEM;
  for (struct addrinfo *a = res; a && *fd < 0; a = a->ai_next) {
    int s;
    if ((r = cddp__sock_socket(a->ai_family, CDDP__SOCK_NONBLOCK, &s)) != CDDP_OK) continue;
    if ((r = cddp__sock_connect_wait(s, a->ai_addr, a->ai_addrlen, deadline)) != CDDP_OK) {
      int e = errno;
      close(s);
      errno = e;
      continue;
    }
    if (!(flags & CDDP__SOCK_NONBLOCK)) cddp__sock_nonblock(s, 0);
    *fd = s;
  }
  int e = errno;
  freeaddrinfo(res);
  errno = e;
  return r;
}

/* The source address toward host:port, quietly: 0; or -1 with *gai set when host does not
 * resolve, else with errno. */
static int route(const char *host, int port, struct sockaddr_storage *src, int *gai) {
  struct addrinfo *res = NULL;
  if ((*gai = lookup(host, port, CDDP__SOCK_DGRAM, &res)) != 0) return -1;
  int err = ENETUNREACH;
  for (struct addrinfo *a = res; a && err; a = a->ai_next) {
    int fd = open_fd(a->ai_family, CDDP__SOCK_DGRAM);
    socklen_t len = sizeof *src;
    if (fd < 0) continue;
    /* connect() on UDP only picks the route and source address: nothing is sent */
    err = connect(fd, a->ai_addr, a->ai_addrlen) == 0 && getsockname(fd, (struct sockaddr *)src, &len) == 0 ? 0 : errno;
    close(fd);
  }
  freeaddrinfo(res);
  errno = err;
  return err ? -1 : 0;
}

cddp_result_t cddp__sock_route_src(const char *host, int port, struct sockaddr_storage *src) {
  int gai;
  if (route(host, port, src, &gai) == 0) return CDDP_OK;
  if (gai) return unresolved(host, gai);
  return cddp__fail_errno(CDDP_REMOTE, "no route to %s:%d", host, port);
}

/* ---- I/O ---- */

/* EAGAIN from a send or recv: a non-blocking fd waits for readiness until deadline (1 when
 * ready; 0 at the deadline, errno ETIMEDOUT); a blocking one met its SO_SNDTIMEO /
 * SO_RCVTIMEO (0, errno left EAGAIN). */
static int again(int fd, short events, uint64_t deadline) {
  int fl = fcntl(fd, F_GETFL);
  if (fl < 0 || !(fl & O_NONBLOCK)) return errno = EAGAIN, 0;
  if (wait_fd(fd, events, deadline)) return 1;
  errno = ETIMEDOUT;
  return 0;
}

/* Records why a send or recv stopped: timed_out (our wait ended), errno 0 (end of stream), or
 * the system's error. errno is kept. */
static cddp_result_t io_fail(int fd, int reading, int timed_out) {
  char at[INET6_ADDRSTRLEN + 16];
  int e = errno;
  peer_text(fd, at, sizeof at);
  errno = e;
  const char *what = reading ? "recv from" : "send to";
  if (timed_out) return cddp__fail(CDDP_TIMEOUT, "%s %s: timed out", what, at);
  if (e == 0) return cddp__fail(CDDP_REMOTE, "%s %s: closed by the peer", what, at);
  return cddp__fail_errno(CDDP_REMOTE, "%s %s", what, at);
}

cddp_result_t cddp__sock_write_all(int fd, const void *buf, size_t n, uint64_t deadline) {
  const char *p = buf;
  while (n > 0) {
    ssize_t k = send(fd, p, n, MSG_NOSIGNAL);
    if (k >= 0) {
      p += k, n -= (size_t)k;
      continue;
    }
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) return io_fail(fd, 0, 0);
    if (!again(fd, POLLOUT, deadline)) return io_fail(fd, 0, 1);
  }
  return CDDP_OK;
}

cddp_result_t cddp__sock_read_all(int fd, void *buf, size_t n, uint64_t deadline) {
  char *p = buf;
  while (n > 0) {
    ssize_t k = recv(fd, p, n, 0);
    if (k > 0) {
      p += k, n -= (size_t)k;
      continue;
    }
    if (k == 0) errno = 0;
    else if (errno == EINTR) continue;
    if (k == 0 || (errno != EAGAIN && errno != EWOULDBLOCK)) return io_fail(fd, 1, 0);
    if (!again(fd, POLLIN, deadline)) return io_fail(fd, 1, 1);
  }
  return CDDP_OK;
}

/* ---- options ---- */

void cddp__sock_nodelay(int fd) {
  int one = 1;
  (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

void cddp__sock_buffers(int fd, int bytes) {
  if (bytes <= 0) return;
  (void)setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &bytes, sizeof bytes);
  (void)setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &bytes, sizeof bytes);
}

int cddp__sock_congestion(int fd, const char *cc) {
  return setsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, cc, (socklen_t)strlen(cc)) == 0 ? 0 : -1;
}

void cddp__sock_keepalive(int fd, int idle_s, int intvl_s, int cnt, int user_timeout_ms) {
  int one = 1;
  (void)setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
  (void)setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle_s, sizeof idle_s);
  (void)setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl_s, sizeof intvl_s);
  (void)setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof cnt);
  if (user_timeout_ms > 0)
    (void)setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &user_timeout_ms, sizeof user_timeout_ms);
}

void cddp__sock_timeouts(int fd, int ms) {
  struct timeval tv = {.tv_sec = ms / 1000, .tv_usec = (ms % 1000) * 1000};
  (void)setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  (void)setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
}

void cddp__sock_nonblock(int fd, int on) {
  int fl = fcntl(fd, F_GETFL);
  if (fl >= 0) (void)fcntl(fd, F_SETFL, on ? fl | O_NONBLOCK : fl & ~O_NONBLOCK);
}

/* ---- the launcher's questions: quiet (no error line), as predicates ---- */

int cddp__sock_host_is_local(const char *host) {
  struct addrinfo *res = NULL;
  lookup(host, 0, 0, &res);
  int local = 0;
  for (struct addrinfo *a = res; a && !local; a = a->ai_next) {
    int fd = open_fd(a->ai_family, 0);
    const char *stage;
    if (fd < 0) continue;
    local = bind_listen(fd, a->ai_addr, a->ai_addrlen, 0, -1, NULL, &stage) == 0;
    close(fd);
  }
  if (res) freeaddrinfo(res);
  return local;
}

int cddp__sock_host_is_loopback(const char *host) {
  struct in_addr a4;
  struct in6_addr a6;
  if (host && inet_pton(AF_INET, host, &a4) == 1) return (ntohl(a4.s_addr) >> 24) == 127;
  return host && inet_pton(AF_INET6, host, &a6) == 1 && IN6_IS_ADDR_LOOPBACK(&a6);
}

static int sa_is_loopback(const struct sockaddr *sa) {
  if (sa->sa_family == AF_INET) return ntohl(((const struct sockaddr_in *)sa)->sin_addr.s_addr) >> 24 == 127;
  return sa->sa_family == AF_INET6 && IN6_IS_ADDR_LOOPBACK(&((const struct sockaddr_in6 *)sa)->sin6_addr);
}

int cddp__sock_listen_addr_for(const char *host, char *out, size_t size, char *why, size_t wsize) {
  out[0] = why[0] = '\0';
  if (!host || !*host || !strcmp(host, "0.0.0.0") || !strcmp(host, "::")) return 0;
  struct addrinfo *res = NULL;
  lookup(host, 0, 0, &res);
  char first[INET6_ADDRSTRLEN] = "", v4[INET6_ADDRSTRLEN] = "", t[INET6_ADDRSTRLEN];
  int n = 0, loopback = 0;
  for (struct addrinfo *a = res; a; a = a->ai_next) { /* distinct addresses: a name may repeat one */
    cddp__sockaddr_ip(a->ai_addr, t, sizeof t);
    if (n == 0) snprintf(first, sizeof first, "%s", t);
    else if (!strcmp(first, t)) continue;
    if (!v4[0] && a->ai_family == AF_INET) snprintf(v4, sizeof v4, "%s", t);
    n++;
    loopback += sa_is_loopback(a->ai_addr);
  }
  /* localhost as most hosts list it, 127.0.0.1 and ::1: the IPv4 one (clients try each address) */
  if (n > 1 && loopback == n && !strcmp(host, "localhost") && v4[0]) snprintf(first, sizeof first, "%s", v4), n = 1;
  int local = n == 1 && cddp__sock_host_is_local(first);
  if (res) freeaddrinfo(res);
  struct in_addr a4;
  struct in6_addr a6;
  int numeric = inet_pton(AF_INET, host, &a4) == 1 || inet_pton(AF_INET6, host, &a6) == 1;
  if (n == 0)
    snprintf(why, wsize, "%s does not resolve here", host);
  else if (n > 1)
    snprintf(why, wsize, "%s resolves to %d addresses (%s, ...)", host, n, first);
  else if (loopback && !numeric && strcmp(host, "localhost"))
    /* Debian's /etc/hosts names the host 127.0.1.1: its own name must not hide it from the others */
    snprintf(why, wsize, "%s resolves to %s, a loopback address (/etc/hosts), which the other nodes cannot reach",
             host, first);
  else if (!local)
    snprintf(why, wsize, "%s (%s) is no address of this host", host, first);
  else
    snprintf(out, size, "%s", first);
  return out[0] != '\0';
}

/* Binds an IPv4 wildcard socket to port: 0 with *port the port bound, or -1 with errno. */
static int bind_any4(int port, int flags, int *bound) {
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port), .sin_addr.s_addr = htonl(INADDR_ANY)};
  const char *stage;
  int fd = open_fd(AF_INET, 0);
  if (fd < 0) return -1;
  int r = bind_listen(fd, (struct sockaddr *)&a, sizeof a, flags, -1, bound, &stage);
  int e = errno;
  close(fd);
  errno = e;
  return r;
}

int cddp__sock_port_in_use(int port) {
  int bound;
  return bind_any4(port, CDDP__SOCK_REUSEADDR, &bound) != 0 && errno == EADDRINUSE;
}

int cddp__sock_knock(const char *host, int port, int ms) {
  int fd = -1;
  errno = 0;
  cddp_result_t r = cddp__sock_connect(host, port, 0, cddp__deadline_ms(ms), &fd);
  int why = errno;
  if (r == CDDP_OK) close(fd);
  cddp__clear_error();
  return r == CDDP_OK ? 1 : why == ECONNREFUSED ? 0 : -1;
}

int cddp__sock_free_port(void) {
  int port = 0;
  return bind_any4(0, 0, &port) == 0 ? port : 0;
}

void cddp__sock_addr_toward(const char *host, int port, char *buf, size_t size) {
  struct sockaddr_storage me;
  int gai;
  if (route(host, port ? port : 9, &me, &gai) == 0) cddp__sockaddr_ip((struct sockaddr *)&me, buf, size);
  else snprintf(buf, size, "127.0.0.1");
}
