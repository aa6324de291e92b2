/* sampler.h - the distributed sampler: one global permutation per (seed, epoch); each global
 * batch is a contiguous window of it, split across ranks and accumulation micro-steps. Its
 * state (epoch, samples consumed this epoch) is world-size independent, so a run resumed on
 * any world size sees every sample of the epoch exactly once. */
#ifndef CDDP_TRAINER_SAMPLER_H
#define CDDP_TRAINER_SAMPLER_H

#include <stddef.h>
#include <stdint.h>

#include "cddp/cddp.h"

typedef struct cddp_sampler {
  uint64_t seed;
  size_t n;            /* samples in the data set */
  int global_batch;
  int drop_last;       /* 1: the short last batch is dropped; 0: it is kept, padded with
                          empty (zero-weight) slots so every rank still takes part */
  /* state, saved in checkpoints */
  uint64_t epoch;
  uint64_t consumed;   /* samples of this epoch's permutation already handed out */
  /* derived */
  uint32_t *perm;      /* permutation of [0, n) for `epoch` */
  uint64_t perm_epoch;
} cddp_sampler_t;

cddp_result_t cddp__sampler_init(cddp_sampler_t *s, uint64_t seed, size_t n, int global_batch,
                                int drop_last);
void cddp__sampler_free(cddp_sampler_t *s);
/* Optimizer steps in one epoch. */
int64_t cddp__sampler_steps_per_epoch(const cddp_sampler_t *s);
/* Moves the state to (epoch, consumed) as restored from a checkpoint. consumed must be a
 * multiple of global_batch or the epoch's end. */
cddp_result_t cddp__sampler_restore(cddp_sampler_t *s, uint64_t epoch, uint64_t consumed);
/* The indices rank `rank` of `world` uses in micro-step `micro` (0..accum-1) of the current
 * global batch, micro_batch slots: writes up to micro_batch indices, returns how many are
 * real (the rest is padding). Slot k of (micro, rank) is batch position
 * (micro * world + rank) * micro_batch + k. Does not advance. */
int cddp__sampler_micro(cddp_sampler_t *s, int rank, int world, int micro, int micro_batch,
                       uint32_t *idx);
/* cddp__sampler_micro of the next global batch, without advancing; -1 (idx untouched) when
 * that batch is in the next epoch, whose permutation is not made yet. */
int cddp__sampler_micro_next(const cddp_sampler_t *s, int rank, int world, int micro,
                             int micro_batch, uint32_t *idx);
/* Real samples in the current global batch (global_batch, or fewer for the padded last). */
int cddp__sampler_batch_size(const cddp_sampler_t *s);
/* Moves past the current global batch; rolls to the next epoch at the end. Returns 1 when
 * an epoch just ended. */
int cddp__sampler_advance(cddp_sampler_t *s);

#endif /* CDDP_TRAINER_SAMPLER_H */
