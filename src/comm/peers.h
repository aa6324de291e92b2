/* peers.h - who the communicator's ranks are (host, host id, pid), exchanged through the store at
 * init in O(N) requests: each rank publishes "peer/<rank>", rank 0 reads them all and publishes
 * one compact list ("peer/all": each host once, then a host index and a pid per rank) that every
 * other rank reads once. Reading every rank's record from every rank was N requests per rank:
 * a million at 1,024 ranks, most of the time a large communicator took to form. */
#ifndef CDDP_COMM_PEERS_H
#define CDDP_COMM_PEERS_H

#include <stddef.h>

#include "cddp/store.h"
#include "comm/transport.h"

/* One rank's record, "host\nhost_id\npid\ncheck", into buf: its length, or 0 when it does not fit. */
size_t cddp__peer_record_format(const cddp__peer_t *me, int check, char *buf, size_t size);
/* Parses a record (len bytes, not NUL-terminated): 0 with *p and *check, or -1 when malformed. */
int cddp__peer_record_parse(const void *rec, size_t len, cddp__peer_t *p, int *check);

/* The list of world ranks (check: every rank has the desync check on) as malloc'd text with *len;
 * NULL when out of memory. A space or a control character in a name becomes '_'. */
char *cddp__peer_list_format(const cddp__peer_t *peers, int world, int check, size_t *len);
/* Parses a list read from the store (hostile: every count, index and length is checked): 0 with
 * out[0..world) and *check, or -1 with why when it is malformed or not for world ranks. */
int cddp__peer_list_parse(const void *text, size_t len, int world, cddp__peer_t *out, int *check, const char **why);

/* The exchange itself, on the communicator's store view: out[r] for every rank, and whether
 * every rank has the desync check on. Bounded by timeout_ms; a rank that never published is
 * named (the others find it by looking once, only when the wait failed). */
cddp_result_t cddp__peers_exchange(cddp_store_t *view, int rank, int world, int round, int timeout_ms,
                                   const cddp__peer_t *me, int my_check, cddp__peer_t *out, int *check);

#endif /* CDDP_COMM_PEERS_H */
