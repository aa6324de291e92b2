/* gpu_main.h - the start of every device test program: the CUDA table bound to GPU 0, or
 * exit 77 saying why there is no GPU (tests/gpu/run.sh tells the two apart). */
#ifndef CDDP_TESTS_GPU_MAIN_H
#define CDDP_TESTS_GPU_MAIN_H

#include <stdio.h>
#include <stdlib.h>

#include "trainer/device.h"
#include "trainer/ops.h"

static inline const cddp_ops_t *gpu_or_exit(void) {
  cddp_cuda_probe_t p;
  char why[200], err[256] = "this build has no CUDA table";
  cddp__cuda_probe(&p);
  if (p.status != CDDP_CUDA_OK) {
    printf("# no GPU: %s\n", cddp__cuda_why_not(&p, getenv("CUDA_VISIBLE_DEVICES"), why, sizeof why));
    exit(77);
  }
  const cddp_ops_t *d = cddp__ops_for(CDDP_DEVICE_CUDA);
  if (!d || cddp__cuda_bind(0, err, sizeof err) != 0) {
    printf("not ok 1 - bind GPU 0: %s\n", err);
    exit(1);
  }
  return d;
}

#endif
