/* shm_cma.c - cross-memory attach for the shm transport: a large allreduce in one pass over
 * ordinary (malloc'd) buffers, each rank moving its slice with process_vm_readv/writev. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#include "comm/reduce.h"
#include "comm/shm.h"
#include "common/check.h"
#include "common/knobs.h"

/* Moves bytes between local and peer q's remote address (write: local -> remote). */
static cddp_result_t cma_move(shm_t *s, int q, void *local, uint64_t remote, size_t bytes,
                              int write) {
  pid_t pid = s->ctx->peers[q].pid;
  while (bytes) {
    struct iovec l = {local, bytes}, r = {(void *)(uintptr_t)remote, bytes};
    ssize_t n = write ? process_vm_writev(pid, &l, 1, &r, 1, 0) : process_vm_readv(pid, &l, 1, &r, 1, 0);
    if (n <= 0) {
      if (n < 0 && errno == EINTR) continue;
      char name[128];
      return cddp__fail_errno(CDDP_REMOTE, "shm %s: process_vm_%s of %zu bytes at %#llx in %s",
                              s->what, write ? "writev" : "readv", bytes,
                              (unsigned long long)remote,
                              cddp__peer_name(s->ctx, q, name, sizeof name));
    }
    local = (char *)local + n;
    remote += (uint64_t)n;
    bytes -= (size_t)n;
  }
  return CDDP_OK;
}

cddp_result_t cddp__shm_cma_probe(shm_t *s, uint64_t deadline) {
  shm_zc_desc_t *d = &s->ctl[s->rank].desc;
  s->cma = 0;
  s->cma_probe = SHM_MAGIC ^ (uint64_t)s->rank;
  d->send_addr = (uint64_t)(uintptr_t)&s->cma_probe;
  d->cma_ok = 0;
  d->knobs = cddp__shm_tune_knobs();
  d->tune_ms = (uint32_t)CDDP_MAX(0, CDDP_MIN(cddp__knob_int(CDDP_KNOB_TUNE_MS), 10000));
  CDDP_CHECK(cddp__shm_arrive_all(s, ++s->step, deadline));
  int ok = cddp__knob_int(CDDP_KNOB_SHM_CMA) != 0;
  for (int q = 0; q < s->world && ok; q++) {
    uint64_t v = 0;
    struct iovec l = {&v, sizeof v}, r = {(void *)(uintptr_t)s->ctl[q].desc.send_addr, sizeof v};
    ok = process_vm_readv(s->ctx->peers[q].pid, &l, 1, &r, 1, 0) == (ssize_t)sizeof v &&
         v == (SHM_MAGIC ^ (uint64_t)q);
  }
  d->cma_ok = (uint32_t)ok;
  CDDP_CHECK(cddp__shm_arrive_all(s, ++s->step, deadline)); /* nobody reads the probe after */
  ok = 1;
  s->tune.set = 0;
  for (int q = 0; q < s->world; q++) {
    ok &= s->ctl[q].desc.cma_ok != 0;
    s->tune.set |= s->ctl[q].desc.knobs; /* a knob forced on any rank is forced on all */
  }
  s->tune.budget_ms = s->ctl[0].desc.tune_ms;
  if (ok) {
    s->scratch_bytes = s->chunk_bytes;
    s->scratch = malloc(s->scratch_bytes * (size_t)(s->world - 1) + 4096);
    ok = s->scratch != NULL;
  }
  s->cma = ok;
  return CDDP_OK;
}

/* Every rank's send and recv are the same buffer or do not overlap (peers read one while
 * writing the other). Decided from the descriptors, so every rank decides alike. */
int cddp__shm_cma_usable(shm_t *s, const cddp__coll_t *c, size_t es) {
  if (!s->cma || c->kind != CDDP__ALLREDUCE) return 0;
  uint64_t bytes = (uint64_t)c->count * es;
  for (int q = 0; q < s->world; q++) {
    uint64_t a = s->ctl[q].desc.send_addr, b = s->ctl[q].desc.recv_addr;
    if (a != b && a < b + bytes && b < a + bytes) return 0;
  }
  return 1;
}

cddp_result_t cddp__shm_allreduce_cma(shm_t *s, const cddp__coll_t *c, size_t es, double scale) {
  const int me = s->rank, W = s->world;
  size_t align = 64 / es;
  size_t per = (c->count + (size_t)W - 1) / (size_t)W;
  per = (per + align - 1) / align * align;
  size_t lo = CDDP_MIN((size_t)me * per, c->count), hi = CDDP_MIN(lo + per, c->count);
  size_t piece = CDDP_MAX(s->scratch_bytes / es / align, 1) * align;
  /* scratch 2 KiB away from recv modulo 4 KiB: the reduce's loads never 4K-alias its stores */
  char *scratch = s->scratch + (((uintptr_t)c->recv + 2048) & 4032);
  const void *srcs[64];
  char *recv = c->recv;
  const char *send = c->send;
  int fast2 = W == 2 && c->dt == CDDP_F32 && (c->op == CDDP_SUM || c->op == CDDP_AVG);
  for (size_t b = lo; b < hi; b += piece) {
    size_t n = CDDP_MIN(piece, hi - b), bytes = n * es;
    for (int q = 0, k = 0; q < W; q++) {
      if (q == me) {
        srcs[q] = send + b * es;
        continue;
      }
      char *dst = scratch + (size_t)k++ * s->scratch_bytes;
      CDDP_CHECK(cma_move(s, q, dst, s->ctl[q].desc.send_addr + b * es, bytes, 0));
      srcs[q] = dst;
    }
    if (fast2)
      cddp__shm_sum2_f32((float *)(recv + b * es), NULL, srcs[0], srcs[1], n, (float)scale,
                         c->op == CDDP_AVG, 0);
    else
      cddp__reduce_n(recv + b * es, srcs, W, n, c->dt, c->op, scale);
    for (int q = 0; q < W; q++)
      if (q != me) CDDP_CHECK(cma_move(s, q, recv + b * es, s->ctl[q].desc.recv_addr + b * es, bytes, 1));
  }
  return CDDP_OK;
}
