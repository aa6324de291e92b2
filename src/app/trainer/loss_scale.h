/* loss_scale.h - dynamic loss scaling for train.precision fp16 (torch.cuda.amp.GradScaler's
 * rule and defaults): the loss, so every gradient backward computes, is multiplied by S so
 * small gradients survive fp16's range; the gradients are divided by S again before the
 * all-reduce and the optimizer. A step whose gradients hold an inf or a NaN on any rank is
 * skipped by every rank and S is halved; after `interval` good steps in a row S doubles. */
#ifndef CDDP_TRAINER_LOSS_SCALE_H
#define CDDP_TRAINER_LOSS_SCALE_H

#include <stdint.h>

typedef struct cddp__loss_scale {
  int on;           /* train.precision fp16 */
  float scale;      /* S, the factor of the step to come */
  int64_t good;     /* good steps since S last changed (GradScaler's growth tracker) */
  int64_t interval; /* good steps before S doubles (GradScaler: 2000) */
  int64_t skipped;  /* steps skipped so far by this process */
} cddp__loss_scale_t;

#define CDDP__LOSS_SCALE_GROWTH 2.0f  /* GradScaler's growth_factor */
#define CDDP__LOSS_SCALE_BACKOFF 0.5f /* GradScaler's backoff_factor */

/* On, with S = init (GradScaler: 65536) and the growth interval. */
void cddp__loss_scale_init(cddp__loss_scale_t *s, float init, int64_t interval);
/* After a step, with found_inf agreed by every rank: 1 when the step must be skipped (S is
 * halved, the count restarts), else 0 (and S doubles when this was the interval-th good step). */
int cddp__loss_scale_update(cddp__loss_scale_t *s, int found_inf);

#endif /* CDDP_TRAINER_LOSS_SCALE_H */
