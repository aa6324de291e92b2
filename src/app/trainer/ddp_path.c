/* ddp_path.c - NCCL on the device's gradients, or the native transports through pinned host
 * memory: the ranks' codes in, one path out, the same on every rank (ddp_path.h). */
#include "trainer/ddp_path.h"

#include <stdio.h>

#include "common/check.h"

cddp__nccl_why_t cddp__ddp_nccl_why(const cddp__ddp_local_t *l) {
  if (!l->on_device) return CDDP__NCCL_ON_CPU;
  if (l->emulated) return CDDP__NCCL_EMULATED;
  if (l->sharing) return CDDP__NCCL_SHARED_GPU;
  if (!l->nccl_ok) return CDDP__NCCL_MISSING;
  if (l->compressed) return CDDP__NCCL_COMPRESSED;
  return CDDP__NCCL_CAN;
}

const char *cddp__nccl_why_text(int why) {
  switch (why) {
    case CDDP__NCCL_CAN: return "it has a GPU of its own and NCCL";
    case CDDP__NCCL_ON_CPU: return "its model trains on the CPU (train.device)";
    case CDDP__NCCL_EMULATED: return "the emulated device has no NCCL";
    case CDDP__NCCL_SHARED_GPU: return "it shares its GPU with other local ranks (NCCL needs one GPU per rank)";
    case CDDP__NCCL_MISSING: return "NCCL cannot run there (its own line says why: libnccl.so.2, the driver or the build)";
    case CDDP__NCCL_COMPRESSED: return "ddp.compress works on host memory";
    default: return "it sent an unknown reason";
  }
}

cddp_result_t cddp__ddp_path_choose(cddp_ddp_backend_t want, const int64_t *codes, int world, int on_device,
                                    cddp__ddp_path_t *out, char *why, size_t cap) {
  if (want == CDDP_DDP_BACKEND_NCCL && !on_device) {
    *out = CDDP__DDP_PATH_HOST;
    snprintf(why, cap, "ddp.backend nccl all-reduces GPU buffers, but the model trains on the CPU here (train.device); "
             "use ddp.backend auto or native");
    return cddp__fail(CDDP_INVALID_ARG, "%s", why);
  }
  int bad = -1; /* the first rank that cannot use NCCL */
  for (int r = 0; r < world && bad < 0; r++)
    if (codes[r] != CDDP__NCCL_CAN) bad = r;
  if (want == CDDP_DDP_BACKEND_NCCL && bad >= 0) {
    *out = on_device ? CDDP__DDP_PATH_STAGED : CDDP__DDP_PATH_HOST;
    snprintf(why, cap, "ddp.backend nccl: rank %d cannot all-reduce its gradients with NCCL: %s (use ddp.backend auto "
             "or native)", bad, cddp__nccl_why_text((int)codes[bad]));
    return cddp__fail(CDDP_INVALID_ARG, "%s", why);
  }
  if (!on_device) {
    *out = CDDP__DDP_PATH_HOST;
    snprintf(why, cap, "ddp: the gradients are in host memory (train.device cpu)");
  } else if (want == CDDP_DDP_BACKEND_NCCL) {
    *out = CDDP__DDP_PATH_NCCL;
    snprintf(why, cap, "ddp: NCCL all-reduces the device's gradients in place (ddp.backend nccl; every rank has a GPU "
             "of its own)");
  } else if (want == CDDP_DDP_BACKEND_NATIVE) {
    *out = CDDP__DDP_PATH_STAGED;
    snprintf(why, cap, "ddp: the device's gradients are staged through pinned host memory for the native transports "
             "(ddp.backend native)");
  } else if (world == 1) {
    *out = CDDP__DDP_PATH_STAGED;
    snprintf(why, cap, "ddp: a world of one: the device's gradients are not all-reduced (ddp.backend auto)");
  } else if (bad >= 0) {
    *out = CDDP__DDP_PATH_STAGED;
    snprintf(why, cap, "ddp: the device's gradients are staged through pinned host memory for the native transports "
             "(ddp.backend auto): rank %d cannot use NCCL: %s", bad, cddp__nccl_why_text((int)codes[bad]));
  } else {
    *out = CDDP__DDP_PATH_NCCL;
    snprintf(why, cap, "ddp: NCCL all-reduces the device's gradients in place (ddp.backend auto: every rank has a GPU "
             "of its own and NCCL)");
  }
  return CDDP_OK;
}
