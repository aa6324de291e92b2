/* mpi_step.c - reads Open MPI's / MPICH's rank variables into one description of the process. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/check.h"
#include "common/mpi_step.h"
#include "common/envp.h"

cddp_result_t cddp__mpi_step_read(char **envp, cddp__mpi_step_t *s) {
  memset(s, 0, sizeof *s);
  int ompi = cddp__envp_get(envp, "OMPI_COMM_WORLD_RANK") != NULL;
  const char *rn = ompi ? "OMPI_COMM_WORLD_RANK" : "PMI_RANK", *wn = ompi ? "OMPI_COMM_WORLD_SIZE" : "PMI_SIZE";
  const char *lrn = ompi ? "OMPI_COMM_WORLD_LOCAL_RANK" : "MPI_LOCALRANKID";
  const char *lwn = ompi ? "OMPI_COMM_WORLD_LOCAL_SIZE" : "MPI_LOCALNRANKS";
  CDDP_CHECK(cddp__envp_int(envp, wn, 1, 1, 1 << 24, &s->world));
  CDDP_CHECK(cddp__envp_int(envp, rn, 0, 0, 1 << 24, &s->rank));
  if (s->rank >= s->world) return cddp__fail(CDDP_INVALID_ARG, "%s=%d is not below %s=%d", rn, s->rank, wn, s->world);
  CDDP_CHECK(cddp__envp_int(envp, lwn, 1, 1, 1 << 24, &s->local_world));
  CDDP_CHECK(cddp__envp_int(envp, lrn, 0, 0, 1 << 24, &s->local_rank));
  /* block mapping assumed: node = rank / ranks-per-node */
  s->nnodes = (s->world + s->local_world - 1) / s->local_world;
  s->node_rank = s->rank / s->local_world;
  const char *job = cddp__envp_get(envp, "OMPI_MCA_ess_base_jobid");
  if (!job) job = cddp__envp_get(envp, "PMIX_NAMESPACE");
  if (!job) job = cddp__envp_get(envp, "PMI_KVSNAME");
  unsigned long h = 5381;
  for (const char *c = job ? job : ""; *c; c++) h = h * 33u + (unsigned char)*c;
  snprintf(s->run_id, sizeof s->run_id, "mpi-%lx", h & 0xffffffffu);
  const char *a = cddp__envp_get(envp, "MASTER_ADDR");
  if (a && *a) snprintf(s->master_addr, sizeof s->master_addr, "%s", a);
  else if (s->local_world < s->world)
    return cddp__fail(CDDP_INVALID_ARG, "an MPI launch across hosts needs MASTER_ADDR (rank 0's host) in the environment");
  else snprintf(s->master_addr, sizeof s->master_addr, "127.0.0.1");
  int dflt = job ? 20000 + (int)(h % 12768u) : 0;
  CDDP_CHECK(cddp__envp_int(envp, "MASTER_PORT", dflt, 1, 65535, &s->master_port));
  if (!s->master_port && s->world > 1)
    return cddp__fail(CDDP_INVALID_ARG, "MPI launch without a job id: set MASTER_PORT for the store");
  return CDDP_OK;
}
