/* ddp.h - data-parallel training for any C trainer: join the job's world from the launcher's
 * environment, broadcast initial parameters, and all-reduce a flat gradient buffer in
 * buckets that start while backward still runs (PyTorch DDP's design, without autograd).
 *
 *   cddp_world_t *w;                       // who am I, where is the store, the communicator
 *   cddp_world_join(&w, NULL);
 *   cddp_ddp_t *ddp;
 *   cddp_ddp_create(&ddp, cddp_world_comm(w), n_params, 4 << 20, CDDP_SUM);
 *   float *grads = cddp_ddp_grads(ddp);    // shared memory: the zero-copy allreduce path
 *   cddp_ddp_broadcast(ddp, params, 0);    // every rank starts from rank 0's parameters
 *   for (;;) {
 *     cddp_ddp_begin(ddp);
 *     backward(...);                       // calls cddp_ddp_grad_ready(ddp, offset) as the
 *                                          // gradients at [offset, n) become final
 *     cddp_ddp_finish(ddp);                // all buckets reduced: grads hold the sum/mean
 *     update(params, grads);
 *   }
 *   cddp_ddp_destroy(ddp);
 *   cddp_world_leave(w, 1);
 *
 * On accumulation micro-steps simply do not call begin/grad_ready/finish: no communication.
 * Example: examples/train_linear.c. */
#ifndef CDDP_DDP_H
#define CDDP_DDP_H

#include <stddef.h>
#include <stdint.h>

#include "cddp/cddp.h"
#include "cddp/comm.h"
#include "cddp/env.h"
#include "cddp/store.h"
#include "cddp/world.h"

#ifdef __cplusplus
extern "C" {
#endif
/* what this header declares is libcddp's API: exported from libcddp.so, which hides the rest */
#pragma GCC visibility push(default)

typedef struct cddp_ddp cddp_ddp_t;

typedef struct cddp_ddp_stats {
  uint64_t wait_ns;      /* time finish() spent waiting: communication not hidden by backward */
  uint64_t bytes;        /* payload bytes this rank contributed (after compression) */
  uint64_t wire_bytes;   /* bytes each rank sent (ring estimate: 2 (w-1)/w of the payload) */
  int buckets;
} cddp_ddp_stats_t;

/* n floats of gradients in buckets of about bucket_bytes (0: 4 MiB), reduced with op
 * (CDDP_SUM, or CDDP_AVG for the mean over ranks). Collective: every rank calls it. */
cddp_result_t cddp_ddp_create(cddp_ddp_t **out, cddp_comm_t *comm, size_t n, size_t bucket_bytes,
                              cddp_redop_t op);
/* The same over the caller's gradient buffer of n floats (a slice of one flat allocation of
 * parameters, gradients and optimizer state, llm.c style): the buckets are slices of it, it is
 * neither zeroed nor freed here, and it must outlive the object. Memory from
 * cddp_comm_mem_alloc (or a slice of it) keeps shm's zero-copy path; any other memory is
 * staged. Collective: every rank calls it. */
cddp_result_t cddp_ddp_create_over(cddp_ddp_t **out, cddp_comm_t *comm, float *grads, size_t n,
                                   size_t bucket_bytes, cddp_redop_t op);
void cddp_ddp_destroy(cddp_ddp_t *d);
/* The gradient buffer (n floats, zeroed at create; create_over: the caller's). */
float *cddp_ddp_grads(cddp_ddp_t *d);
size_t cddp_ddp_count(const cddp_ddp_t *d);
int cddp_ddp_bucket_count(const cddp_ddp_t *d);
/* Overlap off: grad_ready only records, finish reduces every bucket itself (blocking). */
void cddp_ddp_set_overlap(cddp_ddp_t *d, int overlap);
/* What crosses the wire. NONE: float32. BF16: bfloat16, summed in float32 at every hop
 * (half the bytes). F16: IEEE half, the same way; with AVG each rank divides by the world
 * size before rounding (so sums stay in range); magnitudes past 65504 become inf and those
 * below 6e-8 vanish, as with PyTorch's fp16 compress hook. SIGN: 1-bit SGD with error
 * feedback: each rank sends the signs of (gradient + residual) and their mean magnitude per
 * 128 elements, and keeps what the signs lost in its residual for the next step (25.6x fewer
 * bytes; the result is the same on every rank). POWERSGD: low-rank (PowerSGD, Vogels et al.
 * 2019, as PyTorch's powerSGD_hook) with error feedback: each matrix (a tensor as shape[0] rows
 * x the rest) plus its residual M is sent as P = M Q (rows x rank) and, after P is summed and
 * orthonormalised, Q = M^T P (cols x rank); the result is P Q^T of the mean (times the world
 * for SUM), identical on every rank, and M minus it stays in this rank's residual. Q is
 * warm-started from the last step. 1-D tensors go raw in float32. It needs the tensor shapes,
 * so it is chosen with cddp_ddp_set_powersgd, not here; about (rows cols) / (rank (rows + cols))
 * fewer bytes (the GPT, d 256: 21x at rank 8, 15x at 12). Collective: every rank calls it once, right after create. */
typedef enum cddp_compress {
  CDDP_COMPRESS_NONE = 0, CDDP_COMPRESS_BF16 = 1, CDDP_COMPRESS_SIGN = 2, CDDP_COMPRESS_F16 = 3,
  CDDP_COMPRESS_POWERSGD = 4
} cddp_compress_t;
cddp_result_t cddp_ddp_set_compress(cddp_ddp_t *d, cddp_compress_t c);
/* One tensor of the gradient buffer: floats [offset, offset + rows * cols), row-major (a 1-D
 * tensor has cols 1; a tensor of more dimensions is shape[0] rows x the product of the rest). */
typedef struct cddp_ddp_tensor {
  size_t offset, rows, cols;
} cddp_ddp_tensor_t;
/* Chooses POWERSGD with the given rank (1..256) over the count tensors t, which must tile the
 * buffer in order. Buckets are re-cut at tensor boundaries (whole tensors, about bucket_bytes
 * each; a larger tensor is a bucket of its own). Collective, once, right after create;
 * INVALID_ARG naming the tensor or the rank when they do not fit. */
cddp_result_t cddp_ddp_set_powersgd(cddp_ddp_t *d, int rank, const cddp_ddp_tensor_t *t, int count);
/* SIGN's and POWERSGD's error-feedback residual (n floats; NULL otherwise), followed by
 * per-rank state (POWERSGD: the warm-start Q's; sign-Adam: its own moments): save it in
 * checkpoints and restore it on resume, or the resumed run is not the same run. */
float *cddp_ddp_residual(cddp_ddp_t *d);
/* Copies root's n-float buffer (e.g. the parameters) to every rank. */
cddp_result_t cddp_ddp_broadcast(cddp_ddp_t *d, float *buf, int root);
/* Starts a synchronising step. */
void cddp_ddp_begin(cddp_ddp_t *d);
/* Gradients at [offset, n) are final: starts every bucket that lies wholly inside. Matches
 * the model's backward hook signature (void *ctx = the cddp_ddp_t). Errors are kept for
 * finish(). */
void cddp_ddp_grad_ready(void *ddp, size_t offset);
/* Starts what is left, waits for every bucket. After OK the buffer holds the reduction. */
cddp_result_t cddp_ddp_finish(cddp_ddp_t *d);
/* Counters since create (or the last reset). */
void cddp_ddp_stats(cddp_ddp_t *d, cddp_ddp_stats_t *s, int reset);

#pragma GCC visibility pop
#ifdef __cplusplus
}
#endif

#endif /* CDDP_DDP_H */
