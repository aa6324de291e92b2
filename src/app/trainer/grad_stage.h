/* grad_stage.h - a device's gradients to DDP bucket by bucket, during backward, on the device's
 * comm stream: copied to DDP's host buffer for the native transports, or (direct) all-reduced
 * in place by NCCL, each bucket after the compute stream's mark (docs/gpu.md). */
#ifndef CDDP_TRAINER_GRAD_STAGE_H
#define CDDP_TRAINER_GRAD_STAGE_H

#include <stddef.h>

#include "cddp/ddp.h"

struct cddp_ops;

typedef struct cddp__grad_stage {
  const struct cddp_ops *dev;
  cddp_ddp_t *ddp;
  const float *dev_grads; /* the device's gradients */
  float *host_grads;      /* DDP's buffer, n floats (NULL when direct) */
  int direct;             /* NCCL: DDP's buckets are slices of dev_grads, queued on the comm stream */
  float unscale;          /* fp16: each piece is multiplied by it (1/S) before it leaves (1: not) */
  size_t n;
  size_t queued_to;       /* [queued_to, n) is queued to the host, or there */
  size_t held_off;        /* the last piece, queued but not yet handed to DDP, is at [held_off, ...) */
  int held;               /* 1: held_off's copy (done[cur ^ 1]) is pending */
  int cur;                /* the done event the next piece's copy records */
  void *ready;            /* the compute stream's mark before each piece */
  void *done[2];          /* the last two pieces' copies */
  void *back;             /* the reduced gradients' copy back, waited for by the compute stream */
} cddp__grad_stage_t;

/* The events; CDDP_SYSTEM when the device has none left. */
cddp_result_t cddp__grad_stage_init(cddp__grad_stage_t *s, const struct cddp_ops *dev, cddp_ddp_t *ddp,
                                    const float *dev_grads, float *host_grads, size_t n);
/* Direct: DDP (over a communicator of backend nccl on the table's comm stream) all-reduces
 * dev_grads itself; each bucket's collective waits for its mark only. INVALID_USAGE when the
 * table has no device collectives (comm_wait). */
cddp_result_t cddp__grad_stage_init_direct(cddp__grad_stage_t *s, const struct cddp_ops *dev, cddp_ddp_t *ddp,
                                           const float *dev_grads, size_t n);
void cddp__grad_stage_destroy(cddp__grad_stage_t *s);
/* Before backward; unscale: 1, or fp16's 1/S, taken off each piece on the compute stream before
 * its mark, so the all-reduce carries the true gradients. */
void cddp__grad_stage_begin(cddp__grad_stage_t *s, float unscale);
/* The backward hook (ctx = the stage): the device's gradients at [offset, n) are final. Queues
 * them to the host after a mark on the compute stream, and hands the piece before to DDP once
 * its copy is done (a piece late, so the host waits on a copy the device has likely finished).
 * Direct: the comm stream waits for the mark, and DDP starts the buckets inside [offset, n)
 * at once (NCCL queues them on the comm stream behind that wait). */
void cddp__grad_stage_ready(void *ctx, size_t offset);
/* After backward: the rest to DDP, DDP's finish, the sum back to the device; the compute
 * stream's later work (the optimizer) waits for that copy, the host does not. Direct: the
 * compute stream waits for the comm stream's all-reduces instead. */
cddp_result_t cddp__grad_stage_finish(cddp__grad_stage_t *s);

#endif /* CDDP_TRAINER_GRAD_STAGE_H */
