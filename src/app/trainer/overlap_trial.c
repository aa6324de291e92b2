/* overlap_trial.c - see overlap_trial.h. Why measure: on 2 ranks x 1 thread on 2 cores the
 * all-reduce overlapped with backward time-slices the cores backward uses, and which way wins
 * went one way on one VM (16.4k against 17.9k samples/s) and the other on the next (16.5k
 * against 16.0k): a constant rule is wrong on one of them. */
#include "trainer/overlap_trial.h"

#include <stdlib.h>
#include <string.h>

#include "cddp/comm.h"
#include "common/check.h"
#include "common/log.h"
#include "trainer/trainer.h"

enum { TRIAL_SKIP = 2 };

void cddp__overlap_trial_start(trainer_t *t) {
  cddp__overlap_trial_t *o = &t->overlap_trial;
  memset(o, 0, sizeof *o);
  o->active = t->cfg.overlap == CDDP_OVERLAP_AUTO && t->world > 1 && !t->zero1.on &&
              t->cfg.compress == CDDP_COMPRESS_NONE &&
              strcmp(cddp_comm_transport(cddp_world_comm(t->w)), "shm") == 0;
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

cddp_result_t cddp__overlap_trial_begin(trainer_t *t) {
  cddp__overlap_trial_t *o = &t->overlap_trial;
  if (!o->active) return CDDP_OK;
  enum { N = CDDP__OVERLAP_TRIAL_STEPS };
  if (o->n[0] == N && o->n[1] == N) {
    double sum[2] = {median(o->ms[0], N), median(o->ms[1], N)};
    CDDP_CHECK(cddp_allreduce(cddp_world_comm(t->w), sum, sum, 2, CDDP_F64, CDDP_SUM));
    o->active = 0;
    t->overlap = sum[1] < sum[0];
    cddp_ddp_set_overlap(t->ddp, t->overlap);
    if (t->rank == 0)
      CDDP_INFO(CDDP_SUB_TRAIN,
                "ddp.overlap auto: median step %.2f ms overlapped with backward, %.2f ms after it "
                "(%d steps each, mean of %d ranks): %s",
                sum[1] / t->world, sum[0] / t->world, N, t->world,
                t->overlap ? "overlapped" : "after backward");
    return CDDP_OK;
  }
  /* alternate, the way with fewer timed steps first, so drift falls on both alike */
  o->mode = o->skip > 0 ? t->overlap : o->n[1] <= o->n[0];
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
