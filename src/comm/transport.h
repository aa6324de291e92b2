/* transport.h - the contract between the communicator core (comm.c) and a transport (shm, tcp).
 *
 * The core owns the public API, the request queue, the progress thread, abort and error
 * bookkeeping. A transport owns the wires and runs one collective at a time to
 * completion. The core never runs two collectives of one communicator at once, and runs
 * them in the order the user started them, so a transport needs no locking of its own
 * except against wake(), which may be called from any thread at any time. */
#ifndef CDDP_COMM_TRANSPORT_H
#define CDDP_COMM_TRANSPORT_H

#include <stdint.h>

#include "cddp/comm.h"
#include "cddp/store.h"
#include "comm/desync.h"

#define CDDP_HOST_MAX 64

/* What every rank published at init ("peer/<rank>" in the comm's store view). */
typedef struct cddp__peer {
  char host[CDDP_HOST_MAX]; /* hostname, for error messages: "rank 1 (host vm)" */
  char host_id[160];        /* boot id + network namespace: equal means "same host" */
  int pid;
} cddp__peer_t;

/* What a transport sees of its communicator. Valid from init to destroy. */
typedef struct cddp__comm_ctx {
  int rank, world, round;
  cddp_store_t *store;            /* prefixed for this comm and round; use "<transport>/..." keys */
  const cddp_comm_config_t *cfg;  /* resolved config (timeouts, nstreams, algo) */
  const cddp__peer_t *peers;      /* world entries */
  const volatile int *aborted;    /* non-zero once cddp_comm_abort was called: stop waiting */
  int all_local;                  /* every rank shares this host */
  cddp_store_t *desync_store;     /* the whole communicator's store view (hier's groups share it) */
} cddp__comm_ctx_t;

typedef enum cddp__coll_kind {
  CDDP__ALLREDUCE,
  CDDP__REDUCE_SCATTER,
  CDDP__ALLGATHER,
  CDDP__BROADCAST,
  CDDP__BARRIER
} cddp__coll_kind_t;

/* One collective. count is per the public API: allreduce/broadcast = elements in the
 * buffer; reduce_scatter = recvcount; allgather = sendcount. */
typedef struct cddp__coll {
  cddp__coll_kind_t kind;
  const void *send;
  void *recv;
  size_t count;
  cddp_dtype_t dt;
  cddp_redop_t op;
  int root;
  cddp_algo_t algo;  /* AUTO: the transport chooses by size */
  uint64_t deadline; /* cddp__now_ns() value after which the collective fails with TIMEOUT */
  cddp__fp_t fp;     /* the caller's call, compared across ranks (seq 0: no check; desync.h) */
} cddp__coll_t;

typedef struct cddp__transport {
  const char *name;
  /* Blocks until connected to every peer it needs (bounded by cfg->timeout_ms and
   * *aborted). On error: records cddp_last_error naming the peer, returns non-OK. */
  cddp_result_t (*init)(const cddp__comm_ctx_t *ctx, void **state);
  /* Blocks until the collective is done on this rank. Returns TIMEOUT / REMOTE / ABORTED
   * with cddp_last_error naming the peer ("rank 1 (host vm): ..."). After a non-OK
   * result the transport is only destroyed. */
  cddp_result_t (*run)(void *state, const cddp__coll_t *coll);
  /* Never blocks, any thread: wake every wait inside run() so it sees *aborted. */
  void (*wake)(void *state);
  /* Releases everything; run() is not active. */
  void (*destroy)(void *state);
  /* Optional (NULL when unsupported): collective zero-copy buffer allocation. */
  cddp_result_t (*mem_alloc)(void *state, size_t bytes, void **ptr);
  cddp_result_t (*mem_free)(void *state, void *ptr);
  /* Optional: collective; one buffer that every rank maps (all get the same memory), freed
   * with mem_free. Collectives treat it as ordinary memory (no zero-copy path). */
  cddp_result_t (*mem_alloc_one)(void *state, size_t bytes, void **ptr);
} cddp__transport_t;

extern const cddp__transport_t cddp__transport_shm; /* shm.c: all ranks on one host */
extern const cddp__transport_t cddp__transport_tcp; /* tcp.c: any placement */
extern const cddp__transport_t cddp__transport_mpi; /* mpi.c: backend "mpi" (ranks from mpirun) */
/* OK when the mpi backend is built in; else records "backend 'mpi' is not built ..." */
cddp_result_t cddp__mpi_available(void);

/* Whether cddp_comm_abort was called (an atomic read: abort comes from another thread). */
static inline int cddp__aborted(const cddp__comm_ctx_t *ctx) {
  return __atomic_load_n(ctx->aborted, __ATOMIC_ACQUIRE) != 0;
}

/* The transport's state of a communicator (NULL for a world of one) and its name; for tests
 * that look inside a transport (the shm tuner's table). */
void *cddp__comm_transport_state(cddp_comm_t *c, const char **name);


/* "rank R (host H)" for error messages. */
const char *cddp__peer_name(const cddp__comm_ctx_t *ctx, int rank, char *buf, size_t size);

/* This host as peers compare it: boot id + network namespace (what a peer record carries). */
void cddp__local_host_id(char *buf, size_t size);

#endif /* CDDP_COMM_TRANSPORT_H */
