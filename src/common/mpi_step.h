/* mpi_step.h - one reading of what a process started by mpirun is (rank, world, master). */
#ifndef CDDP_COMMON_MPI_STEP_H
#define CDDP_COMMON_MPI_STEP_H

#include "cddp/cddp.h"

typedef struct cddp__mpi_step {
  int rank, world, local_rank, local_world, node_rank, nnodes;
  char master_addr[256]; /* MASTER_ADDR when set; 127.0.0.1 when every rank is on this host */
  int master_port;       /* MASTER_PORT when set, else derived from the job id */
  char run_id[64];       /* "mpi-<hash of the job id>" */
} cddp__mpi_step_t;

/* Reads the rank variables; nodes assume block mapping (node = rank / local size). An MPI
 * launch across hosts needs MASTER_ADDR (rank 0's host): MPI does not say where rank 0 is.
 * INVALID_ARG naming the missing or malformed variable. Never blocks. */
cddp_result_t cddp__mpi_step_read(char **envp, cddp__mpi_step_t *s);

#endif /* CDDP_COMMON_MPI_STEP_H */
