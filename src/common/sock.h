/* sock.h - the one network module (Redis anet.c's shape): resolve, listen, connect with a
 * timeout, socket options, write_all / read_all, addresses as text, and the launcher's
 * questions about hosts and ports. Every getaddrinfo / bind / listen / connect of libcddp and
 * its applications goes through here.
 *
 * Errors: a fallible call returns a cddp_result_t and records one line (cddp_last_error) that
 * names the host:port it was about, e.g. "connect to 10.0.0.2:29400: Connection refused".
 * errno is left as the system's reason (0 for a peer's end of stream), so a caller can classify
 * it or word a message of its own. Nothing here retries a refused connect or a failed lookup:
 * the retry policy belongs to the callers that need one (the store client does). */
#ifndef CDDP_COMMON_SOCK_H
#define CDDP_COMMON_SOCK_H

#include <netdb.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "cddp/cddp.h"

/* Flags; every socket made here is close-on-exec. */
enum {
  CDDP__SOCK_NONBLOCK = 1 << 0,  /* socket, accept, connect: the descriptor is non-blocking */
  CDDP__SOCK_DGRAM = 1 << 1,     /* socket, resolve: UDP instead of TCP */
  CDDP__SOCK_NUMERIC = 1 << 2,   /* resolve, connect: numeric addresses only, never a name lookup */
  CDDP__SOCK_PASSIVE = 1 << 3,   /* resolve: a NULL host is the IPv4 wildcard 0.0.0.0 (to bind) */
  CDDP__SOCK_REUSEADDR = 1 << 4, /* listen: SO_REUSEADDR before bind */
};

/* No deadline: block until the call completes (for write_all / read_all on a blocking socket,
 * its SO_SNDTIMEO / SO_RCVTIMEO still ends the wait with TIMEOUT). */
#define CDDP__SOCK_FOREVER UINT64_MAX

/* ---- resolve ---- */

/* getaddrinfo for host:port (a numeric host is taken as one first, so it never touches DNS).
 * *res is freed with freeaddrinfo. NOT_FOUND "cannot resolve host 'h': why" at once when the
 * resolver says the name does not exist (EAI_NONAME, EAI_FAIL, EAI_NODATA; or a name where
 * CDDP__SOCK_NUMERIC asked for an address): retrying cannot help. SYSTEM with the same line for
 * a transient failure (EAI_AGAIN), which a caller may retry. Blocks on the resolver. */
cddp_result_t cddp__sock_resolve(const char *host, int port, int flags, struct addrinfo **res);

/* OK unless host is a name the resolver says does not exist: then NOT_FOUND
 * "cannot resolve host 'node9' (from FROM): why", so a caller stops at once instead of a store
 * client retrying until its timeout. A transient failure (EAI_AGAIN) passes. */
cddp_result_t cddp__sock_host_resolves(const char *host, const char *from);

/* ---- sockets, listen, accept ---- */

/* A new TCP socket (UDP with CDDP__SOCK_DGRAM) of family, non-blocking with
 * CDDP__SOCK_NONBLOCK. *fd is -1 on failure: SYSTEM "socket: why". */
cddp_result_t cddp__sock_socket(int family, int flags, int *fd);

/* Binds fd to sa and listens with backlog (backlog < 0: binds only, to hold or probe a port).
 * Port 0 is a free port; *port (may be NULL) receives the port bound. SO_REUSEADDR first with
 * CDDP__SOCK_REUSEADDR. SYSTEM "bind ip:port: why" or "listen on ip:port: why" (errno
 * EADDRINUSE: the port is taken). Options a listener's accepted sockets should inherit
 * (buffer sizes, congestion control) are set on fd before this. */
cddp_result_t cddp__sock_listen(int fd, const struct sockaddr *sa, socklen_t len, int flags, int backlog,
                                int *port);

/* accept4: the new socket is close-on-exec, non-blocking with CDDP__SOCK_NONBLOCK; *from (may
 * be NULL) receives the peer's address. -1 with errno (EAGAIN: nobody waiting), as accept's
 * callers loop on it; no error line. */
int cddp__sock_accept(int lfd, int flags, struct sockaddr_storage *from);

/* ---- connect ---- */

/* Starts connecting non-blocking fd to sa: OK when connected or in progress (poll for POLLOUT,
 * then ask cddp__sock_connect_error). REMOTE "connect to ip:port: why" when it failed at once. */
cddp_result_t cddp__sock_connect_start(int fd, const struct sockaddr *sa, socklen_t len);

/* How a started connect ended, once poll said fd is writable: 0 connected, else its errno
 * (SO_ERROR). A socket that connected to itself counts as ECONNREFUSED: while nobody listens on
 * a port of the ephemeral range, a connect to it can get that very port as its source and
 * complete a TCP simultaneous open with itself (it would then hold the port a server is about
 * to bind). */
int cddp__sock_connect_error(int fd);

/* Connects non-blocking fd to sa, waiting in poll until deadline (cddp__deadline_ms, or
 * CDDP__SOCK_FOREVER). OK; TIMEOUT "connect to ip:port: Connection timed out" (errno ETIMEDOUT);
 * REMOTE "connect to ip:port: why" (errno ECONNREFUSED, EHOSTUNREACH, ...). fd stays
 * non-blocking. */
