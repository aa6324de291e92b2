/* desync.h - the per-collective fingerprint the ranks compare, so a rank that calls another
 * collective than its peers (another count, op or dtype, or one skipped) fails on every rank
 * with one line naming both calls, instead of hanging or corrupting data (CDDP_DESYNC_CHECK). */
#ifndef CDDP_COMM_DESYNC_H
#define CDDP_COMM_DESYNC_H

#include <stddef.h>
#include <stdint.h>

#include "cddp/comm.h"
#include "cddp/store.h"

#define CDDP__FP_MAGIC 0x50464443u /* "CDFP": a TCP transfer's header */

/* A collective as its caller asked for it. seq 0 means "no check" (the knob is off on some
 * rank, or the call is internal: the tuner's calibration). 24 bytes, no padding holes. */
typedef struct cddp__fp {
  uint64_t count;   /* as the public API counts it */
  uint32_t seq;     /* the communicator's collective number, from 1 (low 32 bits) */
  uint32_t rank;    /* the caller's rank in the whole communicator (hier's groups keep it) */
  uint8_t kind, dt; /* cddp__coll_kind_t, cddp_dtype_t */
  uint16_t arg;     /* the reduction op; for a broadcast its root */
  uint32_t tag;     /* free for the transport: shm the step it was posted at, tcp the magic */
} cddp__fp_t;

/* Whether two ranks made the same call (rank and tag aside). */
static inline int cddp__fp_same(const cddp__fp_t *a, const cddp__fp_t *b) {
  return a->count == b->count && a->seq == b->seq && a->kind == b->kind && a->dt == b->dt && a->arg == b->arg;
}

/* 32 bits of a fingerprint's call (seq, kind, dt, arg, count) mixed with a step: what the shm
 * transport compares on the line it reads anyway. */
uint32_t cddp__fp_hash(const cddp__fp_t *f, uint32_t step);

/* "allreduce(count 4096, float32, sum)", "broadcast(count 8, float32, root 1)", "barrier". */
void cddp__fp_describe(const cddp__fp_t *f, char *buf, size_t size);

/* The error of a mismatch between this rank's call (mine) and a peer's (theirs; NULL when the
 * peer's call is not known: peer_name then says who). The first rank to find a desync leaves its
 * line in the communicator's store (key "desync", first one wins) before it fails its peers, so
 * every rank reports the same line: the winner's. INVALID_USAGE (a program error, not a fault
 * to recover from). Blocks on one store round trip. */
cddp_result_t cddp__desync_fail(cddp_store_t *store, const cddp__fp_t *mine, const cddp__fp_t *theirs,
                                const char *peer_name);

/* A peer's failure seen by a rank that did not find the desync itself: when the communicator's
 * store holds a desync line, it replaces the error (returns INVALID_USAGE); else r unchanged.
 * Does not wait. */
cddp_result_t cddp__desync_explain(cddp_store_t *store, cddp_result_t r);

#endif /* CDDP_COMM_DESYNC_H */
