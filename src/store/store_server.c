/* store_server.c - the TCP store server: one epoll loop on a background thread, non-blocking
 * sockets, per-connection buffers, server-side timers for parked waits. */
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/check.h"
#include "common/clock.h"
#include "common/knobs.h"
#include "common/sock.h"
#include "store/server_core.h"

typedef struct sconn {
  cddp__srv_conn_t c; /* first: the engine's ready list hands these back */
  int fd;
  uint32_t events; /* current epoll interest */
  int dead;
  uint64_t accepted_ns;
  struct sconn *prev, *next;
  struct sconn *dnext;
} sconn_t;

struct cddp_store_server {
  int lfd, epfd, evfd, spare_fd;
  int port;
  pthread_t thread;
  cddp__srv_core_t core;
  sconn_t *conns, *tail; /* every live connection, oldest first */
  sconn_t *dead;         /* closed during this batch; freed after it */
  int nconns;
  int handshake_ms;     /* a client must authenticate within this */
  uint64_t next_sweep;  /* when to look for clients stuck in the handshake */
  /* at the open-file limit: what was shed since the last warning, and when the next may come */
  unsigned long long shed_dropped, shed_refused;
  uint64_t next_limit_warn;
};

#define LIMIT_WARN_NS (10 * 1000000000ull) /* one warning per 10 s of a descriptor flood */
/* Work per pass of the loop, so that a flood's burst of connections (or of expiries) is taken in
 * slices between which the job's clients are served (nginx's and Redis's accept bounds): */
#define ACCEPTS_PER_PASS 64
#define SWEEP_PER_PASS 256

static void conn_close(cddp_store_server_t *srv, sconn_t *sc, const char *why) {
  if (sc->dead) return;
  CDDP_INFO(CDDP_SUB_STORE, "store: %s disconnected (%s)", sc->c.addr, why);
  /* explicit DEL: a forked child may hold a copy of fd, and then close() alone would
   * leave it in the epoll set, reporting events for a freed conn */
  epoll_ctl(srv->epfd, EPOLL_CTL_DEL, sc->fd, NULL);
  close(sc->fd);
  if (strcmp(why, "server stopping")) cddp__conn_gone(&srv->core, &sc->c); /* its will, if any */
  cddp__conn_release(&srv->core, &sc->c);
  if (sc->prev) sc->prev->next = sc->next;
  else srv->conns = sc->next;
  if (sc->next) sc->next->prev = sc->prev;
  else srv->tail = sc->prev;
  sc->dead = 1;
  sc->dnext = srv->dead;
  srv->dead = sc;
  srv->nconns--;
}

void cddp__store_server_set_handshake_ms(cddp_store_server_t *srv, int ms) {
  __atomic_store_n(&srv->handshake_ms, ms, __ATOMIC_RELAXED);
}

/* A connection that has not shown it belongs to the job: with a token, one that has not
 * authenticated; without one, one that has sent nothing past its HELLO (our client sends a
 * request at once, so only a stranger's connection stays like this). */
static int unproven(const cddp_store_server_t *srv, const sconn_t *sc) {
  return sc->c.state != CDDP__CONN_READY || (!srv->core.token && !sc->c.requested);
}

static int host_cmp(const void *a, const void *b) { return strcmp(a, b); }

/* A connection's address without its port ("[::1]:5" -> "[::1]"). */
static void host_of(const char *addr, char *out, size_t size) {
  snprintf(out, size, "%s", addr);
  char *port = strrchr(out, ':');
  if (port) *port = '\0';
}

/* The hosts (an address without its port) of the proven torch 1.x clients, sorted; NULL when
 * there are none or no memory (then no connection is taken for a torch client's second). */
static char (*torch1_hosts(const cddp_store_server_t *srv, size_t *n))[80] {
  char(*h)[80] = NULL;
  size_t cap = 0;
  *n = 0;
  for (const sconn_t *sc = srv->conns; sc; sc = sc->next) {
    if (sc->c.proto != CDDP__PROTO_TORCH1 || !sc->c.requested) continue;
    if (*n == cap) {
      char(*g)[80] = realloc(h, (cap = cap ? 2 * cap : 16) * sizeof *h);
      if (!g) break;
      h = g;
    }
    host_of(sc->c.addr, h[*n], sizeof h[*n]);
    (*n)++;
  }
  if (*n) qsort(h, *n, sizeof *h, host_cmp);
  return h;
}

