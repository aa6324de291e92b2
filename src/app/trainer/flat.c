/* flat.c - the one allocation of parameters, gradients and optimizer state (flat.h). */
#include "trainer/flat.h"

#include <string.h>

#include "common/check.h"

/* Sections start on 64 bytes (16 floats): a cache line, and AVX-512's aligned loads. */
static size_t section(size_t floats) { return (floats + 15) & ~(size_t)15; }

cddp_result_t cddp__flat_create(cddp_flat_t *f, const cddp_ops_t *ops, size_t slots, int with_grads, cddp_optim_t *o,
                                const cddp_optim_spec_t *spec, size_t moment_floats) {
  memset(f, 0, sizeof *f);
  memset(o, 0, sizeof *o);
  if (slots == 0 || moment_floats == 0) return cddp__fail(CDDP_INVALID_ARG, "optimizer: no parameters");
  CDDP_CHECK(cddp__optim_check(spec));
  int moments = cddp__optim_moments(spec);
  size_t floats = (with_grads ? 2 : 1) * section(slots) + (size_t)moments * section(moment_floats);
  float *base = ops->alloc(floats * sizeof(float)); /* zeroed, as calloc'd moments were */
  if (!base)
    return cddp__fail(CDDP_SYSTEM, "out of %s memory for %zu parameters, their gradients and %d optimizer moment%s "
                      "(%.1f MiB)", ops->name, slots, moments, moments == 1 ? "" : "s",
                      (double)floats * sizeof(float) / 1048576.0);
  *f = (cddp_flat_t){ops, base, floats, slots, base, with_grads ? base + section(slots) : NULL};
  o->spec = *spec;
  o->n = moment_floats;
  float *next = base + (with_grads ? 2 : 1) * section(slots);
  if (moments >= 1) o->m = next, next += section(moment_floats);
  if (moments >= 2) o->v = next;
  return CDDP_OK;
}

void cddp__flat_destroy(cddp_flat_t *f, cddp_optim_t *o) {
  if (f->base) f->ops->release(f->base);
  memset(f, 0, sizeof *f);
  if (o) memset(o, 0, sizeof *o);
}
