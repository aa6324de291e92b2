/* shm.h - internals of the shared-memory transport: segment layout, sync words, algorithms. */
#ifndef CDDP_COMM_SHM_H
#define CDDP_COMM_SHM_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "comm/transport.h"
#include "comm/tune.h"

#define SHM_LINE 128        /* every flag sits alone on its own 128-byte line */
#define SHM_MAGIC 0x6364647073686d31ull /* "cddpshm1" */
#define SHM_MAX_ALLOCS 64   /* live mem_alloc buffers per communicator */
#define SHM_NSLOT 4         /* staging slots per rank, used round robin by step */
#define SHM_SLOT_ROOM 4096  /* extra bytes per slot: its data starts at a run-time offset */

/* A word written by one rank (or, for sleepers, by its waiters), alone on its line. */
typedef struct {
  _Atomic uint32_t v;
  char pad[SHM_LINE - sizeof(uint32_t)];
} shm_word_t;

/* What a rank publishes with its arrival at a zero-copy capable step. */
typedef struct {
  int32_t send_id, recv_id; /* allocation ids (-1: not in a mem_alloc buffer) */
  uint64_t send_off, recv_off;
  uint32_t slot_off[SHM_NSLOT]; /* where the data of slot k starts (chosen per step, 4K alias) */
  uint32_t fp_step[2], fp_hash[2]; /* the first step of a collective s (at [s & 1]) and the hash of
                                      the call (cddp__fp_hash): compared on this line, read anyway */
  uint64_t send_addr, recv_addr; /* the buffers in this rank's address space (CMA path) */
  uint32_t cma_ok;         /* init: this rank could read every peer with process_vm_readv */
  uint32_t knobs;          /* init: SHM_SET_* bits, the knobs this rank's environment forces */
  uint32_t tune_ms;        /* init: this rank's CDDP_TUNE_MS (rank 0's is used) */
} shm_zc_desc_t;

/* Per-rank control block in the segment: [arrive+desc][reduced][sleepers][left]. */
typedef struct {
  _Atomic uint32_t arrive; /* last step this rank posted its inputs for */
  uint32_t pad0;
  shm_zc_desc_t desc;      /* written before arrive, on the same line: one transfer */
  char pad1[SHM_LINE - 8 - sizeof(shm_zc_desc_t)];
  cddp__fp_t fp[2];        /* the calls of fp_step[], in full: read only to word a mismatch */
  char pad2[SHM_LINE - 2 * sizeof(cddp__fp_t)];
  shm_word_t reduced;      /* last step whose output slice this rank has written */
  shm_word_t sleepers;     /* waiters (any rank) asleep on arrive or reduced */
  shm_word_t left;         /* non-zero: this rank failed or destroyed its transport */
} shm_ctl_t;

/* Segment header (rank 0 fills it; every rank checks it). */
typedef struct {
  uint64_t magic;
  uint32_t world, round;
  uint64_t slot_bytes;     /* staging bytes per (parity, rank) slot */
  uint64_t chunk_bytes;    /* ring chunk (per step, whole chunk over all ranks) */
  uint64_t direct_max;     /* AUTO: direct at or below this many bytes */
  uint64_t seg_bytes;
  char pad0[SHM_LINE - 48];
  shm_word_t attached;     /* ranks that mapped the segment */
} shm_hdr_t;

typedef struct {
  int used;
  int one;                 /* one buffer every rank maps (mem_alloc_one): never a zero-copy operand */
  int id;                  /* same on every rank: allocation order */
  size_t bytes;
  void *map;
  size_t map_len;
  char *base[64];          /* every rank's buffer, as mapped here (world <= 64) */
} shm_alloc_t;

/* ---- the tuner (shm_tune.c over tune.c): which mechanism an allreduce of ordinary buffers
 * uses per size class, chosen by a short calibration agreed across ranks (docs/tuner.md). ---- */
enum { SHM_MECH_DIRECT, SHM_MECH_CMA, SHM_MECH_RING, SHM_NMECH = CDDP_TUNE_NMECH };
enum { SHM_SET_CMA = 1, SHM_SET_DIRECT = 2, SHM_SET_NOTUNE = 4 }; /* knobs forced by some rank */
enum { SHM_TUNE_OFF = CDDP_TUNE_OFF, SHM_TUNE_PENDING = CDDP_TUNE_PENDING,
       SHM_TUNE_RUNNING = CDDP_TUNE_RUNNING, SHM_TUNE_DONE = CDDP_TUNE_DONE };
#define SHM_TUNE_ROWS CDDP_TUNE_ROWS
typedef cddp__tune_row_t shm_tune_row_t;
typedef cddp__tune_t shm_tune_t;

