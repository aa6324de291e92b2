/* net.h - small socket helpers of the launcher: locality, free ports, the address toward a peer. */
#ifndef CDDP_RUN_NET_H
#define CDDP_RUN_NET_H

#include <stddef.h>

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

#endif /* CDDP_RUN_NET_H */
