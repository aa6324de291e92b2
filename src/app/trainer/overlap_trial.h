/* overlap_trial.h - ddp.overlap auto over shared memory, chosen by measurement (issue 15): the
 * first steps of a run (and of each re-formed world) alternate the all-reduce overlapped with
 * backward and after it; the ranks add up their median step times in one all-reduce, so every
 * rank takes the same choice, which the trainer keeps for the rest of the run. */
#ifndef CDDP_TRAIN_OVERLAP_TRIAL_H
#define CDDP_TRAIN_OVERLAP_TRIAL_H

#include <stdint.h>

#include "cddp/cddp.h"

enum { CDDP__OVERLAP_TRIAL_STEPS = 6 }; /* steps timed each way */

typedef struct cddp__overlap_trial {
  int active;   /* steps are still being timed */
  int skip;     /* steps left before timing starts (page faults, cold caches) */
  int mode;     /* this step's choice: 1 overlapped, 0 after backward */
  int n[2];     /* steps timed after backward [0] and overlapped [1] */
  double ms[2][CDDP__OVERLAP_TRIAL_STEPS];
} cddp__overlap_trial_t;

struct trainer;
/* After the DDP is (re)made with t->overlap from the rule: starts a trial where ddp.overlap is
 * auto, the transport is shm, world > 1, the gradients travel uncompressed and unsharded. Over
 * shm every algorithm sums each element in rank order, so both choices give the same bits and
 * the trial cannot change a run's losses. */
void cddp__overlap_trial_start(struct trainer *t);
/* At a step's start, before anything of the step: once both ways are timed, the ranks' one
 * all-reduce and the choice (said at CDDP_DEBUG=INFO); meanwhile, this step's way. A failed
 * all-reduce fails a step that has not begun. */
cddp_result_t cddp__overlap_trial_begin(struct trainer *t);
/* At a step's end: its wall time. */
void cddp__overlap_trial_end(struct trainer *t, uint64_t step_ns);

#endif /* CDDP_TRAIN_OVERLAP_TRIAL_H */
