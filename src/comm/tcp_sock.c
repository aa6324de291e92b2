/* tcp_sock.c - socket helpers for the TCP transport: handshake frames, addresses, options. */
#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "comm/tcp.h"
#include "common/check.h"
#include "common/log.h"
#include "common/sock.h"

static void put32(unsigned char *p, uint32_t v) {
  p[0] = (unsigned char)(v >> 24), p[1] = (unsigned char)(v >> 16);
  p[2] = (unsigned char)(v >> 8), p[3] = (unsigned char)v;
}
static uint32_t get32(const unsigned char *p) {
  return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

void cddp__tcp_hello_encode(const cddp__tcp_hello_t *h, unsigned char out[CDDP__TCP_HELLO_BYTES]) {
  put32(out, h->magic);
  put32(out + 4, (uint32_t)h->version << 16 | h->kind);
  put32(out + 8, h->round);
  put32(out + 12, h->world);
  put32(out + 16, h->from);
  put32(out + 20, h->to);
  put32(out + 24, h->stream);
  put32(out + 28, h->nstreams);
  put32(out + 32, (uint32_t)(h->nonce >> 32));
  put32(out + 36, (uint32_t)h->nonce);
}

int cddp__tcp_hello_decode(const unsigned char in[CDDP__TCP_HELLO_BYTES], cddp__tcp_hello_t *h) {
  memset(h, 0, sizeof *h);
  h->magic = get32(in);
  if (h->magic != CDDP__TCP_MAGIC) return -1;
  h->version = (uint16_t)(get32(in + 4) >> 16);
  h->kind = (uint16_t)get32(in + 4);
  if (h->version != CDDP__TCP_VERSION) return -2;
  h->round = get32(in + 8);
  h->world = get32(in + 12);
  h->from = get32(in + 16);
  h->to = get32(in + 20);
  h->stream = get32(in + 24);
  h->nstreams = get32(in + 28);
  h->nonce = (uint64_t)get32(in + 32) << 32 | get32(in + 36);
  return 0;
}

void cddp__tcp_addr_format(const struct sockaddr *sa, uint64_t nonce, char *buf, size_t size) {
  char at[80];
  snprintf(buf, size, "%s %016" PRIx64, cddp__sockaddr_text(sa, at, sizeof at), nonce);
}

cddp_result_t cddp__tcp_addr_parse(const char *text, struct sockaddr_storage *sa, socklen_t *len,
                                   uint64_t *nonce) {
  char ip[64];
  const char *p = text, *colon;
  size_t iplen;
  if (*p == '[') {
    const char *e = strchr(p, ']');
    if (!e || e[1] != ':') goto bad;
    iplen = (size_t)(e - p - 1), p++, colon = e + 1;
  } else {
    colon = strchr(p, ':');
    if (!colon) goto bad;
    iplen = (size_t)(colon - p);
  }
  if (iplen == 0 || iplen >= sizeof ip) goto bad;
  memcpy(ip, p, iplen);
  ip[iplen] = '\0';
  char *end;
  long port = strtol(colon + 1, &end, 10);
  if (end == colon + 1 || port <= 0 || port > 65535 || *end != ' ') goto bad;
  char *end2;
  unsigned long long n = strtoull(end + 1, &end2, 16);
  if (end2 == end + 1 || *end2) goto bad;
  memset(sa, 0, sizeof *sa);
  struct sockaddr_in *a4 = (struct sockaddr_in *)sa;
  struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)sa;
  if (inet_pton(AF_INET, ip, &a4->sin_addr) == 1) {
    a4->sin_family = AF_INET, a4->sin_port = htons((uint16_t)port), *len = sizeof *a4;
  } else if (inet_pton(AF_INET6, ip, &a6->sin6_addr) == 1) {
    a6->sin6_family = AF_INET6, a6->sin6_port = htons((uint16_t)port), *len = sizeof *a6;
  } else {
    goto bad;
  }
  *nonce = n;
  return CDDP_OK;
bad:
  return cddp__fail(CDDP_INVALID_ARG, "malformed TCP address '%.80s' (want ip:port nonce)", text);
}

int cddp__tcp_preconnect(int fd, int buf_bytes, const char *cc) {
  /* Failures here only cost speed, never correctness: ignore them. */
  cddp__sock_buffers(fd, buf_bytes);
  /* Before connect: BBR (a common system default) turns on the socket's pacing when it
   * initialises, and switching later leaves the pacing on. */
  return cc && *cc ? cddp__sock_congestion(fd, cc) : 0;
}

void cddp__tcp_tune(int fd) {
  /* Failures here only cost speed or detection time, never correctness: ignored. */
  cddp__sock_nodelay(fd);
  /* A silent peer (host gone, cable pulled) is found by keepalive probes (after 10 s idle,
   * every 2 s, 3 of them) and by the bound on unacknowledged data (20 s); a dead process is
   * found at once by its RST/FIN. */
  cddp__sock_keepalive(fd, 10, 2, 3, 20000);
}

cddp_result_t cddp__tcp_listen(const struct sockaddr *addr, socklen_t len, int buf_bytes, const char *cc,
                               int *out, int *port) {
  char ip[64];
  int fd;
  if (cddp__sock_socket(addr->sa_family, CDDP__SOCK_NONBLOCK, &fd) != CDDP_OK)
    return cddp__fail_errno(CDDP_SYSTEM, "socket for TCP listener");
  struct sockaddr_storage a;
  memcpy(&a, addr, len);
  cddp__sockaddr_set_port(&a, 0);
  /* accepted sockets inherit the listener's buffer sizes and congestion control */
  if (cddp__tcp_preconnect(fd, buf_bytes, cc) != 0)
    CDDP_WARN("CDDP_TCP_CONGESTION: cannot use congestion control '%s' (%s); keeping the system's", cc,
              strerror(errno));
  if (cddp__sock_listen(fd, (struct sockaddr *)&a, len, 0, SOMAXCONN, port) != CDDP_OK) {
    cddp_result_t r = cddp__fail_errno(CDDP_SYSTEM, "listen on %s", cddp__sockaddr_ip(addr, ip, sizeof ip));
    close(fd);
    return r;
  }
  *out = fd;
  return CDDP_OK;
}
