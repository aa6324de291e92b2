/* netif.h - which network interface and address TCP listens on (CDDP_SOCKET_IFNAME rules). */
#ifndef CDDP_COMM_NETIF_H
#define CDDP_COMM_NETIF_H

#include <net/if.h>
#include <sys/socket.h>

#include "cddp/cddp.h"

#define CDDP__NETIF_MAX 64

/* One address of one interface (an interface with IPv4 and IPv6 appears twice). */
typedef struct cddp__netif {
  char name[IF_NAMESIZE];
  struct sockaddr_storage addr; /* port 0 */
  socklen_t addrlen;
  int up, loopback;
} cddp__netif_t;

/* Does interface name match spec? NCCL's forms: "eth,ib" (prefixes), "=eth0,eth1"
 * (exact names), "^docker,lo" (exclude prefixes), "^=lo" (exclude exact names).
 * An empty spec matches everything. Pure. */
int cddp__netif_match(const char *spec, const char *name);

/* Picks from list (n entries, in the system's order). Rules: with a non-empty spec, the
 * first up interface that matches (IPv4 before IPv6); else the interface holding
 * route_src (the local address that routes to the master, may be NULL); else the first
 * up non-loopback (IPv4 first); else loopback. INVALID_ARG naming spec and the present
 * interfaces when spec matches nothing. Pure apart from cddp__fail. */
cddp_result_t cddp__netif_pick(const cddp__netif_t *list, int n, const char *spec,
                               const struct sockaddr *route_src, int *index);

/* The system's interfaces with an IPv4 or global/ULA IPv6 address (getifaddrs). */
cddp_result_t cddp__netif_list(cddp__netif_t *list, int max, int *n);

/* The local address the kernel would use to reach host (cddp__sock_route_src; no packet is
 * sent). NOT_FOUND when host does not resolve or has no route. */
cddp_result_t cddp__netif_route_src(const char *host, struct sockaddr_storage *src);

/* The master's host: MASTER_ADDR, else, when cddp run's agent started it (common/launcher.h), the
 * host part of CDDP_STORE ("[tcp://]host:port");
 * NULL when neither is set. Copies into buf. */
const char *cddp__netif_master_host(char *buf, size_t size);

/* Everything above applied to this process's environment: CDDP_SOCKET_IFNAME, else the
 * route to the master, else the first up non-loopback interface, else loopback. */
cddp_result_t cddp__netif_choose(cddp__netif_t *out);

#endif /* CDDP_COMM_NETIF_H */
