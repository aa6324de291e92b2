/* overlap_trial.h - how a step combines the gradients over shared memory, chosen by
 * measurement (issue 15). ddp.overlap auto: the first steps of a run (and of each re-formed
 * world) alternate the all-reduce overlapped with backward and after it. ddp.shard_optimizer
 * auto, where the ranks can share one copy of the weights: then ZeRO-1 with shared weights
 * (trainer/zero1.c) and the all-reduce's faster way take turns of a few steps. At the end of
 * each part the ranks add up their median step times in one all-reduce, so every rank takes
 * the same choice, which the trainer keeps for the rest of the run. Every way gives the same
 * bits, so the trial cannot change a run's losses. */
#ifndef CDDP_TRAINER_OVERLAP_TRIAL_H
#define CDDP_TRAINER_OVERLAP_TRIAL_H

#include <stdint.h>

#include "cddp/cddp.h"

enum { CDDP__OVERLAP_TRIAL_STEPS = 6 }; /* steps timed each way */
enum { CDDP__TRIAL_TURN = 3 };          /* ZeRO-1 against the all-reduce: timed steps a turn */

/* The ways a trial times: the all-reduce after backward, overlapped with it, ZeRO-1 sharing
 * the weights. */
enum { CDDP__WAY_AFTER = 0, CDDP__WAY_OVERLAPPED = 1, CDDP__WAY_SHARDED = 2, CDDP__WAYS = 3 };

typedef struct cddp__overlap_trial {
  int active;   /* steps are still being timed */
  int ways;     /* bit w: way w is timed */
  int skip;     /* steps left before timing starts (page faults, cold caches) */
  int mode;     /* this step's way */
  int n[CDDP__WAYS]; /* steps timed each way (the all-reduce's ways, alternating) */
  double ms[CDDP__WAYS][CDDP__OVERLAP_TRIAL_STEPS];
  int sharded_phase; /* then ZeRO-1 and the all-reduce's faster way (ref) take turns */
  int ref, left;     /* that way; timed steps left in this turn */
  int n2[2];         /* steps timed in turns: the all-reduce [0], ZeRO-1 [1] */
  double ms2[2][CDDP__OVERLAP_TRIAL_STEPS];
} cddp__overlap_trial_t;

struct trainer;
/* After the DDP is (re)made with t->overlap from the rule: starts a trial where the transport
 * is shm, world > 1, the gradients travel uncompressed, and two ways are open: ddp.overlap
 * auto (both all-reduce ways, unless ZeRO-1 is on), and ZeRO-1 a candidate (t->zero1). Over
 * shm every algorithm sums each element in rank order, so every way gives the same bits. */
void cddp__overlap_trial_start(struct trainer *t);
/* At a step's start, before anything of the step: once a part is timed, the ranks' one
 * all-reduce and the choice (said at CDDP_DEBUG=INFO; CDDP_TRIAL_PICK forces the last one, for
 * tests); meanwhile, this step's way: the all-reduce's ways alternate, then ZeRO-1 is entered
 * and left in turns (and left for good if it loses). A failed collective fails a step that has
 * not begun. */
cddp_result_t cddp__overlap_trial_begin(struct trainer *t);
/* At a step's end: its wall time. */
void cddp__overlap_trial_end(struct trainer *t, uint64_t step_ns);

#endif /* CDDP_TRAINER_OVERLAP_TRIAL_H */
