/* zero1.h - ZeRO-1 (ddp.shard_optimizer): the optimizer state and update sharded over the
 * ranks. Gradients are reduce-scattered, each rank updates its shard of the parameters with
 * its shard of the moments, and the parameters are all-gathered; or, where every rank is on
 * this host and the world cannot re-form, the ranks share one copy of the parameters in
 * shared memory and each writes its shard there: nothing is gathered. */
#ifndef CDDP_TRAINER_ZERO1_H
#define CDDP_TRAINER_ZERO1_H

#include <stddef.h>
#include <stdint.h>

#include "cddp/cddp.h"

struct trainer;

/* Rank q's shard is [q * per, q * per + len_q) of the flat parameter buffer. per is a multiple
 * of 16 floats, so every shard starts on a cache line and the update runs the same vector
 * lanes over each element as the unsharded one (bitwise equal); the last shard is shorter.
 * The gradient and parameter buffers hold world * per floats, the tail zero. */
typedef struct cddp__zero1 {
  int on;
  int candidate;    /* auto: the first steps time ZeRO-1 with shared weights against the all-reduce */
  int shared;       /* the ranks share one copy of the parameters (cddp_comm_mem_alloc_one) */
  void *shared_mem; /* that copy, while t->params is it: freed with cddp_comm_mem_free */
  size_t n;      /* parameters */
  size_t per;    /* floats per shard */
  size_t padded; /* world * per */
  size_t lo, len; /* this rank's shard */
  int whole;      /* re-forming: this rank holds the whole moments below (old rank 0) */
  float *whole_m, *whole_v;
} cddp__zero1_t;

/* Whether ZeRO-1 is on (z->on), and its layout, from ddp.shard_optimizer and the world. Where
 * the ranks can share the parameters (world > 1 over shared memory, a world that cannot
 * re-form) ZeRO-1 shares them (z->shared), and auto makes it a candidate (z->candidate: off at
 * first, the trial of overlap_trial.c times it against the all-reduce). Before the parameter
 * buffer exists; says at INFO what it chose and why. A layout that fails is an error under
 * true only (auto: off). */
cddp_result_t cddp__zero1_choose(struct trainer *t);
/* The candidate's switches at a step boundary, collective, the same bits either way: enter
 * cuts the whole optimizer state down to this rank's shard and shares the parameters; leave
 * all-gathers the state and gives every rank its own parameters again. */
cddp_result_t cddp__zero1_enter(struct trainer *t);
cddp_result_t cddp__zero1_leave(struct trainer *t);
/* With z->shared, once every rank holds the same parameters (after the broadcast and any
 * restore): rank 0's copy moves into shared memory and every rank's t->params becomes that
 * one buffer (rebinding the model). Collective. */
cddp_result_t cddp__zero1_share(struct trainer *t);
/* Frees the parameter buffer, shared or not (collective when shared). */
void cddp__zero1_free_params(struct trainer *t);
/* The layout of n parameters over world ranks (z->on is left as it is). INVALID_ARG with one
 * line when a rank's shard would be empty. */
cddp_result_t cddp__zero1_layout(cddp__zero1_t *z, size_t n, int world, int rank);
/* Length of rank q's shard (its start in *lo). */
size_t cddp__zero1_shard(const cddp__zero1_t *z, int q, size_t *lo);
/* The sharded step once every micro-step's gradient is in t->grads: reduce-scatter, global
 * norm, this shard's update, all-gather (shared parameters: a barrier). Returns the gradient norm before clipping in *norm
 * and the time spent communicating and updating. */
cddp_result_t cddp__zero1_step(struct trainer *t, float lr, double *norm, uint64_t *comm_ns, uint64_t *optim_ns);
/* A state buffer whose shards the ranks hold (shard: this rank's len floats) whole on root:
 * full (n floats) there, ignored elsewhere. Collective. */
cddp_result_t cddp__zero1_gather(struct trainer *t, const float *shard, float *full, int root);
/* The reverse: root's full buffer cut into every rank's shard. Collective. */
cddp_result_t cddp__zero1_scatter(struct trainer *t, const float *full, float *shard, int root);
/* After the world changed (t->world, t->rank are the new ones): the new layout, the parameter
 * buffer grown or shrunk to it (weights kept), the optimizer's shard zeroed at its new size
 * (its step count kept) for the state's holder to fill. */
cddp_result_t cddp__zero1_relayout(struct trainer *t);
/* Before a re-forming that loses no rank (a node taken in): the whole moments gathered on rank
 * 0 (z->whole), for the re-formed world to re-shard. Collective on the old communicator. */
cddp_result_t cddp__zero1_hold_whole(struct trainer *t);
void cddp__zero1_drop_whole(struct trainer *t);

#endif /* CDDP_TRAINER_ZERO1_H */