/* torch 1.x opens a second connection beside its client's, for watchKey's callbacks, and never
 * writes on it. Dropped, torch's listener thread spins on the closed socket for the rest of the
 * run (a core's worth of CPU per rank, and the watchdog takes the rank for busy): a connection
 * that sent nothing, from a host whose torch 1.x client has proven itself, is that one. */
static int torch1_second(const sconn_t *sc, char (*hosts)[80], size_t n) {
  if (sc->c.proto != CDDP__PROTO_UNKNOWN || sc->c.in.len != 0 || !n) return 0;
  char host[80];
  host_of(sc->c.addr, host, sizeof host);
  return bsearch(host, hosts, n, sizeof *hosts, host_cmp) != NULL;
}

/* Closes unproven connections older than the handshake time (slow or idle peers must not pin
 * file descriptors), but for a torch 1.x client's second (torch1_second). Runs every
 * handshake_ms / 4, at most 1 s apart. */
static void sweep(cddp_store_server_t *srv, uint64_t now) {
  if (now < srv->next_sweep) return;
  uint64_t limit = (uint64_t)__atomic_load_n(&srv->handshake_ms, __ATOMIC_RELAXED) * 1000000ull;
  srv->next_sweep = now + CDDP_MIN(limit / 4, 1000000000ull);
  int closed = 0, listed = 0;
  size_t nhosts = 0;
  char(*hosts)[80] = NULL;
  /* oldest first: the walk ends at the first connection young enough, so it costs what it drops */
  for (sconn_t *sc = srv->conns, *next; sc && now - sc->accepted_ns > limit; sc = next) {
    next = sc->next;
    if (!unproven(srv, sc)) continue;
    if (srv->core.torch && sc->c.proto == CDDP__PROTO_UNKNOWN && !listed) /* once a pass, when needed */
      hosts = torch1_hosts(srv, &nhosts), listed = 1;
    if (torch1_second(sc, hosts, nhosts)) continue;
    if (closed++ == SWEEP_PER_PASS) {
      srv->next_sweep = now; /* the rest on the next pass, after the ready clients */
      break;
    }
    conn_close(srv, sc, "no handshake in time");
  }
  free(hosts);
}

/* One WARN per LIMIT_WARN_NS however hard the flood: it counts what was shed meanwhile. */
static void note_limit(cddp_store_server_t *srv, int dropped) {
  if (dropped) srv->shed_dropped++;
  else srv->shed_refused++;
  uint64_t now = cddp__now_ns();
  if (now < srv->next_limit_warn) return;
  CDDP_WARN("store: at the open-file limit with %d connections: %llu unauthenticated dropped, "
            "%llu clients refused since the last report (raise `ulimit -n`, or a stranger floods "
            "the port)", srv->nconns, srv->shed_dropped, srv->shed_refused);
  srv->shed_dropped = srv->shed_refused = 0;
  srv->next_limit_warn = now + LIMIT_WARN_NS;
}

/* accept() failed with EMFILE/ENFILE. The spare descriptor makes room to take the waiting
 * client; the oldest unproven connection then gives its descriptor back, or, when every
 * connection belongs to the job, the new client is refused. Returns the client's descriptor,
 * or -1 (errno EAGAIN: nobody waits or the client was refused) so the caller never spins. */
static int accept_at_limit(cddp_store_server_t *srv, struct sockaddr_storage *ss) {
  if (srv->spare_fd < 0) {
    note_limit(srv, 0);
    errno = EAGAIN;
    return -1;
  }
  close(srv->spare_fd);
  int fd = cddp__sock_accept(srv->lfd, CDDP__SOCK_NONBLOCK, ss);
  int err = errno;
  if (fd >= 0) {
    sconn_t *old = srv->conns;
    while (old && !unproven(srv, old)) old = old->next;
    if (old) conn_close(srv, old, "dropped at the open-file limit");
    else close(fd), fd = -1;
    note_limit(srv, old != NULL);
    err = EAGAIN;
  }
  srv->spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
  errno = err == EMFILE || err == ENFILE ? EAGAIN : err;
  return fd;
}

