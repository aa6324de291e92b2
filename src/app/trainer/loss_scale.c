/* loss_scale.c - GradScaler's update rule (loss_scale.h): back off on an overflow, grow after a
 * run of good steps. */
#include "trainer/loss_scale.h"

void cddp__loss_scale_init(cddp__loss_scale_t *s, float init, int64_t interval) {
  *s = (cddp__loss_scale_t){.on = 1, .scale = init, .interval = interval > 0 ? interval : 1};
}

int cddp__loss_scale_update(cddp__loss_scale_t *s, int found_inf) {
  if (found_inf) {
    s->scale *= CDDP__LOSS_SCALE_BACKOFF;
    s->good = 0;
    s->skipped++;
    return 1;
  }
  if (++s->good >= s->interval) {
    s->scale *= CDDP__LOSS_SCALE_GROWTH;
    s->good = 0;
  }
  return 0;
}
