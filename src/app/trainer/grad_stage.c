/* grad_stage.c - a device's gradients cross to DDP's host buffer piece by piece as backward
 * finishes them, as PyTorch's DDP starts a bucket when its gradients are ready: each piece's
 * copy runs on the comm stream after a mark recorded on the compute stream just then, so the
 * copy waits for that piece's kernels and nothing later, and backward keeps the device busy
 * meanwhile. The host hands a piece to DDP (whose buckets the native transports all-reduce)
 * only after its copy's event; the sum goes back on the copy stream, and the optimizer's
 * kernels wait for it on the device. Direct (NCCL, one GPU per rank): no copies; NCCL reduces
 * the device's buckets in place on the comm stream, each after its mark, and the optimizer's
 * kernels wait for the comm stream's event. */
#include "trainer/grad_stage.h"

#include "common/check.h"
#include "trainer/ops.h"

cddp_result_t cddp__grad_stage_init(cddp__grad_stage_t *s, const cddp_ops_t *dev, cddp_ddp_t *ddp,
                                    const float *dev_grads, float *host_grads, size_t n) {
  *s = (cddp__grad_stage_t){.dev = dev, .ddp = ddp, .dev_grads = dev_grads, .host_grads = host_grads, .n = n};
  s->ready = dev->event_create(), s->done[0] = dev->event_create(), s->done[1] = dev->event_create();
  s->back = dev->event_create();
  if (s->ready && s->done[0] && s->done[1] && s->back) return CDDP_OK;
  cddp__grad_stage_destroy(s);
  return cddp__fail(CDDP_SYSTEM, "the %s device has no events left for the gradients' copies", dev->name);
}

cddp_result_t cddp__grad_stage_init_direct(cddp__grad_stage_t *s, const cddp_ops_t *dev, cddp_ddp_t *ddp,
                                           const float *dev_grads, size_t n) {
  if (!dev->comm_wait || !dev->comm_record)
    return cddp__fail(CDDP_INVALID_USAGE, "the %s device has no collectives of its own: its gradients are staged", dev->name);
  CDDP_CHECK(cddp__grad_stage_init(s, dev, ddp, dev_grads, NULL, n));
  s->direct = 1;
  return CDDP_OK;
}

void cddp__grad_stage_destroy(cddp__grad_stage_t *s) {
  if (!s->dev) return;
  s->dev->sync(); /* no copy may still write the host buffer */
  void *ev[] = {s->ready, s->done[0], s->done[1], s->back};
  for (size_t i = 0; i < sizeof ev / sizeof ev[0]; i++)
    if (ev[i]) s->dev->event_destroy(ev[i]);
  *s = (cddp__grad_stage_t){0};
}

void cddp__grad_stage_begin(cddp__grad_stage_t *s, float unscale) {
  s->queued_to = s->n, s->held = 0, s->unscale = unscale;
}

/* The held piece's copy is done: DDP may start the buckets inside [held_off, n). */
static void hand_over(cddp__grad_stage_t *s) {
  if (!s->held) return;
  s->dev->event_sync(s->done[s->cur ^ 1]);
  s->held = 0;
  cddp_ddp_grad_ready(s->ddp, s->held_off);
}

void cddp__grad_stage_ready(void *ctx, size_t offset) {
  cddp__grad_stage_t *s = ctx;
  if (offset >= s->queued_to) return;
  if (s->unscale != 1.0f) s->dev->scale((float *)s->dev_grads + offset, s->unscale, s->queued_to - offset);
  s->dev->event_record(s->ready);
  if (s->direct) { /* the buckets' all-reduces queue behind this wait on the comm stream */
    s->dev->comm_wait(s->ready);
    s->queued_to = offset;
    cddp_ddp_grad_ready(s->ddp, offset);
    return;
  }
  s->dev->to_host_async(s->host_grads + offset, s->dev_grads + offset, (s->queued_to - offset) * sizeof(float),
                        s->ready, s->done[s->cur]);
  s->queued_to = offset;
  hand_over(s); /* the piece before: its copy was queued one piece of backward ago */
  s->held = 1, s->held_off = offset, s->cur ^= 1;
}

cddp_result_t cddp__grad_stage_finish(cddp__grad_stage_t *s) {
  cddp__grad_stage_ready(s, 0); /* what backward did not report (nothing, when it reports 0) */
  hand_over(s);
  CDDP_CHECK(cddp_ddp_finish(s->ddp));
  if (s->direct) { /* summed in place: the optimizer waits for the comm stream's work */
    s->dev->comm_record(s->back);
    s->dev->event_wait(s->back);
    return CDDP_OK;
  }
  s->dev->to_device_async((void *)s->dev_grads, s->host_grads, s->n * sizeof(float), s->back);
  s->dev->event_wait(s->back);
  return CDDP_OK;
}