/* Sends what it can. -1 on a broken connection. */
static int flush_out(sconn_t *sc) {
  cddp__wire_buf_t *o = &sc->c.out;
  while (o->off < o->len) {
    ssize_t n = send(sc->fd, o->p + o->off, o->len - o->off, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return 0;
    if (n < 0) return -1;
    o->off += (size_t)n;
  }
  o->off = o->len = 0;
  return 0;
}

/* Runs the engine on sc's input, sends, and sets the epoll interest to match. */
static void service(cddp_store_server_t *srv, sconn_t *sc, int eof) {
  if (sc->dead) return;
  if (cddp__core_process(&srv->core, &sc->c) != 0) {
    conn_close(srv, sc, "protocol error");
    return;
  }
  if (flush_out(sc) != 0) {
    conn_close(srv, sc, "send failed");
    return;
  }
  size_t pending = sc->c.out.len - sc->c.out.off;
  if (unproven(srv, sc)) { /* a stranger's idle connection keeps no buffers: 20,000 of them cost little */
    if (sc->c.in.len == 0) cddp__wire_buf_free(&sc->c.in);
    if (pending == 0) cddp__wire_buf_free(&sc->c.out);
  }
  if (eof) {
    conn_close(srv, sc, "closed by peer");
    return;
  }
  if (sc->c.closing && pending == 0) {
    conn_close(srv, sc, "refused");
    return;
  }
  uint32_t ev = EPOLLRDHUP;
  /* a parked torch client is read on: its CANCEL_WAIT must reach the engine */
  int parked = sc->c.parked && sc->c.proto == CDDP__PROTO_CDDP;
  if (!parked && !sc->c.closing && pending < CDDP__SRV_OUT_HIGH) ev |= EPOLLIN;
  if (pending) ev |= EPOLLOUT;
  if (ev != sc->events) {
    struct epoll_event e = {.events = ev, .data.ptr = sc};
    if (epoll_ctl(srv->epfd, EPOLL_CTL_MOD, sc->fd, &e) == 0) sc->events = ev;
  }
}

/* Reads everything available. Returns 1 at end of stream or on an error. */
static int read_in(sconn_t *sc) {
  cddp__wire_buf_t *in = &sc->c.in;
  for (;;) {
    if (cddp__wire_reserve(in, in->len < 65536 ? 4096 : 65536) != 0) return 1;
    ssize_t n = recv(sc->fd, in->p + in->len, in->cap - in->len, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return 0;
    if (n <= 0) return 1;
    in->len += (size_t)n;
    /* bound the bytes held per pass: a complete frame is processed before reading on */
    if (in->len - in->off > CDDP__WIRE_MAX_LEN + CDDP__WIRE_HDR) return 0;
  }
}

static void on_accept(cddp_store_server_t *srv) {
  for (int taken = 0; taken < ACCEPTS_PER_PASS; taken++) { /* the listener stays readable: more next pass */
    struct sockaddr_storage ss;
    int fd = cddp__sock_accept(srv->lfd, CDDP__SOCK_NONBLOCK, &ss);
    if (fd < 0 && (errno == EMFILE || errno == ENFILE)) fd = accept_at_limit(srv, &ss);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      return; /* EAGAIN: nobody else waits */
    }
    cddp__sock_nodelay(fd);
    /* a peer whose host vanished is found by probes, so its will fires (~25 s) */
    cddp__sock_keepalive(fd, 10, 5, 3, 0);
    sconn_t *sc = calloc(1, sizeof *sc);
    if (!sc) {
      close(fd);
      CDDP_WARN("store: out of memory accepting a client");
      continue;
    }
    char addr[80];
    cddp__sockaddr_text((struct sockaddr *)&ss, addr, sizeof addr);
    cddp__conn_init(&sc->c, addr);
    sc->fd = fd;
    sc->accepted_ns = cddp__now_ns();
    sc->events = EPOLLIN | EPOLLRDHUP;
    struct epoll_event e = {.events = sc->events, .data.ptr = sc};
    if (epoll_ctl(srv->epfd, EPOLL_CTL_ADD, fd, &e) != 0) {
      close(fd);
      free(sc);
      continue;
    }
    sc->prev = srv->tail; /* oldest first: the flood sheds from the head */
    if (srv->tail) srv->tail->next = sc;
    else srv->conns = sc;
    srv->tail = sc;
    srv->nconns++;
    CDDP_INFO(CDDP_SUB_STORE, "store: connection from %s (%d open)", addr, srv->nconns);
  }
}

static void *loop(void *arg) {
  cddp_store_server_t *srv = arg;
  struct epoll_event evs[256];
  for (;;) {
    uint64_t next = cddp__core_next_deadline(&srv->core);
    if (srv->conns) next = CDDP_MIN(next, srv->next_sweep);
    int timeout = next == UINT64_MAX ? -1 : cddp__ms_left(next);
    int n = epoll_wait(srv->epfd, evs, (int)CDDP_ARRAY_LEN(evs), timeout);
    if (n < 0 && errno != EINTR) {
      CDDP_WARN("store: epoll_wait failed: %s; server stops", strerror(errno));
      break;
    }
    int stop = 0;
    for (int i = 0; i < n; i++) {
      void *p = evs[i].data.ptr;
      if (p == &srv->evfd) {
        stop = 1;
      } else if (p == &srv->lfd) {
        on_accept(srv);
      } else {
        sconn_t *sc = p;
        uint32_t e = evs[i].events;
        if (sc->dead) continue;
        if (e & EPOLLERR) {
          conn_close(srv, sc, "socket error");
          continue;
        }
        int eof = 0;
        if (e & EPOLLIN) eof = read_in(sc);
        else if (e & (EPOLLRDHUP | EPOLLHUP)) eof = 1; /* parked or backed up: peer left */
        service(srv, sc, eof);
      }
    }
    if (stop) break;
    uint64_t now = cddp__now_ns();
    cddp__core_expire(&srv->core, now);
    sweep(srv, now);
    cddp__srv_conn_t *c;
    while ((c = cddp__core_pop_ready(&srv->core))) service(srv, (sconn_t *)c, 0);
    while (srv->dead) {
      sconn_t *d = srv->dead;
      srv->dead = d->dnext;
      free(d);
    }
  }
  return NULL;
}

/* An agent holds 3 connections at its store (its own, its watcher's, its status poster's;
 * test_store_conns), and a worker may hold one: what the open-file limit leaves room for. */
#define CONNS_PER_AGENT 4

static void raise_fd_limit(void) {
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0) return;
  if (rl.rlim_cur < rl.rlim_max) {
    rlim_t want = rl.rlim_max;
    rl.rlim_cur = want;
    if (setrlimit(RLIMIT_NOFILE, &rl) != 0)
      CDDP_INFO(CDDP_SUB_STORE, "store: cannot raise the open-file limit: %s", strerror(errno));
    getrlimit(RLIMIT_NOFILE, &rl);
  }
  CDDP_INFO(CDDP_SUB_STORE, "store: open-file limit %llu: room for about %llu agents (raise the hard limit, "
            "ulimit -Hn, for more)", (unsigned long long)rl.rlim_cur,
            (unsigned long long)(rl.rlim_cur > 64 ? (rl.rlim_cur - 64) / CONNS_PER_AGENT : 0));
}

