/* nccl_boot.c - the nccl backend's rendezvous through cddp's store: the unique id rank 0
 * makes, handed to every rank under the round's prefix (one id per generation), and the GPU
 * each rank drives, so that two ranks on one GPU are named before NCCL fails on them. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/nccl.h"
#include "common/check.h"
#include "common/clock.h"

/* store_get in slices, so that an abort ends the wait within one slice */
static cddp_result_t get_until(const cddp__comm_ctx_t *ctx, const char *key, void **val, size_t *len,
                               uint64_t deadline) {
  for (;;) {
    if (cddp__aborted(ctx)) return cddp__fail(CDDP_ABORTED, "backend nccl: rank %d: aborted while waiting for %s", ctx->rank, key);
    int left = cddp__ms_left(deadline);
    cddp_result_t r = cddp_store_get(ctx->store, key, val, len, left < 100 ? left : 100);
    if (r != CDDP_TIMEOUT || left <= 100) return r;
  }
}

cddp_result_t cddp__nccl_rendezvous(const cddp__comm_ctx_t *ctx, const char *gpu, cddp__nccl_make_id_fn make_id,
                                    void *arg, unsigned char id[CDDP__NCCL_ID_BYTES]) {
  char key[48];
  snprintf(key, sizeof key, "nccl/gpu/%d", ctx->rank);
  CDDP_CHECK(cddp_store_set(ctx->store, key, gpu, strlen(gpu)));
  if (ctx->rank == 0) {
    CDDP_CHECK(make_id(arg, id));
    CDDP_CHECK(cddp_store_set(ctx->store, "nccl/id", id, CDDP__NCCL_ID_BYTES));
  }
  uint64_t deadline = cddp__deadline_ms(ctx->cfg->timeout_ms);
  const char *my_host = ctx->peers[ctx->rank].host_id;
  for (int r = 0; r < ctx->world; r++) {
    void *v = NULL;
    size_t len = 0;
    snprintf(key, sizeof key, "nccl/gpu/%d", r);
    cddp_result_t res = get_until(ctx, key, &v, &len, deadline);
    if (res == CDDP_TIMEOUT)
      return cddp__fail(CDDP_TIMEOUT, "backend nccl: rank %d of %d never said which GPU it drives within %d ms",
                        r, ctx->world, ctx->cfg->timeout_ms);
    CDDP_CHECK(res);
    int clash = r != ctx->rank && !strcmp(ctx->peers[r].host_id, my_host) && !strcmp((const char *)v, gpu);
    free(v);
    if (clash)
      return cddp__fail(CDDP_INVALID_USAGE,
                        "backend nccl: rank %d and rank %d (host %s) both drive GPU %s; NCCL needs one GPU per "
                        "rank (backend native lets ranks share a GPU)",
                        r < ctx->rank ? r : ctx->rank, r < ctx->rank ? ctx->rank : r, ctx->peers[ctx->rank].host, gpu);
  }
  if (ctx->rank == 0) return CDDP_OK;
  void *v = NULL;
  size_t len = 0;
  cddp_result_t res = get_until(ctx, "nccl/id", &v, &len, deadline);
  if (res == CDDP_TIMEOUT)
    return cddp__fail(CDDP_TIMEOUT, "backend nccl: rank %d: rank 0 did not publish the NCCL unique id within %d ms",
                      ctx->rank, ctx->cfg->timeout_ms);
  CDDP_CHECK(res);
  if (len != CDDP__NCCL_ID_BYTES) {
    free(v);
    return cddp__fail(CDDP_REMOTE, "backend nccl: rank 0 published an NCCL unique id of %zu bytes, not %d", len,
                      CDDP__NCCL_ID_BYTES);
  }
  memcpy(id, v, CDDP__NCCL_ID_BYTES);
  free(v);
  return CDDP_OK;
}
