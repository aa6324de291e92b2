/* elastic.h - in-place replacement of a failed worker: the job's generation, kept in the store. */
#ifndef CDDP_RUN_ELASTIC_H
#define CDDP_RUN_ELASTIC_H

#include <stdint.h>

#include "cddp/comm.h"
#include "cddp/store.h"

/* Keys, relative to the job's "<run_id>/" view:
 *   elastic/gen        add(): the job's latest generation (absent = 0); each replacement of a
 *                      dead worker (--restart-mode replace) adds 1, so it also counts them
 *   elastic/gen/<G>    set once generation G exists: "rank R pid P" of the worker it replaces
 *   elastic/g<G>/...   the communicator of generation G (comm/r<round>/... below it)
 * A survivor whose collective failed waits for elastic/gen/<its G + 1>, then builds the
 * communicator of the latest generation; building gives up (ABORTED) the moment a later one
 * is announced, and is retried there, so two failures close together converge on the last. */

/* Agent: announces the next generation for a replacement; *gen = its number. */
cddp_result_t cddp__gen_bump(cddp_store_t *s, const char *what, int64_t *gen);
/* The latest generation (0 when none was announced). */
cddp_result_t cddp__gen_latest(cddp_store_t *s, int64_t *gen);
/* Blocks until a generation later than gen is announced, at most timeout_ms (TIMEOUT). */
cddp_result_t cddp__gen_wait_past(cddp_store_t *s, int64_t gen, int timeout_ms);
/* A view of s under "elastic/g<gen>/" whose blocking get / wait calls poll in slices and
 * fail with ABORTED as soon as a later generation is announced, or with TIMEOUT at deadline
 * (monotonic ns; UINT64_MAX = none). Close it after the communicator built over it. */
cddp_result_t cddp__gen_view(cddp_store_t **out, cddp_store_t *s, int64_t gen, uint64_t deadline);
/* The communicator formed: from now on the view is a plain prefix view. */
void cddp__gen_view_disarm(cddp_store_t *view);

/* Builds the communicator of the latest generation (at least min_gen) over s; when a later
 * generation is announced while it forms, starts over there. Bounded by deadline for the
 * store waits (the transports by cfg's timeout). On OK, *view is the store view *comm was
 * built on (close it after destroying *comm) and *gen its generation. */
cddp_result_t cddp__gen_form(cddp_store_t *s, int rank, int world, int round, const cddp_comm_config_t *cfg,
                             int64_t min_gen, uint64_t deadline, cddp_comm_t **comm, cddp_store_t **view, int64_t *gen);

#endif /* CDDP_RUN_ELASTIC_H */
