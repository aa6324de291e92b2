/* comm.h - the communicator of one rendezvous round and its collectives (blocking and async). */
#ifndef CDDP_COMM_H
#define CDDP_COMM_H

#include <stddef.h>
#include <stdint.h>

#include "cddp/cddp.h"
#include "cddp/store.h"

#ifdef __cplusplus
extern "C" {
#endif
/* what this header declares is libcddp's API: exported from libcddp.so, which hides the rest */
#pragma GCC visibility push(default)

typedef enum cddp_dtype {
  CDDP_F32 = 0,
  CDDP_F64,
  CDDP_BF16, /* reduced with f32 accumulation */
  CDDP_I32,
  CDDP_I64,
  CDDP_F16, /* IEEE half, reduced with f32 accumulation; beyond 65504 is inf */
  CDDP_DTYPE_COUNT
} cddp_dtype_t;

typedef enum cddp_redop {
  CDDP_SUM = 0,
  CDDP_AVG, /* sum divided by world size; integer types truncate toward zero */
  CDDP_MAX,
  CDDP_MIN,
  CDDP_REDOP_COUNT
} cddp_redop_t;

/* Algorithm choice; AUTO picks by message size (CDDP_ALGO overrides). */
typedef enum cddp_algo {
  CDDP_ALGO_AUTO = 0,
  CDDP_ALGO_RING,   /* bandwidth: chunked, pipelined */
  CDDP_ALGO_DIRECT, /* latency: every rank reads every peer (shm) / recursive doubling (tcp) */
  CDDP_ALGO_COUNT
} cddp_algo_t;

size_t cddp_dtype_size(cddp_dtype_t dt);
const char *cddp_dtype_name(cddp_dtype_t dt);
const char *cddp_redop_name(cddp_redop_t op);

typedef struct cddp_comm cddp_comm_t;
typedef struct cddp_request cddp_request_t;

typedef struct cddp_comm_config {
  const char *backend;   /* "native" (default), "mpi" when built with MPI (docs/mpi.md), or "nccl"
                            (device buffers; needs a GPU, the driver and libnccl.so.2: docs/gpu.md) */
  const char *transport; /* "auto" (shm on one host, hier or tcp across), "shm", "tcp", "hier" */
  int nstreams;          /* TCP connections per peer (CDDP_NSTREAMS) */
  int timeout_ms;        /* bound on every wait inside a collective (CDDP_TIMEOUT_MS) */
  cddp_algo_t algo;      /* CDDP_ALGO: auto, ring, direct */
} cddp_comm_config_t;

/* Defaults, with the environment knobs applied. */
void cddp_comm_config_default(cddp_comm_config_t *cfg);

/* Collective over the world: every rank of the round calls it with the same store view
 * (keys are placed under "comm/r<round>/"), its rank, the world size and the round.
 * Blocks until every peer is connected, at most cfg->timeout_ms. cfg may be NULL. */
cddp_result_t cddp_comm_init(cddp_comm_t **out, cddp_store_t *store, int rank, int world,
                             int round, const cddp_comm_config_t *cfg);

/* Waits for every outstanding request, then stops the progress thread. */
cddp_result_t cddp_comm_finalize(cddp_comm_t *comm);

/* Frees the communicator (aborting outstanding work). NULL is a no-op. */
void cddp_comm_destroy(cddp_comm_t *comm);

/* Thread-safe, never blocks: marks the communicator aborted and wakes every blocked
 * call, which returns ABORTED. The communicator can then only be destroyed. */
void cddp_comm_abort(cddp_comm_t *comm);

/* The first error the communicator hit (OK if none) and its one-line message. */
cddp_result_t cddp_comm_last_error(const cddp_comm_t *comm, const char **msg);

int cddp_comm_rank(const cddp_comm_t *comm);
int cddp_comm_world(const cddp_comm_t *comm);
/* "shm", "tcp", "hier" (shm within hosts + tcp across), "mpi" (backend mpi) or "nccl" (backend nccl): what this rank
 * uses to reach its peers. */
const char *cddp_comm_transport(const cddp_comm_t *comm);

/* Collective: allocates bytes that peers on the same host can read and write without
 * a copy (shared memory). Collectives on such buffers take a zero-copy path. Every rank
 * calls it with the same size in the same order. Free with cddp_comm_mem_free. */
cddp_result_t cddp_comm_mem_alloc(cddp_comm_t *comm, size_t bytes, void **ptr);
cddp_result_t cddp_comm_mem_free(cddp_comm_t *comm, void *ptr);
/* Collective, like cddp_comm_mem_alloc, but one buffer for the whole world: every rank reads
 * and writes the same memory (shared memory, every rank on this host; ZeRO-1's one copy of the
 * parameters). INVALID_USAGE where the transport has no such memory (tcp, hier, a world of
 * one); free with cddp_comm_mem_free. */
cddp_result_t cddp_comm_mem_alloc_one(cddp_comm_t *comm, size_t bytes, void **ptr);

/* Progress, for the launcher's hang watchdog and `cddp status` (docs/launcher.md). A program
 * busy alone between collectives (writing a checkpoint, a long accumulation) calls
 * cddp_progress_alive so its peers' watchdog does not take it for hung; cddp_progress_step says
 * how far it got (a trainer: optimizer steps done). Cheap, never block; outside `cddp run` they
 * do nothing. */
void cddp_progress_alive(void);
void cddp_progress_step(uint64_t step);

/* ---- Blocking collectives. Every rank calls them in the same order. In-place when
 * send == recv. Each returns TIMEOUT / REMOTE / ABORTED with cddp_last_error naming the
 * peer's rank and host. ---- */
cddp_result_t cddp_allreduce(cddp_comm_t *comm, const void *send, void *recv, size_t count,
                             cddp_dtype_t dt, cddp_redop_t op);
/* send holds world * recvcount elements; rank r receives block r reduced. */
cddp_result_t cddp_reduce_scatter(cddp_comm_t *comm, const void *send, void *recv,
                                  size_t recvcount, cddp_dtype_t dt, cddp_redop_t op);
/* recv receives world * sendcount elements, rank r's at offset r * sendcount. */
cddp_result_t cddp_allgather(cddp_comm_t *comm, const void *send, void *recv, size_t sendcount,
                             cddp_dtype_t dt);
cddp_result_t cddp_broadcast(cddp_comm_t *comm, void *buf, size_t count, cddp_dtype_t dt,
                             int root);
cddp_result_t cddp_barrier(cddp_comm_t *comm);

/* ---- Non-blocking: start returns at once, the progress thread runs the operation.
 * Buffers must stay untouched until the request completes. Requests complete in the
 * order they were started. ---- */
cddp_result_t cddp_iallreduce(cddp_comm_t *comm, const void *send, void *recv, size_t count,
                              cddp_dtype_t dt, cddp_redop_t op, cddp_request_t **req);
cddp_result_t cddp_ireduce_scatter(cddp_comm_t *comm, const void *send, void *recv,
                                   size_t recvcount, cddp_dtype_t dt, cddp_redop_t op,
                                   cddp_request_t **req);
cddp_result_t cddp_iallgather(cddp_comm_t *comm, const void *send, void *recv, size_t sendcount,
                              cddp_dtype_t dt, cddp_request_t **req);
cddp_result_t cddp_ibroadcast(cddp_comm_t *comm, void *buf, size_t count, cddp_dtype_t dt,
                              int root, cddp_request_t **req);

/* Never blocks: *done = 1 when finished (then the request's result is returned and the
 * request is freed), 0 otherwise. */
cddp_result_t cddp_test(cddp_request_t *req, int *done);
/* Blocks until the request finishes (bounded by the comm timeout), frees it, returns
 * its result. */
cddp_result_t cddp_wait(cddp_request_t *req);

#pragma GCC visibility pop
#ifdef __cplusplus
}
#endif

#endif /* CDDP_COMM_H */
