/* launcher.c - the one decision of which launcher started the process, and its precedence. */
#include "common/launcher.h"

#include <stdlib.h>

#include "common/envp.h"

int cddp__launcher_present(char **envp, cddp_env_source_t src) {
  const char *v;
  switch (src) {
  case CDDP_ENV_AGENT: return (v = cddp__envp_get(envp, "CDDP_STORE")) && *v;
  case CDDP_ENV_TORCHRUN: return cddp__envp_get(envp, "RANK") && cddp__envp_get(envp, "WORLD_SIZE");
  /* a task of a step: the batch script's own step has SLURM_PROCID but no SLURM_STEP_ID */
  case CDDP_ENV_SLURM: return cddp__envp_get(envp, "SLURM_PROCID") && cddp__envp_get(envp, "SLURM_STEP_ID");
  /* Open MPI's OMPI_COMM_WORLD_RANK, or PMI_RANK of MPICH and Intel MPI */
  case CDDP_ENV_MPI: return cddp__envp_get(envp, "OMPI_COMM_WORLD_RANK") || cddp__envp_get(envp, "PMI_RANK");
  default: return 0;
  }
}

cddp_env_source_t cddp__launcher_detect(char **envp) {
  static const cddp_env_source_t order[] = {CDDP_ENV_AGENT, CDDP_ENV_TORCHRUN, CDDP_ENV_SLURM, CDDP_ENV_MPI};
  for (size_t i = 0; i < sizeof order / sizeof order[0]; i++)
    if (cddp__launcher_present(envp, order[i])) return order[i];
  return CDDP_ENV_NONE;
}

int cddp__launcher_rank(char **envp) {
  const char *v = NULL;
  switch (cddp__launcher_detect(envp)) {
  case CDDP_ENV_AGENT:
  case CDDP_ENV_TORCHRUN: v = cddp__envp_get(envp, "RANK"); break;
  case CDDP_ENV_SLURM: v = cddp__envp_get(envp, "SLURM_PROCID"); break;
  case CDDP_ENV_MPI:
    if (!(v = cddp__envp_get(envp, "OMPI_COMM_WORLD_RANK"))) v = cddp__envp_get(envp, "PMI_RANK");
    break;
  default: return -1;
  }
  char *end;
  long r = v && *v ? strtol(v, &end, 10) : -1;
  return v && *v && !*end && r >= 0 && r < (1 << 24) ? (int)r : -1;
}

const char *cddp__launcher_name(cddp_env_source_t src) {
  switch (src) {
  case CDDP_ENV_AGENT: return "cddp run";
  case CDDP_ENV_TORCHRUN: return "torchrun";
  case CDDP_ENV_SLURM: return "srun";
  case CDDP_ENV_MPI: return "mpirun";
  default: return "none";
  }
}
