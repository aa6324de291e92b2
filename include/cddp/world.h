/* world.h - a worker's place in the job: join the world the launcher describes (cddp run,
 * torchrun, Slurm, MPI), reach its store and communicator, and recover in place when a peer dies
 * or a node joins or leaves (docs/elastic.md). cddp/ddp.h builds data-parallel training on it. */
#ifndef CDDP_WORLD_H
#define CDDP_WORLD_H

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
/* A communicator of the caller's own for this generation (DDP's over NCCL, say) that the
 * world's watcher aborts with the world's when a new generation is announced, so a collective
 * blocked on a lost peer there returns ABORTED at once too, not at its timeout. One at a time;
 * NULL forgets it. Call it with NULL before destroying that communicator; a re-formed world
 * forgets it by itself. Never blocks (but on the watcher's lock). */
void cddp_world_abort_with(cddp_world_t *w, cddp_comm_t *comm);

#pragma GCC visibility pop
#ifdef __cplusplus
}
#endif

#endif
