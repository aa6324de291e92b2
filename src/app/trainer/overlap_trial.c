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

/* The way CDDP_TRIAL_PICK names among those timed, else -1 (a name of no such way is warned about). */
static int picked_way(const cddp__overlap_trial_t *o) {
  const char *pick = cddp__knob_str(CDDP_KNOB_TRIAL_PICK);
  if (!*pick) return -1;
  for (int w = 0; w < CDDP__WAYS; w++)
    if ((o->ways >> w & 1) && !strcmp(pick, w == CDDP__WAY_SHARDED ? "sharded" : w ? "overlapped" : "after")) return w;
  CDDP_WARN("CDDP_TRIAL_PICK=%s names no way this trial timed (after, overlapped, sharded): the fastest is kept", pick);
  return -1;
}

/* The all-reduce's ways are timed: the ranks' medians summed, the faster one in *reduce. */
static cddp_result_t end_reduce_phase(trainer_t *t, int *reduce) {
  cddp__overlap_trial_t *o = &t->overlap_trial;
  enum { N = CDDP__OVERLAP_TRIAL_STEPS };
  double sum[2] = {0, 0};
  for (int w = 0; w < 2; w++)
    if (o->ways >> w & 1) sum[w] = median(o->ms[w], N);
  CDDP_CHECK(cddp_allreduce(cddp_world_comm(t->w), sum, sum, 2, CDDP_F64, CDDP_SUM));
  if ((o->ways & 3) != 3) {
    *reduce = o->ways & 1 ? CDDP__WAY_AFTER : CDDP__WAY_OVERLAPPED;
    return CDDP_OK;
  }
  *reduce = sum[1] < sum[0] ? CDDP__WAY_OVERLAPPED : CDDP__WAY_AFTER;
  if (t->rank == 0)
    CDDP_INFO(CDDP_SUB_TRAIN,
              "ddp.overlap auto: median step %.2f ms overlapped with backward, %.2f ms after it "
              "(%d steps each, mean of %d ranks): %s",
              sum[1] / t->world, sum[0] / t->world, N, t->world, way_name(*reduce));
  return CDDP_OK;
}

static void keep_reduce(trainer_t *t, int way) {
  t->overlap = way;
  cddp_ddp_set_overlap(t->ddp, t->overlap);
}

/* Both blocks' steps are timed: ZeRO-1 against the all-reduce's faster way, the ranks' medians
 * summed; the faster is kept (CDDP_TRIAL_PICK may name one). */
static cddp_result_t end_sharded_phase(trainer_t *t) {
  cddp__overlap_trial_t *o = &t->overlap_trial;
  enum { N = CDDP__OVERLAP_TRIAL_STEPS };
  double sum[2] = {median(o->ms2[0], N), median(o->ms2[1], N)};
  CDDP_CHECK(cddp_allreduce(cddp_world_comm(t->w), sum, sum, 2, CDDP_F64, CDDP_SUM));
  o->active = 0;
  int picked = picked_way(o), way = picked >= 0 ? picked : sum[1] < sum[0] ? CDDP__WAY_SHARDED : o->ref;
  if (t->rank == 0)
    CDDP_INFO(CDDP_SUB_TRAIN,
              "ddp.shard_optimizer auto: median step %.2f ms with ZeRO-1 sharing the weights, %.2f ms with the all-reduce "
              "%s (%d steps each, in turns of %d, mean of %d ranks): %s%s",
              sum[1] / t->world, sum[0] / t->world, way_name(o->ref), N, CDDP__TRIAL_TURN, t->world,
              way == CDDP__WAY_SHARDED ? "ZeRO-1" : "the all-reduce", picked >= 0 ? " (CDDP_TRIAL_PICK)" : "");
  if (way == CDDP__WAY_SHARDED) return t->zero1.on ? CDDP_OK : cddp__zero1_enter(t);
  if (t->zero1.on) CDDP_CHECK(cddp__zero1_leave(t));
  keep_reduce(t, way);
  return CDDP_OK;
}

cddp_result_t cddp__overlap_trial_begin(trainer_t *t) {
  cddp__overlap_trial_t *o = &t->overlap_trial;
  if (!o->active) return CDDP_OK;
  if (!o->sharded_phase) {
    if (!timed(o, CDDP__WAY_AFTER) || !timed(o, CDDP__WAY_OVERLAPPED)) {
      /* alternate, the way with fewer timed steps first, so drift falls on both alike */
      if ((o->ways & 3) == 3) o->mode = o->skip > 0 ? t->overlap : o->n[1] <= o->n[0];
      else o->mode = o->ways & 1 ? CDDP__WAY_AFTER : CDDP__WAY_OVERLAPPED;
      cddp_ddp_set_overlap(t->ddp, o->mode);
      return CDDP_OK;
    }
    int reduce;
    CDDP_CHECK(end_reduce_phase(t, &reduce));
    if (!(o->ways >> CDDP__WAY_SHARDED & 1)) {
      int picked = picked_way(o);
      o->active = 0;
      keep_reduce(t, picked >= 0 ? picked : reduce);
      return CDDP_OK;
    }
    keep_reduce(t, reduce);
    o->sharded_phase = 1, o->ref = reduce, o->left = 0, o->mode = reduce;
  }
  /* ZeRO-1 and the all-reduce's faster way take turns of CDDP__TRIAL_TURN timed steps, each
   * after a step left untimed (the switch touches fresh state), so drift falls on both alike */
  if (o->left > 0) return CDDP_OK;
  if (o->n2[0] == CDDP__OVERLAP_TRIAL_STEPS && o->n2[1] == CDDP__OVERLAP_TRIAL_STEPS) return end_sharded_phase(t);
  if (o->n2[1] <= o->n2[0]) {
    CDDP_CHECK(cddp__zero1_enter(t));
    o->mode = CDDP__WAY_SHARDED;
  } else {
    CDDP_CHECK(cddp__zero1_leave(t));
    keep_reduce(t, o->ref);
    o->mode = o->ref;
  }
  o->left = CDDP__TRIAL_TURN, o->skip = 1;
  return CDDP_OK;
}

void cddp__overlap_trial_end(trainer_t *t, uint64_t step_ns) {
  cddp__overlap_trial_t *o = &t->overlap_trial;
  if (!o->active) return;
  if (o->skip > 0) {
    o->skip--;
    return;
  }
  if (o->sharded_phase) {
    int k = o->mode == CDDP__WAY_SHARDED;
    if (o->n2[k] < CDDP__OVERLAP_TRIAL_STEPS) o->ms2[k][o->n2[k]++] = (double)step_ns / 1e6;
    if (o->left > 0) o->left--;
    return;
  }
  if (o->n[o->mode] < CDDP__OVERLAP_TRIAL_STEPS) o->ms[o->mode][o->n[o->mode]++] = (double)step_ns / 1e6;
}
