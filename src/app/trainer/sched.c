/* sched.c - learning-rate schedules: linear warmup, then constant, cosine or linear decay. */
#include <math.h>

#include "common/check.h"
#include "trainer/optim.h"

cddp_result_t cddp__sched_check(const cddp_sched_spec_t *s) {
  if (s->kind != CDDP_SCHED_CONSTANT && s->kind != CDDP_SCHED_COSINE && s->kind != CDDP_SCHED_LINEAR)
    return cddp__fail(CDDP_INVALID_ARG, "schedule: unknown kind %d (constant, cosine or linear)",
                      (int)s->kind);
  if (!(isfinite(s->lr) && s->lr >= 0))
    return cddp__fail(CDDP_INVALID_ARG, "schedule: lr %g must be >= 0", s->lr);
  if (!(isfinite(s->min_lr) && s->min_lr >= 0 && s->min_lr <= s->lr))
    return cddp__fail(CDDP_INVALID_ARG, "schedule: min_lr %g must be in [0, lr=%g]", s->min_lr,
                      s->lr);
  if (s->warmup < 0)
    return cddp__fail(CDDP_INVALID_ARG, "schedule: warmup %lld must be >= 0",
                      (long long)s->warmup);
  if (s->total < 0)
    return cddp__fail(CDDP_INVALID_ARG, "schedule: total %lld steps must be >= 0",
                      (long long)s->total);
  return CDDP_OK;
}

/* step < warmup:  lr * (step + 1) / warmup
 * otherwise, with progress = clamp((step - warmup) / max(1, total - warmup), 0, 1):
 *   constant  lr
 *   cosine    min_lr + (lr - min_lr) * (1 + cos(pi * progress)) / 2
 *   linear    min_lr + (lr - min_lr) * (1 - progress)
 * computed in double (as LambdaLR does in Python), rounded once to float. */
float cddp__sched_lr(const cddp_sched_spec_t *s, int64_t step) {
  double lr = s->lr, min_lr = s->min_lr;
  if (step < 0) step = 0;
  if (s->warmup > 0 && step < s->warmup) return (float)(lr * (double)(step + 1) / (double)s->warmup);
  if (s->kind == CDDP_SCHED_CONSTANT) return (float)lr;
  double span = (double)CDDP_MAX(s->total - s->warmup, (int64_t)1);
  double progress = (double)(step - s->warmup) / span;
  progress = progress < 0 ? 0 : progress > 1 ? 1 : progress;
  double f = s->kind == CDDP_SCHED_COSINE ? 0.5 * (1.0 + cos(M_PI * progress)) : 1.0 - progress;
  return (float)(min_lr + (lr - min_lr) * f);
}
