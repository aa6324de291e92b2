/* net.c - socket helpers for the launcher (numeric hosts never touch DNS). */
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/check.h"
#include "world/net.h"

static struct addrinfo *resolve(const char *host, int port, int socktype) {
  struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = socktype, .ai_flags = AI_NUMERICHOST}, *res = NULL;
  char ps[16];
  snprintf(ps, sizeof ps, "%d", port);
  if (getaddrinfo(host, ps, &hints, &res) == 0) return res;
  hints.ai_flags = 0; /* a name: the user gave it, so it must resolve anyway */
  if (getaddrinfo(host, ps, &hints, &res) == 0) return res;
  return NULL;
}

int cddp__host_is_local(const char *host) {
  struct addrinfo *res = resolve(host, 0, SOCK_STREAM);
  int local = 0;
  for (struct addrinfo *a = res; a && !local; a = a->ai_next) {
    int fd = socket(a->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) continue;
    local = bind(fd, a->ai_addr, a->ai_addrlen) == 0;
    close(fd);
  }
  if (res) freeaddrinfo(res);
  return local;
}

int cddp__port_in_use(int port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port), .sin_addr.s_addr = htonl(INADDR_ANY)};
  if (fd < 0) return 0;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  int in_use = bind(fd, (struct sockaddr *)&a, sizeof a) != 0 && errno == EADDRINUSE;
  close(fd);
  return in_use;
}

int cddp__free_port(void) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_ANY)};
  socklen_t len = sizeof a;
  int port = 0;
  if (fd < 0) return 0;
  if (bind(fd, (struct sockaddr *)&a, sizeof a) == 0 && getsockname(fd, (struct sockaddr *)&a, &len) == 0)
    port = ntohs(a.sin_port);
  close(fd);
  return port;
}

void cddp__addr_toward(const char *host, int port, char *buf, size_t size) {
  snprintf(buf, size, "127.0.0.1");
  struct addrinfo *res = resolve(host, port ? port : 9, SOCK_DGRAM);
  for (struct addrinfo *a = res; a; a = a->ai_next) {
    int fd = socket(a->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    struct sockaddr_storage me;
    socklen_t len = sizeof me;
    if (fd < 0) continue;
    if (connect(fd, a->ai_addr, a->ai_addrlen) == 0 && getsockname(fd, (struct sockaddr *)&me, &len) == 0) {
      void *ip = me.ss_family == AF_INET6 ? (void *)&((struct sockaddr_in6 *)&me)->sin6_addr
                                          : (void *)&((struct sockaddr_in *)&me)->sin_addr;
      inet_ntop(me.ss_family, ip, buf, (socklen_t)size);
      close(fd);
      break;
    }
    close(fd);
  }
  if (res) freeaddrinfo(res);
}

cddp_result_t cddp__host_resolves(const char *host, const char *from) {
  struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *res = NULL;
  int rc = getaddrinfo(host, NULL, &hints, &res);
  if (rc == 0) freeaddrinfo(res);
  if (rc == EAI_NONAME || rc == EAI_FAIL
#ifdef EAI_NODATA
      || rc == EAI_NODATA
#endif
  )
    return cddp__fail(CDDP_NOT_FOUND, "cannot resolve host '%s' (from %s): %s", host, from && *from ? from : "?",
                      gai_strerror(rc));
  return CDDP_OK;
}
