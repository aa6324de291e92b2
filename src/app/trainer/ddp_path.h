/* ddp_path.h - how a device's gradients are all-reduced (ddp.backend: auto|native|nccl): by
 * NCCL on the device buffers themselves, one GPU per rank (as torch's DDP takes NCCL for CUDA
 * tensors), or copied to pinned host memory for the native transports (grad_stage.c). Each
 * rank says what it can do (a reason code), the ranks all-gather the codes, and the choice is
 * a pure function of them, so every rank takes the same path and the policy is tested on the
 * CPU (tests/unit/test_ddp_path.c). */
#ifndef CDDP_TRAINER_DDP_PATH_H
#define CDDP_TRAINER_DDP_PATH_H

#include <stddef.h>
#include <stdint.h>

#include "cddp/cddp.h"

/* ddp.backend's choices, in the schema's order */
typedef enum cddp_ddp_backend { CDDP_DDP_BACKEND_AUTO = 0, CDDP_DDP_BACKEND_NATIVE = 1, CDDP_DDP_BACKEND_NCCL = 2 } cddp_ddp_backend_t;

typedef enum cddp__ddp_path {
  CDDP__DDP_PATH_HOST = 0, /* the CPU trainer: the gradients are host memory already */
  CDDP__DDP_PATH_STAGED,   /* a device's gradients through pinned host memory, native transports */
  CDDP__DDP_PATH_NCCL      /* NCCL on the device's gradients, on the comm stream */
} cddp__ddp_path_t;

/* Why a rank cannot all-reduce its gradients with NCCL (0: it can). */
typedef enum cddp__nccl_why {
  CDDP__NCCL_CAN = 0,
  CDDP__NCCL_ON_CPU,     /* its model trains on the CPU (train.device) */
  CDDP__NCCL_EMULATED,   /* the emulated device (tests): no GPU, no NCCL */
  CDDP__NCCL_SHARED_GPU, /* it shares its GPU with other local ranks; NCCL needs one GPU per rank */
  CDDP__NCCL_MISSING,    /* NCCL or the driver cannot run there (not built, libnccl absent, ...) */
  CDDP__NCCL_COMPRESSED, /* ddp.compress works on host memory */
  CDDP__NCCL_WHY_COUNT
} cddp__nccl_why_t;

/* What one rank knows of itself. */
typedef struct cddp__ddp_local {
  int on_device;        /* its model's state is on a device (CUDA or emulated) */
  int emulated;
  int sharing;          /* other local ranks use its GPU */
  int nccl_ok;          /* cddp__nccl_available() said OK */
  int compressed;       /* ddp.compress is not none */
} cddp__ddp_local_t;

/* This rank's reason code (the first that applies, in the enum's order). */
cddp__nccl_why_t cddp__ddp_nccl_why(const cddp__ddp_local_t *l);
/* A phrase for a code: "it shares its GPU with other local ranks (NCCL needs one GPU per rank)". */
const char *cddp__nccl_why_text(int why);

/* The choice, pure: want (ddp.backend), each rank's code (world of them, as all-gathered),
 * whether this rank trains on a device. HOST on the CPU unless nccl is asked for; NCCL when
 * every rank can and nccl is asked for, or auto with world > 1 (a world of one has nothing to
 * combine: auto stages nothing there); else STAGED. `why` gets one line that says which and why
 * (logged at INFO). nccl asked for where some rank cannot is INVALID_ARG, the line naming the
 * first such rank, its reason and ddp.backend. */
cddp_result_t cddp__ddp_path_choose(cddp_ddp_backend_t want, const int64_t *codes, int world, int on_device,
                                    cddp__ddp_path_t *out, char *why, size_t cap);

#endif /* CDDP_TRAINER_DDP_PATH_H */
