/* launcher.h - which launcher started this process, decided in one place: cddp run's agent,
 * torchrun's variables, a task of an srun step, mpirun, or none. */
#ifndef CDDP_COMMON_LAUNCHER_H
#define CDDP_COMMON_LAUNCHER_H

#include "cddp/env.h"

/* The launcher whose variables envp ("K=V" strings, environ or a test's own) carries, first of:
 *   CDDP_ENV_AGENT     CDDP_STORE set and not empty (the agent sets torchrun's names too)
 *   CDDP_ENV_TORCHRUN  RANK and WORLD_SIZE set
 *   CDDP_ENV_SLURM     a task of an srun step: SLURM_PROCID and SLURM_STEP_ID set
 *   CDDP_ENV_MPI       OMPI_COMM_WORLD_RANK or PMI_RANK set
 *   CDDP_ENV_NONE      none of these: a world of one
 * Never fails; reads nothing but envp. */
cddp_env_source_t cddp__launcher_detect(char **envp);
/* Whether envp carries launcher src's variables at all, whichever launcher wins above (e.g.
 * `--launcher slurm` insists on an srun step even when the agent started the process). */
int cddp__launcher_present(char **envp, cddp_env_source_t src);
/* The rank the detected launcher gives this process (RANK, SLURM_PROCID, OMPI_COMM_WORLD_RANK
 * or PMI_RANK), -1 with none or when it is not a number: for log lines before cddp_env_read. */
int cddp__launcher_rank(char **envp);
/* "cddp run", "torchrun", "srun", "mpirun" or "none". */
const char *cddp__launcher_name(cddp_env_source_t src);

#endif /* CDDP_COMMON_LAUNCHER_H */
