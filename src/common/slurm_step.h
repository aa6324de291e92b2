/* slurm_step.h - one reading of what a task of a Slurm job step is (rank, world, master). */
#ifndef CDDP_COMMON_SLURM_STEP_H
#define CDDP_COMMON_SLURM_STEP_H

#include "cddp/cddp.h"

typedef struct cddp__slurm_step {
  int rank, world, local_rank, local_world, node_rank, nnodes;
  long job, step;
  char master_addr[256]; /* MASTER_ADDR when set (test clusters whose names don't resolve),
                            else the first host of the step's node list */
  int master_port;       /* MASTER_PORT when set, else derived from job and step ids */
  char nodes[4096];      /* the step's node list when it gave master_addr ("" under MASTER_ADDR,
                            or a list too long to keep): where else its store may be */
  char run_id[64];       /* "slurm-<job>.<step>" */
  const char *nnodes_var, *master_var, *port_var; /* the variables that gave them, for messages */
} cddp__slurm_step_t;

/* Reads the step's variables (SLURM_STEP_* first, the job-wide ones as fallback, since a
 * step may run on a subset of the job's nodes). INVALID_ARG naming the missing or malformed
 * variable. Never blocks. */
cddp_result_t cddp__slurm_step_read(char **envp, cddp__slurm_step_t *s);

#endif /* CDDP_COMMON_SLURM_STEP_H */