static cddp_result_t bind_listener(cddp_store_server_t *srv, const char *host, int port) {
  struct addrinfo *res = NULL;
  if (cddp__sock_resolve(host, port, CDDP__SOCK_PASSIVE, &res) != CDDP_OK)
    return cddp__fail_ctx(CDDP_INVALID_ARG, "store server");
  int fd = -1;
  cddp_result_t r = cddp__sock_socket(res->ai_family, CDDP__SOCK_NONBLOCK, &fd);
  if (r == CDDP_OK) r = cddp__sock_listen(fd, res->ai_addr, res->ai_addrlen, CDDP__SOCK_REUSEADDR, 4096, &srv->port);
  if (r != CDDP_OK && errno == EADDRINUSE)
    r = cddp__fail(CDDP_SYSTEM, "port %d is in use (another store or program listens on %s:%d)", port,
                   host ? host : "0.0.0.0", port);
  else if (r != CDDP_OK)
    r = cddp__fail_ctx(CDDP_SYSTEM, "store server");
  freeaddrinfo(res);
  if (r != CDDP_OK) {
    if (fd >= 0) close(fd);
    return r;
  }
  srv->lfd = fd;
  return CDDP_OK;
}

static cddp_result_t start(cddp_store_server_t **out, const char *host, int port, const char *token, int torch,
                           const char *torch_round_key) {
  if (!out) return cddp__fail(CDDP_INVALID_ARG, "store server: NULL output");
  *out = NULL;
  if (port < 0 || port > 65535) return cddp__fail(CDDP_INVALID_ARG, "store server: bad port %d", port);
  if (host && !*host) host = NULL;
  raise_fd_limit();
  cddp_store_server_t *srv = calloc(1, sizeof *srv);
  if (!srv) return cddp__fail(CDDP_SYSTEM, "store server: out of memory");
  srv->lfd = srv->epfd = srv->evfd = srv->spare_fd = -1;
  int64_t hello_ms = cddp__knob_int(CDDP_KNOB_STORE_HELLO_TIMEOUT_MS);
  srv->handshake_ms = (int)CDDP_MIN(CDDP_MAX(hello_ms, 1), 3600000); /* 1 ms .. 1 h */
  cddp_result_t r;
  CDDP_CHECK_GOTO(cddp__core_init(&srv->core, token), r, fail);
  srv->core.torch = torch;
  if (torch_round_key && !(srv->core.torch_round_key = strdup(torch_round_key))) {
    r = cddp__fail(CDDP_SYSTEM, "store server: out of memory");
    goto fail;
  }
  CDDP_CHECK_GOTO(bind_listener(srv, host, port), r, fail);
  srv->epfd = epoll_create1(EPOLL_CLOEXEC);
  srv->evfd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  srv->spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (srv->epfd < 0 || srv->evfd < 0) {
    r = cddp__fail_errno(CDDP_SYSTEM, "store server: epoll/eventfd");
    goto fail;
  }
  struct epoll_event le = {.events = EPOLLIN, .data.ptr = &srv->lfd};
  struct epoll_event ee = {.events = EPOLLIN, .data.ptr = &srv->evfd};
  if (epoll_ctl(srv->epfd, EPOLL_CTL_ADD, srv->lfd, &le) != 0 ||
      epoll_ctl(srv->epfd, EPOLL_CTL_ADD, srv->evfd, &ee) != 0) {
    r = cddp__fail_errno(CDDP_SYSTEM, "store server: epoll_ctl");
    goto fail;
  }
  int e = pthread_create(&srv->thread, NULL, loop, srv);
  if (e != 0) {
    errno = e;
    r = cddp__fail_errno(CDDP_SYSTEM, "store server: thread");
    goto fail;
  }
  CDDP_INFO(CDDP_SUB_STORE, "store: listening on %s:%d (%s%s)", host ? host : "0.0.0.0", srv->port,
            srv->core.token ? "token required" : "no token", torch ? "; torch's TCPStore protocol too" : "");
  *out = srv;
  return CDDP_OK;
fail:
  if (srv->lfd >= 0) close(srv->lfd);
  if (srv->epfd >= 0) close(srv->epfd);
  if (srv->evfd >= 0) close(srv->evfd);
  if (srv->spare_fd >= 0) close(srv->spare_fd);
  cddp__core_free(&srv->core);
  free(srv);
  return r;
}

