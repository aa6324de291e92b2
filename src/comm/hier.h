/* hier.h - the hierarchical transport: shm within each host composed with tcp across hosts. */
#ifndef CDDP_COMM_HIER_H
#define CDDP_COMM_HIER_H

#include "comm/transport.h"

/* Hosts (by peer host_id, numbered in order of their lowest rank) and ranks per host.
 * Returns 1 when every host runs the same number of ranks (*ranks_per_host set), 0
 * otherwise (*ranks_per_host = 0). */
int cddp__hier_placement(const cddp__peer_t *peers, int world, int *hosts, int *ranks_per_host);

/* Whether the automatic choice should be hierarchical: >= 2 hosts, >= 2 ranks on each,
 * the same number everywhere. */
int cddp__hier_fits(const cddp__peer_t *peers, int world);

extern const cddp__transport_t cddp__transport_hier;

#endif /* CDDP_COMM_HIER_H */
