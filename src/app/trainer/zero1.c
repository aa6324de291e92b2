/* zero1.c - ZeRO-1 (ddp.shard_optimizer): each rank keeps 1/world of the optimizer state and
 * updates 1/world of the parameters. The reduce-scatter and all-gather together move the
 * bytes of one all-reduce (with one shared copy of the weights on a host, the all-gather goes);
 * over shared memory the sum is in rank order as the all-reduce's, so the parameters are
 * bitwise those of the unsharded run (docs/zero1.md). */
#include "trainer/zero1.h"

#include <malloc.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/check.h"
#include "common/clock.h"
#include "common/log.h"
#include "trainer/trainer.h"

#define SHARD_ALIGN 16 /* floats: 64 bytes */

cddp_result_t cddp__zero1_choose(trainer_t *t) {
  cddp__zero1_t *z = &t->zero1;
  const cddp_train_config_t *c = &t->cfg;
  /* one copy of the parameters needs every rank's memory mapped here, and a world whose
   * members never change: re-forming (re-sharding, a rank taken in) works on private copies */
  int can_share = cddp__train_shm_for_life(t);
  const char *why;
  z->on = z->shared = z->candidate = 0;
  if (c->shard_optimizer == CDDP_SHARD_OFF) why = "off (ddp.shard_optimizer false)";
  else if (t->staged && c->shard_optimizer == CDDP_SHARD_ON)
    return cddp__fail(CDDP_INVALID_ARG, "ddp.shard_optimizer: true does not run on the %s device yet (the state lives there, "
                      "ZeRO-1 works on host memory; docs/gpu.md): use ddp.shard_optimizer false or train.device cpu",
                      t->dev->name);
  else if (t->staged) why = "off: the state lives on the device";
  else if (c->shard_optimizer == CDDP_SHARD_ON) z->on = 1, why = "on (ddp.shard_optimizer true)";
  else if (c->compress != 0) why = "off: ddp.compress is not none (the compressed all-reduce has no reduce-scatter form)";
  else if (!can_share) why = t->world < 2 ? "off: a world of one" : "off: the ranks cannot share one copy of the parameters "
                                                                    "(not all over shared memory, or the world may re-form)";
  else z->candidate = 1, why = "timed against the all-reduce in the first steps: the ranks share one host's memory and the "
                               "world cannot re-form";
  if (z->on || z->candidate) {
    t->same_error_everywhere = 1;
    cddp_result_t r = cddp__zero1_layout(z, t->n_params, t->world, t->rank);
    t->same_error_everywhere = 0;
    if (r != CDDP_OK && c->shard_optimizer == CDDP_SHARD_ON) return r;
    if (r != CDDP_OK) z->candidate = 0, why = "off: too few parameters to shard";
  }
  z->shared = z->on && can_share;
  if (t->rank == 0)
    CDDP_INFO(CDDP_SUB_TRAIN, "ddp.shard_optimizer %s: ZeRO-1 %s%s", c->shard_optimizer == CDDP_SHARD_AUTO ? "auto" : "set", why,
              z->shared || z->candidate ? "; one copy of the parameters in shared memory, each rank updates its shard there (no all-gather)"
              : z->on ? "; the parameters are all-gathered" : "");
  return CDDP_OK;
}

cddp_result_t cddp__zero1_share(trainer_t *t) {
  cddp__zero1_t *z = &t->zero1;
  if (!z->shared) return CDDP_OK;
  cddp_comm_t *comm = cddp_world_comm(t->w);
  void *mem;
  CDDP_CHECK(cddp_comm_mem_alloc_one(comm, z->padded * sizeof(float), &mem));
  float *one = mem;
  if (t->rank == 0) memcpy(one, t->params, z->padded * sizeof *one);
  /* every rank has left its own copy alone since the broadcast; rank 0's is whole past here */
  CDDP_CHECK(cddp_barrier(comm));
  free(t->params);
  malloc_trim(0); /* the private copy's pages back to the system: the heap may have held them */
  t->params = one;
  z->shared_mem = mem;
  t->task->ops->bind(t->task, t->params, t->grads);
  return CDDP_OK;
}

/* A fresh optimizer of n elements, its moments copied from o's [from, from + n) (o->t kept). */
static cddp_result_t reshape_state(cddp_optim_t *o, size_t from, size_t n, cddp_optim_t *out) {
  CDDP_CHECK(cddp__optim_init(out, &o->spec, n));
  if (o->m) memcpy(out->m, o->m + from, n * sizeof *out->m);
  if (o->v) memcpy(out->v, o->v + from, n * sizeof *out->v);
  out->t = o->t;
  return CDDP_OK;
}

