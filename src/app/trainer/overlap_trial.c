/* overlap_trial.c - see overlap_trial.h. Why measure: on 2 ranks x 1 thread on 2 cores the
 * all-reduce overlapped with backward time-slices the cores backward uses, and which way wins
 * went one way on one VM (16.4k against 17.9k samples/s) and the other on the next (16.5k
 * against 16.0k): a constant rule is wrong on one of them. */
#include "trainer/overlap_trial.h"

#include <stdlib.h>
#include <string.h>

#include "cddp/comm.h"
#include "common/check.h"
#include "common/knobs.h"
#include "common/log.h"
#include "trainer/trainer.h"

enum { TRIAL_SKIP = 2 };

void cddp__overlap_trial_start(trainer_t *t) {
  cddp__overlap_trial_t *o = &t->overlap_trial;
  memset(o, 0, sizeof *o);
  if (t->world < 2 || t->cfg.compress != CDDP_COMPRESS_NONE || strcmp(cddp_comm_transport(cddp_world_comm(t->w)), "shm") != 0)
    return;
  if (!t->zero1.on)
    o->ways |= t->cfg.overlap == CDDP_OVERLAP_AUTO ? (1 << CDDP__WAY_AFTER) | (1 << CDDP__WAY_OVERLAPPED) : 1 << t->overlap;
  if (t->zero1.candidate && !t->zero1.on) o->ways |= 1 << CDDP__WAY_SHARDED;
  o->active = __builtin_popcount((unsigned)o->ways) >= 2;
  o->skip = TRIAL_SKIP;
  o->mode = t->overlap;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static int timed(const cddp__overlap_trial_t *o, int w) { return !(o->ways >> w & 1) || o->n[w] == CDDP__OVERLAP_TRIAL_STEPS; }

static const char *way_name(int w) {
  return w == CDDP__WAY_SHARDED ? "ZeRO-1 sharing the weights" : w == CDDP__WAY_OVERLAPPED ? "overlapped" : "after backward";
}

/* Every way timed: the ranks' medians summed, the fastest kept (CDDP_TRIAL_PICK may name one). */
static cddp_result_t decide(trainer_t *t) {
  cddp__overlap_trial_t *o = &t->overlap_trial;
  enum { N = CDDP__OVERLAP_TRIAL_STEPS };
  double sum[CDDP__WAYS] = {0, 0, 0};
  for (int w = 0; w < CDDP__WAYS; w++)
    if (o->ways >> w & 1) sum[w] = median(o->ms[w], N);
  CDDP_CHECK(cddp_allreduce(cddp_world_comm(t->w), sum, sum, CDDP__WAYS, CDDP_F64, CDDP_SUM));
  o->active = 0;
  int best = -1, reduce = -1; /* the fastest way, the fastest all-reduce way */
  for (int w = 0; w < CDDP__WAYS; w++) {
    if (!(o->ways >> w & 1)) continue;
    if (best < 0 || sum[w] < sum[best]) best = w;
    if (w != CDDP__WAY_SHARDED && (reduce < 0 || sum[w] < sum[reduce])) reduce = w;
  }
  const char *pick = cddp__knob_str(CDDP_KNOB_TRIAL_PICK);
  int picked = -1;
  for (int w = 0; w < CDDP__WAYS; w++)
    if (*pick && (o->ways >> w & 1) && !strcmp(pick, w == CDDP__WAY_SHARDED ? "sharded" : w ? "overlapped" : "after")) picked = w;
  if (*pick && picked < 0)
    CDDP_WARN("CDDP_TRIAL_PICK=%s names no way this trial timed (after, overlapped, sharded): the fastest is kept", pick);
  if (picked >= 0) best = picked;
  if ((o->ways & 3) == 3 && t->rank == 0)
    CDDP_INFO(CDDP_SUB_TRAIN,
              "ddp.overlap auto: median step %.2f ms overlapped with backward, %.2f ms after it "
              "(%d steps each, mean of %d ranks): %s",
              sum[1] / t->world, sum[0] / t->world, N, t->world, way_name(reduce));
  if (o->ways >> CDDP__WAY_SHARDED & 1 && t->rank == 0)
    CDDP_INFO(CDDP_SUB_TRAIN,
              "ddp.shard_optimizer auto: median step %.2f ms with ZeRO-1 sharing the weights, %.2f ms with the all-reduce "
              "%s (%d steps each, mean of %d ranks): %s%s",
              sum[CDDP__WAY_SHARDED] / t->world, sum[reduce] / t->world, way_name(reduce), N, t->world,
              best == CDDP__WAY_SHARDED ? "ZeRO-1" : "the all-reduce", picked >= 0 ? " (CDDP_TRIAL_PICK)" : "");
  if (best != CDDP__WAY_SHARDED) {
    if (t->zero1.on) CDDP_CHECK(cddp__zero1_leave(t));
    t->overlap = best;
    cddp_ddp_set_overlap(t->ddp, t->overlap);
  }
  return CDDP_OK;
}

cddp_result_t cddp__overlap_trial_begin(trainer_t *t) {
  cddp__overlap_trial_t *o = &t->overlap_trial;
  if (!o->active) return CDDP_OK;
  int reduced = timed(o, CDDP__WAY_AFTER) && timed(o, CDDP__WAY_OVERLAPPED);
  if (reduced && timed(o, CDDP__WAY_SHARDED)) return decide(t);
  if (reduced) { /* the all-reduce ways are timed: ZeRO-1's turn */
    if (!t->zero1.on) {
      CDDP_CHECK(cddp__zero1_enter(t));
      o->skip = 1; /* its first step touches the fresh shard state */
    }
    o->mode = CDDP__WAY_SHARDED;
    return CDDP_OK;
  }
  /* alternate, the way with fewer timed steps first, so drift falls on both alike */
  if ((o->ways & 3) == 3) o->mode = o->skip > 0 ? t->overlap : o->n[1] <= o->n[0];
  else o->mode = o->ways & 1 ? CDDP__WAY_AFTER : CDDP__WAY_OVERLAPPED;
  cddp_ddp_set_overlap(t->ddp, o->mode);
  return CDDP_OK;
}

void cddp__overlap_trial_end(trainer_t *t, uint64_t step_ns) {
  cddp__overlap_trial_t *o = &t->overlap_trial;
  if (!o->active) return;
  if (o->skip > 0) {
    o->skip--;
    return;
  }
  if (o->n[o->mode] < CDDP__OVERLAP_TRIAL_STEPS) o->ms[o->mode][o->n[o->mode]++] = (double)step_ns / 1e6;
}
