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

#ifdef __cplusplus
extern "C" {
#endif
/* what this header declares is libcddp's API: exported from libcddp.so, which hides the rest */
#pragma GCC visibility push(default)

/* A worker's place in the job: its environment, the job's store, its communicator (opaque:
 * read it through the functions below; the communicator and rank change on recover). */
typedef struct cddp_world cddp_world_t;

/* Reads the environment (cddp run, torchrun, Slurm, MPI), connects to the store and builds
 * the communicator. cfg may be NULL (defaults and CDDP_* knobs). *w is set either way (NULL
 * only when out of memory): on failure it holds nothing but why (cddp_world_gone), and
 * cddp_last_error names the cause. */
cddp_result_t cddp_world_join(cddp_world_t **w, const cddp_comm_config_t *cfg);
/* Tears down the communicator and frees w (NULL: nothing); when clean, first waits (bounded)
 * until every rank is done with the store so the store rank 0 may host outlives its last user. */
void cddp_world_leave(cddp_world_t *w, int clean);
/* This worker's rank and the world's size (both change when cddp_world_recover re-forms a
 * smaller or larger world: read them again after it). */
int cddp_world_rank(const cddp_world_t *w);
int cddp_world_size(const cddp_world_t *w);
/* The communicator of the current generation: NULL after a failed recover. Never keep it
 * across cddp_world_recover, which frees it. */
cddp_comm_t *cddp_world_comm(const cddp_world_t *w);
/* The job's store (its keys are the job's: see docs/elastic.md before writing any). */
cddp_store_t *cddp_world_store(const cddp_world_t *w);
/* What the launcher said: local rank, local world, restart count, where the store is. */
const cddp_env_t *cddp_world_env(const cddp_world_t *w);

/* In-place recovery (the job runs under `cddp run --restart-mode replace`): a collective
 * failed (REMOTE, TIMEOUT or ABORTED) because a peer died, or a node was lost (a watcher
 * thread aborts the communicator as soon as the job announces a new generation, so a silent peer does
 * not hold it until the comm timeout). Aborts and frees the communicator, waits until the job formed
 * its next generation (the dead worker replaced, or the lost node's ranks dropped), and
 * builds the communicator for that generation. After a membership change the rank and size are the
 * new ones (ranks shift down past the lost node; read them again after every recover). Free everything built on the
 * old communicator (cddp_ddp_destroy, cddp_comm_mem_free) BEFORE calling it. Bounded by
 * CDDP_RECOVER_TIMEOUT_MS (default 30 s); converges on the latest generation when failures
 * come close together. After OK the caller brings the replacement up to date (e.g. broadcasts
 * its state from a survivor) and redoes the interrupted step:
 *
 *   while ((r = step()) != CDDP_OK) {
 *     if (cddp_world_recover(w) != CDDP_OK) exit(1);   // one line in cddp_last_error
 *     rebuild what lived on the old comm; sync state; }
 *
 * INVALID_USAGE with one line when the launcher does not replace workers in place (the
 * caller then exits, as before); TIMEOUT when no replacement came; NOT_FOUND with
 * cddp_world_gone(w) > 0 when this worker's node was dropped or the job stopped (cddp_last_error
 * is the one line to print). cddp_world_comm(w) is NULL after an error. */
cddp_result_t cddp_world_recover(cddp_world_t *w);
/* Why this worker has no place in the job any more, after cddp_world_join or
 * cddp_world_recover failed (also after a failed join, which holds nothing else): 0 = it may
 * have one, 1 = its node was dropped from the job, 2 = the job stopped (too few nodes left, or
 * cddp_world_stop), 3 = the job finished before this newcomer was taken in. */
int cddp_world_gone(const cddp_world_t *w);
/* 1 when the job has gone past the communicator's generation by more than a join (a node was lost or
 * dropped): whatever failed on the communicator, even what looks like a desync (a rank frozen through
 * the re-forming reads its peers' last words), is the re-forming's doing, and
 * cddp_world_recover is the answer. Asks the store. */
int cddp_world_superseded(const cddp_world_t *w);
/* The job cannot go on (e.g. its global batch does not split over the world it shrank to):
 * tells every agent, which then replaces nobody and stops, and marks this worker gone (2).
 * line is what the job prints. */
void cddp_world_stop(cddp_world_t *w, const char *line);
/* 1 when the job announced a generation that takes a node in (a late joiner, a spare, a node
 * that came back; `cddp run --nnodes MIN:MAX --restart-mode replace`): nothing failed, so
 * the communicator keeps working, and the ranks should re-form at a step boundary they agree on.
 * Each rank sees it at its own time: add it as a vote to a per-step all-reduce (a SUM of
 * 0/1 votes), and when the sum is > 0 every rank, after committing the step, frees what
 * lives on the communicator and calls cddp_world_recover (it returns at once into the new
 * generation; the rank is unchanged, the size grows), then sends its state to the newcomers,
 * whose cddp_world_replacement is 1. No step is redone:
 *
 *   votes = cddp_world_should_reform(w);  allreduce(..., &votes, SUM);  commit the step;
 *   if (votes > 0) { free comm things; cddp_world_recover(w); rebuild; sync state; }
 *
 * A trainer whose global batch splits only over some world sizes lists them with
 * cddp_world_allow_sizes: a joiner that would make another size is kept waiting as a spare. */
int cddp_world_should_reform(const cddp_world_t *w);
/* The world sizes this job may grow or shrink to (n of them; rank 0 says it once): a node
 * whose joining would make another size waits as a spare. Without it any size is taken. */
cddp_result_t cddp_world_allow_sizes(const cddp_world_t *w, const int *sizes, int n);
/* 1 when this process was started to replace a dead worker of the same rank, or as a
 * newcomer on a node taken into the running job, or when its first communicator formed in a
 * later generation than the one it was started in (a peer died as the job started, and its
 * replacement is among the peers): it has no state of its own and must receive it from a
 * survivor (in the same order of collectives the survivors use after cddp_world_recover). */
int cddp_world_replacement(const cddp_world_t *w);
/* 1 when cddp_world_recover can work here (cddp run --restart-mode replace), at any world size:
 * a world of one grows in place when a node joins it. */
int cddp_world_can_recover(const cddp_world_t *w);
/* The job's generation the communicator belongs to (0 until the first replacement). */
int cddp_world_generation(const cddp_world_t *w);

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
void cddp_ddp_destroy(cddp_ddp_t *d);
/* The gradient buffer (n floats, zeroed at create). */
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
