/* net.h - small socket helpers of the launcher: locality, free ports, the address toward a peer. */
#ifndef CDDP_RUN_NET_H
#define CDDP_RUN_NET_H

#include <stddef.h>

#include "cddp/cddp.h"

/* 1 when host (numeric, or a name resolved with getaddrinfo) is an address of this
 * machine (bind() to it succeeds), 0 otherwise or when it does not resolve. */
int cddp__host_is_local(const char *host);
/* 1 when nothing may bind port on all interfaces because it is in use (EADDRINUSE). */
int cddp__port_in_use(int port);
/* A port free right now on all interfaces (0 on failure). */
int cddp__free_port(void);
/* The local address the kernel would use to reach host:port (a UDP connect, no packet
 * sent). Falls back to "127.0.0.1". */
void cddp__addr_toward(const char *host, int port, char *buf, size_t size);

/* OK unless host is a name the resolver says does not exist (EAI_NONAME / EAI_FAIL /
 * EAI_NODATA): then NOT_FOUND "cannot resolve host 'node9' (from FROM): why" at once, instead
 * of a store client retrying until its timeout. A transient failure (EAI_AGAIN) passes. */
cddp_result_t cddp__host_resolves(const char *host, const char *from);

#endif /* CDDP_RUN_NET_H */
