/* device.c - train.device: the choice between the CPU and one GPU per local rank, as a pure
 * function of what the CUDA runtime sees (the probe lives in cuda/cuda_rt.cu when built). */
#include "trainer/device.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/check.h"
#include "common/knobs.h"
#include "common/log.h"
#include "trainer/ops.h"

#if !CDDP_HAVE_CUDA
void cddp__cuda_probe(cddp_cuda_probe_t *p) {
  memset(p, 0, sizeof *p);
  p->status = CDDP_CUDA_NOT_BUILT;
}
#endif

const char *cddp__cuda_why_not(const cddp_cuda_probe_t *p, const char *cvd, char *buf, size_t cap) {
  switch (p->status) {
    case CDDP_CUDA_OK:
      snprintf(buf, cap, "%d GPU%s visible", p->count, p->count == 1 ? "" : "s");
      break;
    case CDDP_CUDA_NOT_BUILT:
      snprintf(buf, cap, "this cddp was built without CUDA (nvcc not found, or NO_CUDA=1)");
      break;
    case CDDP_CUDA_NO_DRIVER:
      snprintf(buf, cap, "no NVIDIA driver (libcuda.so.1 not found, or older than CUDA 13 needs)");
      break;
    case CDDP_CUDA_NO_DEVICE:
      if (cvd) snprintf(buf, cap, "no GPU visible (CUDA_VISIBLE_DEVICES='%.40s')", cvd);
      else snprintf(buf, cap, "no GPU visible");
      break;
    default:
      snprintf(buf, cap, "the CUDA runtime failed: %.120s", p->text);
      break;
  }
  return buf;
}

/* Entry i of a comma-separated list ("2,3" -> i 1 is "3"), or NULL past its end. */
static int list_entry(const char *list, int i, char *out, size_t cap) {
  const char *s = list;
  for (int k = 0; k < i; k++) {
    s = strchr(s, ',');
    if (!s) return 0;
    s++;
  }
  size_t n = strcspn(s, ",");
  if (n == 0) return 0;
  snprintf(out, cap, "%.*s", (int)(n < cap ? n : cap - 1), s);
  return 1;
}

cddp_result_t cddp__device_choose(cddp_device_kind_t want, const cddp_cuda_probe_t *p, int local_rank,
                                  int local_world, const char *cvd, cddp_device_choice_t *out) {
  memset(out, 0, sizeof *out);
  out->kind = CDDP_DEVICE_CPU;
  out->ordinal = -1;
  if (want == CDDP_DEVICE_CPU) return CDDP_OK;
  int gpus = p->status == CDDP_CUDA_OK ? p->count : 0;
  if (gpus <= 0) {
    char why[200];
    cddp_cuda_probe_t none = *p;
    if (none.status == CDDP_CUDA_OK) none.status = CDDP_CUDA_NO_DEVICE;
    cddp__cuda_why_not(&none, cvd, why, sizeof why);
    if (want == CDDP_DEVICE_CUDA)
      return cddp__fail(CDDP_INVALID_ARG, "train.device: cuda asked for, but %s (use train.device cpu or auto)", why);
    snprintf(out->why_cpu, sizeof out->why_cpu, "%s", why);
    return CDDP_OK;
  }
  if (local_rank < 0) local_rank = 0;
  if (local_world < 1) local_world = 1;
  out->kind = CDDP_DEVICE_CUDA;
  out->ordinal = local_rank % gpus;
  out->sharing = local_world > gpus;
  if (!cvd || !list_entry(cvd, out->ordinal, out->physical, sizeof out->physical))
    snprintf(out->physical, sizeof out->physical, "%d", out->ordinal);
  return CDDP_OK;
}

static int env_int(const char *name, int dflt) {
  const char *s = getenv(name);
  char *end;
  long v = s && *s ? strtol(s, &end, 10) : dflt;
  return s && *s && *end == '\0' && v >= 0 && v < 1 << 20 ? (int)v : dflt;
}

cddp_result_t cddp__device_resolve(cddp_device_kind_t want, cddp_device_choice_t *out) {
  cddp_cuda_probe_t p;
  memset(out, 0, sizeof *out);
  out->kind = CDDP_DEVICE_CPU;
  if (want == CDDP_DEVICE_CPU) return CDDP_OK;
  cddp__cuda_probe(&p);
  const char *cvd = getenv("CUDA_VISIBLE_DEVICES");
  if (p.status != CDDP_CUDA_OK && cddp__knob_int(CDDP_KNOB_DEVICE_EMULATE) == 1) {
    /* no GPU, and a test asks for the emulated one (ops_emu.c) in its place */
    out->kind = CDDP_DEVICE_CUDA;
    out->emulated = 1;
    snprintf(out->physical, sizeof out->physical, "emulated");
  } else {
    CDDP_CHECK(cddp__device_choose(want, &p, env_int("LOCAL_RANK", 0), env_int("LOCAL_WORLD_SIZE", 1), cvd, out));
  }
  if (out->kind == CDDP_DEVICE_CUDA && !out->emulated) {
    char err[200];
    if (cddp__cuda_bind(out->ordinal, err, sizeof err) != 0)
      return cddp__fail(CDDP_INVALID_ARG, "train.device: %s: %s", want == CDDP_DEVICE_AUTO ? "auto" : "cuda", err);
  }
  if (want == CDDP_DEVICE_AUTO && out->kind == CDDP_DEVICE_CUDA)
    CDDP_INFO(CDDP_SUB_TRAIN, "train.device auto: cuda (GPU %s%s)", out->physical,
              out->sharing ? ", shared with other local ranks" : "");
  else if (want == CDDP_DEVICE_AUTO)
    CDDP_INFO(CDDP_SUB_TRAIN, "train.device auto: cpu (%s)", out->why_cpu);
  return CDDP_OK;
}

const cddp_ops_t *cddp__device_ops(const cddp_device_choice_t *c) {
  if (c->kind != CDDP_DEVICE_CUDA) return &cddp__ops_cpu;
  return c->emulated ? &cddp__ops_emu : cddp__ops_for(CDDP_DEVICE_CUDA);
}
