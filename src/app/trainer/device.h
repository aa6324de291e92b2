/* device.h - where a rank's model runs (train.device: cpu|cuda|auto): what the CUDA runtime
 * sees (a probe), and the choice made from it as a pure function, so the policy is tested
 * on machines without a GPU. One GPU per local rank: LOCAL_RANK modulo the visible GPUs, in
 * the numbering CUDA_VISIBLE_DEVICES gives; several ranks may share one GPU. */
#ifndef CDDP_TRAINER_DEVICE_H
#define CDDP_TRAINER_DEVICE_H

#include <stddef.h>

#include "cddp/cddp.h"

#ifdef __cplusplus
extern "C" { /* cuda/cuda_rt.cu defines the probe */
#endif

/* The order is train.device's choices (config_schema.c): cpu|cuda|auto. */
typedef enum cddp_device_kind { CDDP_DEVICE_CPU = 0, CDDP_DEVICE_CUDA = 1, CDDP_DEVICE_AUTO = 2 } cddp_device_kind_t;

/* Why the CUDA runtime sees no GPU (or OK). */
typedef enum cddp_cuda_status {
  CDDP_CUDA_OK = 0,
  CDDP_CUDA_NOT_BUILT, /* this cddp was built without nvcc (or NO_CUDA=1) */
  CDDP_CUDA_NO_DRIVER, /* libcuda.so.1 absent or older than the runtime */
  CDDP_CUDA_NO_DEVICE, /* the driver is there, no GPU is visible */
  CDDP_CUDA_ERROR      /* anything else: the runtime's own words are in the probe's text */
} cddp_cuda_status_t;

typedef struct cddp_cuda_probe {
  cddp_cuda_status_t status;
  int count;       /* visible GPUs (0 unless status OK) */
  char text[160];  /* the runtime's error string, for CDDP_CUDA_ERROR */
} cddp_cuda_probe_t;

typedef struct cddp_device_choice {
  cddp_device_kind_t kind; /* CPU or CUDA, never AUTO */
  int ordinal;             /* CUDA: the runtime's device number (after CUDA_VISIBLE_DEVICES) */
  int sharing;             /* CUDA: other local ranks use the same GPU (local_world > GPUs) */
  char physical[32];       /* CUDA: CUDA_VISIBLE_DEVICES' entry for the ordinal, else its number */
  char why_cpu[200];      /* CPU from auto: why not CUDA ("no NVIDIA driver ...") */
  int emulated;            /* CUDA: no GPU; the emulated device (CDDP_DEVICE_EMULATE=1, ops_emu.c) */
} cddp_device_choice_t;

/* Asks the CUDA runtime (statically linked) how many GPUs are visible. Never fails to run:
 * without a driver it reports CDDP_CUDA_NO_DRIVER. */
void cddp__cuda_probe(cddp_cuda_probe_t *p);

/* One line for a probe that found no GPU: "no NVIDIA driver (libcuda.so.1 not found)",
 * "no GPU visible (CUDA_VISIBLE_DEVICES='')", ... cvd is CUDA_VISIBLE_DEVICES or NULL. */
const char *cddp__cuda_why_not(const cddp_cuda_probe_t *p, const char *cvd, char *buf, size_t cap);

/* The choice, pure: want from train.device, what the probe saw, this rank's local rank and
 * the ranks on this host, CUDA_VISIBLE_DEVICES (NULL when unset). CUDA asked for with no GPU
 * is INVALID_ARG with one line naming train.device and the reason. */
cddp_result_t cddp__device_choose(cddp_device_kind_t want, const cddp_cuda_probe_t *p, int local_rank,
                                  int local_world, const char *cvd, cddp_device_choice_t *out);

/* The trainer's choice: the probe, LOCAL_RANK / LOCAL_WORLD_SIZE / CUDA_VISIBLE_DEVICES from
 * the environment, then cddp__device_choose; a CUDA choice binds this process to its GPU
 * (cddp__cuda_bind). auto says what it chose, and why not CUDA, in one INFO line. With no GPU
 * and CDDP_DEVICE_EMULATE=1, cuda and auto choose the emulated device. */
cddp_result_t cddp__device_resolve(cddp_device_kind_t want, cddp_device_choice_t *out);
/* The table the choice's models run on: the CPU's, the CUDA one, or the emulated device's. */
struct cddp_ops;
const struct cddp_ops *cddp__device_ops(const cddp_device_choice_t *c);

#ifdef __cplusplus
}
#endif

#endif /* CDDP_TRAINER_DEVICE_H */