cddp_result_t cddp_store_server_start(cddp_store_server_t **out, const char *host, int port,
                                      const char *token) {
  return start(out, host, port, token, 0, NULL);
}

cddp_result_t cddp__store_server_start_torch(cddp_store_server_t **out, const char *host, int port,
                                             const char *token, const char *round_key) {
  return start(out, host, port, token, 1, round_key);
}

int cddp_store_server_port(const cddp_store_server_t *srv) { return srv ? srv->port : -1; }

void cddp_store_server_stop(cddp_store_server_t *srv) {
  if (!srv) return;
  uint64_t one = 1;
  while (write(srv->evfd, &one, sizeof one) < 0 && errno == EINTR) {
  }
  pthread_join(srv->thread, NULL);
  while (srv->conns) conn_close(srv, srv->conns, "server stopping");
  while (srv->dead) {
    sconn_t *d = srv->dead;
    srv->dead = d->dnext;
    free(d);
  }
  close(srv->lfd);
  close(srv->epfd);
  close(srv->evfd);
  if (srv->spare_fd >= 0) close(srv->spare_fd);
  const cddp__srv_core_t *k = &srv->core;
  CDDP_INFO(CDDP_SUB_STORE, "store: server on port %d stopped: %llu requests from %llu clients (%.1f each), "
            "%llu parked waits re-checked", srv->port, (unsigned long long)k->n_requests,
            (unsigned long long)k->n_clients, k->n_clients ? (double)k->n_requests / (double)k->n_clients : 0.0,
            (unsigned long long)k->n_rechecks);
  cddp__core_free(&srv->core);
  free(srv);
}
