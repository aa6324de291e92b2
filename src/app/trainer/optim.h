/* optim.h - optimizers (SGD momentum/Nesterov, AdamW), gradient clipping, LR schedules. */
#ifndef CDDP_TRAINER_OPTIM_H
#define CDDP_TRAINER_OPTIM_H

#include <stddef.h>
#include <stdint.h>

#include "cddp/cddp.h"

typedef enum cddp_optim_kind { CDDP_OPTIM_SGD = 0, CDDP_OPTIM_ADAMW = 1 } cddp_optim_kind_t;

typedef struct cddp_optim_spec {
  cddp_optim_kind_t kind;
  float momentum;     /* SGD; 0 = plain SGD */
  int nesterov;       /* SGD */
  float weight_decay; /* SGD: L2 added to the gradient (torch.optim.SGD); AdamW: decoupled */
  float beta1, beta2, eps; /* AdamW */
  float grad_clip;    /* max global L2 norm; 0 = off */
} cddp_optim_spec_t;

typedef struct cddp_optim {
  cddp_optim_spec_t spec;
  size_t n;
  float *m;      /* SGD momentum buffer / Adam first moment (NULL when unused) */
  float *v;      /* Adam second moment (NULL when unused) */
  int64_t t;     /* steps taken (Adam bias correction) */
  int m_external; /* Adam: the gradients passed are the momentum itself (sign + vsync + momentum) */
  int v_external; /* Adam: v is written by someone else, already bias-corrected (sign + vsync) */
} cddp_optim_t;

/* The spec's fields in range (one cddp__fail line naming the bad one). */
cddp_result_t cddp__optim_check(const cddp_optim_spec_t *spec);
/* Buffers of n floats the optimizer keeps: 0 (plain SGD), 1 (momentum: m), 2 (AdamW: m, v). */
int cddp__optim_moments(const cddp_optim_spec_t *spec);
cddp_result_t cddp__optim_init(cddp_optim_t *o, const cddp_optim_spec_t *spec, size_t n);
void cddp__optim_free(cddp_optim_t *o);
/* One update with learning rate lr. Clips grads in place first when spec.grad_clip > 0.
 * Returns the global gradient L2 norm before clipping. Matches torch.optim semantics. */
double cddp__optim_step(cddp_optim_t *o, float *params, float *grads, float lr);
/* The exact sum of squares (in double) that clipping takes its norm from. */
double cddp__optim_sumsq(const float *grads, size_t n);
/* ZeRO-1: one update of the o->n elements of this rank's shard (params and grads point at its
 * start). norm is the global gradient norm, the square root of every shard's cddp__optim_sumsq
 * summed over the ranks; clipping (spec.grad_clip > 0) scales by it as cddp__optim_step does. */
void cddp__optim_step_shard(cddp_optim_t *o, float *params, float *grads, float lr, double norm);

typedef enum cddp_sched_kind {
  CDDP_SCHED_CONSTANT = 0, CDDP_SCHED_COSINE = 1, CDDP_SCHED_LINEAR = 2
} cddp_sched_kind_t;

typedef struct cddp_sched_spec {
  cddp_sched_kind_t kind;
  float lr;          /* peak LR (after batch scaling) */
  float min_lr;      /* floor at the end of cosine/linear decay */
  int64_t warmup;    /* linear warmup steps from lr/warmup..lr (0 = none) */
  int64_t total;     /* total optimizer steps of the run */
} cddp_sched_spec_t;

/* Checks a schedule (lr >= 0, 0 <= min_lr <= lr, warmup >= 0, total >= 0, known kind);
 * INVALID_ARG with a line naming the field otherwise. */
cddp_result_t cddp__sched_check(const cddp_sched_spec_t *s);
/* LR at optimizer step `step` (0-based); formulas in docs/optim.md. */
float cddp__sched_lr(const cddp_sched_spec_t *s, int64_t step);

#endif /* CDDP_TRAINER_OPTIM_H */