typedef struct shm {
  const cddp__comm_ctx_t *ctx;
  int rank, world;
  shm_hdr_t *hdr;
  size_t seg_bytes;
  shm_ctl_t *ctl;          /* world entries */
  char *slot[SHM_NSLOT][64]; /* staging slots [step % SHM_NSLOT][rank], page aligned */
  size_t slot_bytes, chunk_bytes, direct_max;
  uint32_t step;           /* last step this rank started */
  uint64_t spin_ns;
  size_t nt_bytes;         /* non-temporal stores from this size on (0: never): see knobs.h */
  int pidfd[64];           /* peers' pidfds (-1: use kill(pid, 0)) */
  int next_alloc_id;
  shm_alloc_t allocs[SHM_MAX_ALLOCS];
  int cma;                 /* every rank may process_vm_readv/writev every other */
  uint64_t cma_probe;      /* init: the value peers read to test CMA */
  char *scratch;           /* CMA: peers' slices land here (L2-sized), 4 KiB of room */
  size_t scratch_bytes;
  shm_tune_t tune;
  int logged;
  const char *what;        /* collective name, for error messages */
  cddp__fp_t fp_next;      /* the call whose first arrival is next (seq 0: none, or no check) */
} shm_t;

/* ---- shm_sync.c ---- */
/* Posts step on word (release) and wakes sleepers of rank's words. */
void cddp__shm_post(shm_t *s, _Atomic uint32_t *word, uint32_t step);
/* Waits until *word (written by peer) reaches step: spins spin_ns, then futex sleeps in
 * short slices, checking abort, the deadline and the peer's liveness. */
cddp_result_t cddp__shm_wait(shm_t *s, int peer, _Atomic uint32_t *word, uint32_t step,
                             uint64_t deadline);
/* Posts this rank's arrive word and waits for every peer's. */
cddp_result_t cddp__shm_arrive_all(shm_t *s, uint32_t step, uint64_t deadline);
/* Posts this rank's reduced word and waits for every peer's. */
cddp_result_t cddp__shm_reduced_all(shm_t *s, uint32_t step, uint64_t deadline);
/* Opens pidfds for the peers (falls back to kill(pid, 0) where unavailable). */
void cddp__shm_liveness_open(shm_t *s);
void cddp__shm_liveness_close(shm_t *s);
/* OK while peer is alive and in the comm; REMOTE naming it otherwise. */
cddp_result_t cddp__shm_check_peer(shm_t *s, int peer);
/* FUTEX_WAKE on every word a waiter of this process could sleep on. */
void cddp__shm_wake_all(shm_t *s);

/* ---- shm_algo.c ---- */
cddp_result_t cddp__shm_run(shm_t *s, const cddp__coll_t *coll);
/* Which allocation holds [p, p+len) on this rank; -1 if none. *off = offset in it. */
int cddp__shm_find_alloc(shm_t *s, const void *p, size_t len, uint64_t *off);

/* ---- shm_cma.c: cross-memory attach (process_vm_readv/writev) ---- */
/* Collective, at init: every rank checks it can read every peer; s->cma = all could. */
cddp_result_t cddp__shm_cma_probe(shm_t *s, uint64_t deadline);
/* Allreduce with each rank reading its slice of the peers' buffers into scratch, reducing,
 * and writing the result into the peers' buffers: one pass, no staging hand-off. The caller
 * did the handshake step (descriptors with addresses) and the final reduced_all. Returns
 * INVALID_USAGE (nothing done, same on every rank) when the buffers do not qualify. */
cddp_result_t cddp__shm_allreduce_cma(shm_t *s, const cddp__coll_t *c, size_t es, double scale);
int cddp__shm_cma_usable(shm_t *s, const cddp__coll_t *c, size_t es);

/* ---- shm_tune.c ---- */
/* Init, after the CMA probe: the agreed knobs decide whether a calibration is pending. */
void cddp__shm_tune_init(shm_t *s);
/* SHM_SET_* bits for the knobs this process's environment sets (published at init). */
uint32_t cddp__shm_tune_knobs(void);
/* Collective: the first allreduce above 4 KiB of every rank calls it (the same call of the
 * same sequence on every rank); measures each candidate mechanism per size class on its own
 * buffers, agrees the figures (max over ranks), fills s->tune. Bounded by the budget. */
cddp_result_t cddp__shm_tune_run(shm_t *s, uint64_t deadline);
/* The mechanism for an allreduce of total bytes under CDDP_ALGO=auto. */
int cddp__shm_tune_pick(const shm_t *s, size_t total);

/* ---- shm_kern.c: copies and two-destination reduction for the zero-copy path ---- */
/* Prefetches [p, p+bytes) for writing (PREFETCHW): takes the lines back from the peer that
 * read them, off the critical path, so the next stores into them do not stall. */
void cddp__shm_prefetchw(const void *p, size_t bytes);
/* memcpy; with nt, non-temporal stores (caller fences before publishing). */
void cddp__shm_copy(void *dst, const void *src, size_t bytes, int nt);
/* Two-rank f32 sum/avg writing two destinations in one pass (d1 may be NULL; nt streams d1):
 * d0[i] = d1[i] = (a[i] + b[i]) (* scale when avg). Bit-identical to cddp__reduce_n. */
void cddp__shm_sum2_f32(float *d0, float *d1, const float *a, const float *b, size_t n,
                        float scale, int avg, int nt);

#endif /* CDDP_COMM_SHM_H */
