/* env.h - how a worker learns who it is (rank, world, round, store) from its environment. */
#ifndef CDDP_ENV_H
#define CDDP_ENV_H

#include "cddp/cddp.h"
#include "cddp/store.h"

#ifdef __cplusplus
extern "C" {
#endif
/* what this header declares is libcddp's API: exported from libcddp.so, which hides the rest */
#pragma GCC visibility push(default)

typedef enum cddp_env_source {
  CDDP_ENV_NONE = 0, /* nothing set: a world of one */
  CDDP_ENV_AGENT,    /* started by `cddp run` (CDDP_STORE set) */
  CDDP_ENV_TORCHRUN, /* RANK / WORLD_SIZE / MASTER_ADDR / MASTER_PORT (rank 0 hosts the store) */
  CDDP_ENV_SLURM,    /* a task of an srun step (SLURM_PROCID, SLURM_STEP_NODELIST, ...) */
  CDDP_ENV_MPI       /* mpirun (OMPI_COMM_WORLD_RANK / PMI_RANK) */
} cddp_env_source_t;

typedef struct cddp_env {
  cddp_env_source_t source;
  int rank, world_size;
  int local_rank, local_world_size;
  int node_rank, nnodes;
  int round, restart_count, max_restarts;
  int replace_mode; /* CDDP_RESTART_MODE=replace: a dead worker is replaced in place (cddp_world_recover) */
  int gen;          /* CDDP_GEN: the job's generation this worker was started in (0 at first) */
  int replacement;  /* CDDP_REPLACEMENT=1: started to replace a dead worker of the same rank */
  char run_id[128];
  char master_addr[256]; /* where the store is (host or address) */
  int master_port;
  char token[256]; /* CDDP_TOKEN / CDDP_TOKEN_FILE */
} cddp_env_t;

/* Reads the environment (cddp run's contract, torchrun's names, Slurm, MPI, in that
 * order). INVALID_ARG with the variable named when a value is malformed or
 * inconsistent (e.g. RANK >= WORLD_SIZE). Never blocks. */
cddp_result_t cddp_env_read(cddp_env_t *env);

/* Connects to the job's store. When no agent hosts one (torchrun/Slurm/MPI style), rank 0
 * starts a server on master_port and returns it in *hosted (stop it after the others are
 * done with it; may be NULL otherwise). The returned store is a prefix view
 * "<run_id>/" of the connection. Blocks at most timeout_ms. */
cddp_result_t cddp_env_connect(const cddp_env_t *env, int timeout_ms, cddp_store_t **store,
                               cddp_store_server_t **hosted);

/* Releases what cddp_env_connect returned (either may be NULL). */
void cddp_env_disconnect(cddp_store_t *store, cddp_store_server_t *hosted);

#pragma GCC visibility pop
#ifdef __cplusplus
}
#endif

#endif /* CDDP_ENV_H */