cddp_result_t cddp__sock_connect_wait(int fd, const struct sockaddr *sa, socklen_t len, uint64_t deadline);

/* One attempt to connect to host:port: resolves it (CDDP__SOCK_NUMERIC: addresses only) and
 * tries each address with a fresh socket until one connects or deadline passes. *fd is blocking
 * unless flags has CDDP__SOCK_NONBLOCK. Failure: the resolver's result, or the last address's
 * (TIMEOUT / REMOTE / SYSTEM), with its line and errno. */
cddp_result_t cddp__sock_connect(const char *host, int port, int flags, uint64_t deadline, int *fd);

/* The local address the kernel would use to reach host:port (a UDP connect: no packet is
 * sent). The resolver's result when host does not resolve; REMOTE "no route to host:port: why"
 * when no address of it is routable. */
cddp_result_t cddp__sock_route_src(const char *host, int port, struct sockaddr_storage *src);

/* ---- I/O ---- */

/* Sends all n bytes (MSG_NOSIGNAL: a closed peer is EPIPE, not a signal), retrying EINTR. On a
 * non-blocking fd it waits in poll until deadline; a blocking fd blocks (its SO_SNDTIMEO ends
 * the wait). OK; TIMEOUT "send to ip:port: timed out" (errno ETIMEDOUT, or EAGAIN from
 * SO_SNDTIMEO); REMOTE "send to ip:port: why" (a kernel's ETIMEDOUT, keepalive or user timeout,
 * is REMOTE: the peer is gone). */
cddp_result_t cddp__sock_write_all(int fd, const void *buf, size_t n, uint64_t deadline);
/* Receives exactly n bytes, the same way. REMOTE "recv from ip:port: closed by the peer" with
 * errno 0 at end of stream; REMOTE with errno on an error; TIMEOUT as above. */
cddp_result_t cddp__sock_read_all(int fd, void *buf, size_t n, uint64_t deadline);

/* ---- options (a failure only costs speed or detection time: ignored) ---- */

void cddp__sock_nodelay(int fd);                       /* TCP_NODELAY */
void cddp__sock_buffers(int fd, int bytes);            /* SO_SNDBUF and SO_RCVBUF (bytes > 0) */
int cddp__sock_congestion(int fd, const char *cc);     /* TCP_CONGESTION; -1 with errno when refused */
/* SO_KEEPALIVE with its idle / interval / count (seconds, probes), and TCP_USER_TIMEOUT: the
 * bound on unacknowledged data (user_timeout_ms <= 0: left as it is). */
void cddp__sock_keepalive(int fd, int idle_s, int intvl_s, int cnt, int user_timeout_ms);
void cddp__sock_timeouts(int fd, int ms);              /* SO_RCVTIMEO and SO_SNDTIMEO */
void cddp__sock_nonblock(int fd, int on);              /* O_NONBLOCK on or off */

/* ---- addresses ---- */

/* "192.0.2.2" or "fd00::2" (no port); "?" for another family. Returns buf. */
const char *cddp__sockaddr_ip(const struct sockaddr *sa, char *buf, size_t size);
/* The port of an IPv4 / IPv6 address (0 for another family), and setting it. */
int cddp__sockaddr_port(const struct sockaddr *sa);
void cddp__sockaddr_set_port(struct sockaddr_storage *sa, int port);
/* "192.0.2.2:29400" or "[fd00::2]:29400". Returns buf. */
const char *cddp__sockaddr_text(const struct sockaddr *sa, char *buf, size_t size);

/* ---- the launcher's questions ---- */

/* 1 when host (numeric, or a name) is an address of this machine (bind() to it succeeds), 0
 * otherwise or when it does not resolve. */
int cddp__sock_host_is_local(const char *host);
/* Is host a numeric loopback address (127.0.0.0/8, ::1)? A store named so listens there only. */
int cddp__sock_host_is_loopback(const char *host);
/* Where a server that others reach as host should listen: host's one address when it is this
 * host's (a loopback one only for a numeric loopback or `localhost`), written to out, and 1;
 * else 0 with out "" (every interface) and why saying the reason ("" when host asked for all:
 * NULL, "", 0.0.0.0, ::): a name that resolves to a loopback address (Debian's 127.0.1.1), to
 * several addresses, to none, or to an address this host does not have. Quiet. */
int cddp__sock_listen_addr_for(const char *host, char *out, size_t size, char *why, size_t wsize);
/* 1 when nothing may bind port on all IPv4 interfaces because it is in use (EADDRINUSE). */
int cddp__sock_port_in_use(int port);
/* What a connection to host:port finds within ms: 1 a listener, 0 a refusal (the host is up and
 * nothing listens there: a process there is gone for sure), -1 no answer. Clears the error. */
int cddp__sock_knock(const char *host, int port, int ms);
/* A port free right now on all IPv4 interfaces (0 on failure). */
int cddp__sock_free_port(void);
/* The local address toward host:port as text (cddp__sock_route_src); "127.0.0.1" when there is
 * none. */
void cddp__sock_addr_toward(const char *host, int port, char *buf, size_t size);

#endif /* CDDP_COMMON_SOCK_H */
