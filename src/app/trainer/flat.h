/* flat.h - a model's whole training state in one allocation from a device table (llm.c's
 * malloc_and_point_parameters): [params | grads | optimizer moments], each section 64-byte
 * aligned. DDP's buckets are then slices of grads (cddp_ddp_create_over), one copy moves the
 * whole state between devices, and on a GPU one cudaMalloc holds it. */
#ifndef CDDP_TRAINER_FLAT_H
#define CDDP_TRAINER_FLAT_H

#include <stddef.h>

#include "trainer/ops.h"
#include "trainer/optim.h"

typedef struct cddp_flat {
  const cddp_ops_t *ops; /* whose memory it is */
  float *base;           /* the one allocation (NULL when none) */
  size_t floats;         /* its size */
  size_t slots;          /* floats of params and of grads (the model's, or ZeRO-1's padded) */
  float *params, *grads; /* its first two sections (grads NULL: held elsewhere); the moments
                            follow in o->m, o->v */
} cddp_flat_t;

/* Checks spec (cddp__optim_check's line), then takes one zeroed allocation from ops for
 * params and (with_grads) grads of slots floats and the optimizer's moments of moment_floats
 * each (n, or a ZeRO-1 shard), and initialises o with its moments pointing into it (as
 * cddp__optim_init would, without its own buffers). SYSTEM naming the device when out of
 * memory. */
cddp_result_t cddp__flat_create(cddp_flat_t *f, const cddp_ops_t *ops, size_t slots, int with_grads, cddp_optim_t *o,
                                const cddp_optim_spec_t *spec, size_t moment_floats);
/* Releases the allocation; o (created with it) loses its moments. Either may be zeroed. */
void cddp__flat_destroy(cddp_flat_t *f, cddp_optim_t *o);

#endif /* CDDP_TRAINER_FLAT_H */
