/* desync.c - fingerprints of collectives, their one-line descriptions, and the desync error
 * every rank of a communicator reports alike (see desync.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/desync.h"
#include "comm/flight.h"
#include "common/check.h"

#define DESYNC_KEY "desync"
#define DESYNC_HINT " (every rank's collectives must match in order, kind, count, dtype and op; CDDP_DESYNC_CHECK)"

uint32_t cddp__fp_hash(const cddp__fp_t *f, uint32_t step) {
  uint64_t h = f->count * 0x9e3779b97f4a7c15ull;
  h ^= ((uint64_t)f->seq << 32 | (uint64_t)f->kind << 24 | (uint64_t)f->dt << 16 | f->arg) + step;
  h *= 0xbf58476d1ce4e5b9ull; /* splitmix64's finaliser: every input bit reaches the top half */
  h ^= h >> 31;
  return (uint32_t)(h >> 32);
}

void cddp__fp_describe(const cddp__fp_t *f, char *buf, size_t size) {
  const char *kind = cddp__flight_kind_name(f->kind), *dt = cddp_dtype_name((cddp_dtype_t)f->dt);
  if (f->kind == 4) /* barrier: nothing else to compare */
    snprintf(buf, size, "%s", kind);
  else if (f->kind == 3)
    snprintf(buf, size, "%s(count %llu, %s, root %u)", kind, (unsigned long long)f->count, dt, f->arg);
  else if (f->kind == 2) /* allgather: no reduction */
    snprintf(buf, size, "%s(count %llu, %s)", kind, (unsigned long long)f->count, dt);
  else
    snprintf(buf, size, "%s(count %llu, %s, %s)", kind, (unsigned long long)f->count, dt,
             cddp_redop_name((cddp_redop_t)f->arg));
}

cddp_result_t cddp__desync_fail(cddp_store_t *store, const cddp__fp_t *mine, const cddp__fp_t *theirs,
                                const char *peer_name) {
  char a[128], b[128], line[400];
  cddp__fp_describe(mine, a, sizeof a);
  if (!theirs) {
    snprintf(line, sizeof line, "desync at collective #%u: rank %u called %s, %.120s was inside another collective",
             mine->seq, mine->rank, a, peer_name ? peer_name : "a peer");
  } else {
    cddp__fp_describe(theirs, b, sizeof b);
    const cddp__fp_t *lo = mine->rank <= theirs->rank ? mine : theirs, *hi = lo == mine ? theirs : mine;
    const char *dlo = lo == mine ? a : b, *dhi = lo == mine ? b : a;
    if (lo->seq == hi->seq)
      snprintf(line, sizeof line, "desync at collective #%u: rank %u called %s, rank %u called %s", lo->seq, lo->rank,
               dlo, hi->rank, dhi);
    else
      snprintf(line, sizeof line, "desync: rank %u's collective #%u is %s, rank %u's #%u is %s", lo->rank, lo->seq,
               dlo, hi->rank, hi->seq, dhi);
  }
  void *won = NULL;
  size_t len = 0;
  if (store && cddp_store_compare_set(store, DESYNC_KEY, NULL, 0, line, strlen(line), &won, &len) == CDDP_OK && won)
    snprintf(line, sizeof line, "%.*s", (int)(len < sizeof line ? len : sizeof line - 1), (const char *)won);
  free(won);
  return cddp__fail(CDDP_INVALID_USAGE, "%s" DESYNC_HINT, line);
}

cddp_result_t cddp__desync_explain(cddp_store_t *store, cddp_result_t r) {
  void *v = NULL;
  size_t len = 0;
  char was[600];
  snprintf(was, sizeof was, "%s", cddp_last_error());
  if (!store || cddp_store_get(store, DESYNC_KEY, &v, &len, 0) != CDDP_OK || !v) {
    free(v);
    cddp__set_error_text(was); /* the store's "absent" is not the error */
    return r;
  }
  cddp_result_t d = cddp__fail(CDDP_INVALID_USAGE, "%.*s" DESYNC_HINT, (int)(len < 400 ? len : 400), (const char *)v);
  free(v);
  return d;
}
