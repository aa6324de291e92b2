/* slurm_step.c - reads a Slurm step task's variables; shared by `cddp run` and cddp_env_read. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/check.h"
#include "common/nodelist.h"
#include "common/envp.h"
#include "common/slurm_step.h"

/* The step-wide variable when set, else the job-wide ones in order (job2 may be NULL); *name
 * says which was used. A step may run on fewer nodes than its job: the step's list wins. */
static const char *step_var3(char **envp, const char *step, const char *job, const char *job2, const char **name) {
  const char *v = cddp__envp_get(envp, step);
  *name = step;
  if ((!v || !*v) && job && (v = cddp__envp_get(envp, job)) && *v) *name = job;
  if ((!v || !*v) && job2 && (v = cddp__envp_get(envp, job2)) && *v) *name = job2;
  return v && *v ? v : NULL;
}
static const char *step_var(char **envp, const char *step, const char *job, const char **name) {
  return step_var3(envp, step, job, NULL, name);
}

static cddp_result_t number(const char *name, const char *v, long lo, long hi, const char *what, long *out) {
  char *end;
  errno = 0;
  long x = v ? strtol(v, &end, 10) : 0;
  if (!v) return cddp__fail(CDDP_INVALID_ARG, "Slurm step without %s", name);
  if (!*v || *end || errno || x < lo || x > hi)
    return cddp__fail(CDDP_INVALID_ARG, "%s=%s is not %s", name, v, what);
  *out = x;
  return CDDP_OK;
}

cddp_result_t cddp__slurm_step_read(char **envp, cddp__slurm_step_t *s) {
  const char *nn, *nt, *nl, *tp, *jn;
  const char *nodes = step_var3(envp, "SLURM_STEP_NUM_NODES", "SLURM_JOB_NUM_NODES", "SLURM_NNODES", &nn);
  const char *tasks = step_var(envp, "SLURM_STEP_NUM_TASKS", "SLURM_NTASKS", &nt);
  const char *list = step_var3(envp, "SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST", &nl);
  const char *tpn = step_var(envp, "SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE", &tp);
  const char *jobid = step_var(envp, "SLURM_JOB_ID", "SLURM_JOBID", &jn);
  long nnodes, ntasks, nodeid, localid, rank, job = 0, step = 0;
  char what[96];
  memset(s, 0, sizeof *s);
  CDDP_CHECK(number(nn, nodes, 1, 1 << 20, "a node count", &nnodes));
  CDDP_CHECK(number(nt, tasks, 1, 1 << 24, "a task count", &ntasks));
  snprintf(what, sizeof what, "below %s=%ld", nn, nnodes);
  CDDP_CHECK(number("SLURM_NODEID", cddp__envp_get(envp, "SLURM_NODEID"), 0, nnodes - 1, what, &nodeid));
  CDDP_CHECK(number("SLURM_LOCALID", cddp__envp_get(envp, "SLURM_LOCALID"), 0, ntasks - 1, "a task index", &localid));
  snprintf(what, sizeof what, "below %s=%ld", nt, ntasks);
  CDDP_CHECK(number("SLURM_PROCID", cddp__envp_get(envp, "SLURM_PROCID"), 0, ntasks - 1, what, &rank));
  if (jobid) CDDP_CHECK(number(jn, jobid, 0, 1L << 40, "a job id", &job));
  const char *stepid = cddp__envp_get(envp, "SLURM_STEP_ID");
  if (stepid) CDDP_CHECK(number("SLURM_STEP_ID", stepid, 0, 1L << 40, "a step id", &step));

  s->rank = (int)rank, s->world = (int)ntasks, s->local_rank = (int)localid;
  s->node_rank = (int)nodeid, s->nnodes = (int)nnodes, s->job = job, s->step = step;
  s->nnodes_var = nn;
  s->local_world = 1;
  if (tpn) CDDP_CHECK(cddp__tasks_per_node(tpn, s->node_rank, &s->local_world));
  else if (ntasks != nnodes) return cddp__fail(CDDP_INVALID_ARG, "Slurm step without SLURM_STEP_TASKS_PER_NODE");

  const char *maddr = cddp__envp_get(envp, "MASTER_ADDR");
  if (maddr && *maddr) {
    snprintf(s->master_addr, sizeof s->master_addr, "%s", maddr);
    s->master_var = "MASTER_ADDR";
  } else if (list) {
    CDDP_CHECK(cddp__nodelist_first(list, s->master_addr, sizeof s->master_addr));
    s->master_var = nl;
    if (strlen(list) < sizeof s->nodes) snprintf(s->nodes, sizeof s->nodes, "%s", list);
  } else {
    return cddp__fail(CDDP_INVALID_ARG, "Slurm step without SLURM_STEP_NODELIST (or MASTER_ADDR)");
  }
  const char *mport = cddp__envp_get(envp, "MASTER_PORT");
  long port = cddp__slurm_port(job, step);
  s->port_var = "SLURM_JOB_ID";
  if (mport && *mport) {
    CDDP_CHECK(number("MASTER_PORT", mport, 1, 65535, "a port 1-65535", &port));
    s->port_var = "MASTER_PORT";
  }
  s->master_port = (int)port;
  snprintf(s->run_id, sizeof s->run_id, "slurm-%ld.%ld", job, step);
  return CDDP_OK;
}