cddp_result_t cddp__zero1_enter(trainer_t *t) {
  cddp__zero1_t *z = &t->zero1;
  cddp_optim_t o;
  CDDP_CHECK(reshape_state(&t->opt, z->lo, z->len, &o));
  cddp__optim_free(&t->opt);
  t->opt = o;
  z->on = z->shared = 1;
  return cddp__zero1_share(t);
}

/* Every rank's shard of the moment buffer m (len floats each) into whole (n floats), through
 * the gradient buffer: comm memory, so the all-gather is zero copy. */
static cddp_result_t gather_all(trainer_t *t, const float *m, float *whole) {
  cddp__zero1_t *z = &t->zero1;
  memcpy(t->grads + z->lo, m, z->len * sizeof *m);
  CDDP_CHECK(cddp_allgather(cddp_world_comm(t->w), t->grads + z->lo, t->grads, z->per, CDDP_F32));
  memcpy(whole, t->grads, z->n * sizeof *whole);
  return CDDP_OK;
}

cddp_result_t cddp__zero1_leave(trainer_t *t) {
  cddp__zero1_t *z = &t->zero1;
  cddp_optim_t o;
  float *p = aligned_alloc(64, (z->padded * sizeof(float) + 63) / 64 * 64);
  if (!p) return cddp__fail(CDDP_SYSTEM, "out of memory");
  cddp_result_t r = cddp__optim_init(&o, &t->opt.spec, z->n);
  if (r != CDDP_OK) return free(p), r;
  o.t = t->opt.t;
  if (t->opt.m) r = gather_all(t, t->opt.m, o.m);
  if (r == CDDP_OK && t->opt.v) r = gather_all(t, t->opt.v, o.v);
  if (r != CDDP_OK) return free(p), cddp__optim_free(&o), r;
  memcpy(p, t->params, z->padded * sizeof *p); /* every shard was written before the step ended */
  cddp__optim_free(&t->opt);
  t->opt = o;
  cddp__zero1_free_params(t); /* collective: no rank reads the shared copy past it */
  t->params = p;
  t->task->ops->bind(t->task, t->params, t->grads);
  z->on = 0;
  return CDDP_OK;
}

void cddp__zero1_free_params(trainer_t *t) {
  cddp__zero1_t *z = &t->zero1;
  if (z->shared_mem) cddp_comm_mem_free(cddp_world_comm(t->w), z->shared_mem);
  else free(t->params);
  t->params = NULL, z->shared_mem = NULL, z->shared = 0;
}

cddp_result_t cddp__zero1_layout(cddp__zero1_t *z, size_t n, int world, int rank) {
  size_t w = (size_t)world, per = ((n + w - 1) / w + SHARD_ALIGN - 1) / SHARD_ALIGN * SHARD_ALIGN;
  if ((w - 1) * per >= n)
    return cddp__fail(CDDP_INVALID_ARG, "ddp.shard_optimizer: %zu parameters are too few to give each of %d ranks a "
                      "shard of %d-float lines", n, world, SHARD_ALIGN);
  z->n = n, z->per = per, z->padded = w * per;
  z->len = cddp__zero1_shard(z, rank, &z->lo);
  return CDDP_OK;
}

size_t cddp__zero1_shard(const cddp__zero1_t *z, int q, size_t *lo) {
  size_t a = CDDP_MIN((size_t)q * z->per, z->n);
  *lo = a;
  return CDDP_MIN(z->per, z->n - a);
}

cddp_result_t cddp__zero1_step(trainer_t *t, float lr, double *norm, uint64_t *comm_ns, uint64_t *optim_ns) {
  cddp__zero1_t *z = &t->zero1;
  float *g = t->grads + z->lo, *p = t->params + z->lo;
  cddp_comm_t *comm = cddp_world_comm(t->w);
  uint64_t t0 = cddp__now_ns();
  /* in place (NCCL's form): this rank's block of the buffer receives the sum, zero copy over shm */
  CDDP_CHECK(cddp_reduce_scatter(comm, t->grads, g, z->per, CDDP_F32, CDDP_SUM));
  double ss = cddp__optim_sumsq(g, z->len);
  /* clipping scales by the global norm, so its all-reduce goes first; else it comes after the
   * update, where with shared weights it also says that every shard of the one copy is written */
  int norm_first = t->opt.spec.grad_clip > 0 || !z->shared;
  if (norm_first) CDDP_CHECK(cddp_allreduce(comm, &ss, &ss, 1, CDDP_F64, CDDP_SUM));
  uint64_t t1 = cddp__now_ns();
  cddp__optim_step_shard(&t->opt, p, g, lr, sqrt(ss));
  uint64_t t2 = cddp__now_ns();
  if (!norm_first) CDDP_CHECK(cddp_allreduce(comm, &ss, &ss, 1, CDDP_F64, CDDP_SUM));
  else if (z->shared) CDDP_CHECK(cddp_barrier(comm)); /* no rank reads the weights before every shard is written */
  *norm = sqrt(ss);
  *optim_ns = t2 - t1;
  if (z->shared) {
    *comm_ns = (t1 - t0) + (cddp__now_ns() - t2);
    return CDDP_OK;
  }
  /* through the gradient buffer, which is comm memory: the all-gather then copies straight from
   * the peers' buffers (an ordinary buffer goes through the staging slots, 4.5x slower at 7 MiB) */
  memcpy(g, p, z->len * sizeof *g);
  CDDP_CHECK(cddp_allgather(comm, g, t->grads, z->per, CDDP_F32)); /* in place */
  for (int q = 0; q < t->world; q++) {
    size_t lo, len = cddp__zero1_shard(z, q, &lo);
    if (q != t->rank) memcpy(t->params + lo, t->grads + lo, len * sizeof *t->params);
  }
  *comm_ns = (t1 - t0) + (cddp__now_ns() - t2);
  return CDDP_OK;
}

/* Rank q's shard crosses as a broadcast from q (to root) or from root (to q): a rank that is
 * neither root nor q takes it into a shard-sized scratch and drops it, so no rank but root
 * ever holds the whole state. */
static cddp_result_t move_shards(trainer_t *t, float *shard, float *full, int root, int to_root) {
  const cddp__zero1_t *z = &t->zero1;
  float *scratch = t->rank == root ? NULL : malloc(z->per * sizeof *scratch);
  if (t->rank != root && !scratch) return cddp__fail(CDDP_SYSTEM, "out of memory");
  cddp_result_t r = CDDP_OK;
  for (int q = 0; q < t->world && r == CDDP_OK; q++) {
    size_t lo, len = cddp__zero1_shard(z, q, &lo);
    float *buf = t->rank == root ? full + lo : t->rank == q ? shard : scratch;
    if (t->rank == root && q == root && to_root) memcpy(buf, shard, len * sizeof *buf);
    r = cddp_broadcast(cddp_world_comm(t->w), buf, len, CDDP_F32, to_root ? q : root);
    if (r == CDDP_OK && t->rank == root && q == root && !to_root) memcpy(shard, buf, len * sizeof *buf);
  }
  free(scratch);
  return r;
}

cddp_result_t cddp__zero1_gather(trainer_t *t, const float *shard, float *full, int root) {
  return move_shards(t, (float *)shard, full, root, 1); /* only the senders read their shard: never written */
}

cddp_result_t cddp__zero1_scatter(trainer_t *t, const float *full, float *shard, int root) {
  return move_shards(t, shard, (float *)full, root, 0); /* only root reads full */
}

cddp_result_t cddp__zero1_relayout(trainer_t *t) {
  cddp__zero1_t *z = &t->zero1;
  CDDP_CHECK(cddp__zero1_layout(z, t->n_params, t->world, t->rank));
  float *p = aligned_alloc(64, (z->padded * sizeof(float) + 63) / 64 * 64);
  cddp_optim_t o;
  if (!p) return cddp__fail(CDDP_SYSTEM, "out of memory");
  cddp_result_t r = cddp__optim_init(&o, &t->opt.spec, z->len);
  if (r != CDDP_OK) return free(p), r;
  memcpy(p, t->params, t->n_params * sizeof *p); /* the weights stay; the shards come from the state's holder */
  memset(p + t->n_params, 0, (z->padded - t->n_params) * sizeof *p);
  free(t->params);
  t->params = p;
  o.t = t->opt.t;
  cddp__optim_free(&t->opt);
  t->opt = o;
  return CDDP_OK;
}

cddp_result_t cddp__zero1_hold_whole(trainer_t *t) {
  cddp__zero1_t *z = &t->zero1;
  size_t n = t->rank == 0 ? t->n_params : 0;
  cddp__zero1_drop_whole(t);
  if ((t->opt.m && !(z->whole_m = malloc(n * sizeof(float) + 1))) ||
      (t->opt.v && !(z->whole_v = malloc(n * sizeof(float) + 1))))
    return cddp__zero1_drop_whole(t), cddp__fail(CDDP_SYSTEM, "out of memory");
  cddp_result_t r = CDDP_OK;
  if (t->opt.m) r = cddp__zero1_gather(t, t->opt.m, z->whole_m, 0);
  if (r == CDDP_OK && t->opt.v) r = cddp__zero1_gather(t, t->opt.v, z->whole_v, 0);
  if (r != CDDP_OK) return cddp__zero1_drop_whole(t), r;
  z->whole = t->rank == 0;
  return CDDP_OK;
}

void cddp__zero1_drop_whole(trainer_t *t) {
  cddp__zero1_t *z = &t->zero1;
  free(z->whole_m), free(z->whole_v);
  z->whole_m = z->whole_v = NULL;
  z->whole = 0;
}
