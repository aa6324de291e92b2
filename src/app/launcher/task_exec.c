/* task_exec.c - `cddp run` without an agent: a task of an srun step or of mpirun becomes its
 * rank (exec with the environment contract), a Slurm batch script re-runs itself under srun. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/knobs.h"
#include "job/store_reach.h"
#include "launcher/slurm_token.h"
#include "launcher/task_exec.h"

extern char **environ;

int cddp__task_exec_rank(cddp_run_opts_t *o, char **argv) {
  char v[64];
#define SETI(name, x) (snprintf(v, sizeof v, "%d", (x)), setenv(name, v, 1))
  SETI("RANK", o->rank);
  SETI("LOCAL_RANK", o->local_rank);
  SETI("WORLD_SIZE", o->world_size);
  SETI("LOCAL_WORLD_SIZE", o->local_world_size);
  SETI("GROUP_RANK", o->node_rank);
  SETI("GROUP_WORLD_SIZE", o->max_nodes);
  SETI("MASTER_PORT", o->master_port);
  SETI("CDDP_ROUND", 0);
  SETI("CDDP_RESTART_COUNT", 0);
  SETI("CDDP_MAX_RESTARTS", 0);
  SETI("TORCHELASTIC_RESTART_COUNT", 0);
  SETI("TORCHELASTIC_MAX_RESTARTS", 0);
#undef SETI
  setenv("MASTER_ADDR", o->master_addr, 1);
  setenv("CDDP_RUN_ID", o->run_id, 1);
  /* an srun step over several nodes and no token: the Slurm job's, for rank 0's store (no agent
   * is left to remove its file: it goes when it is a month old) */
  char token[64], path[4096];
  if (o->mode == CDDP_RUN_SLURM_RANK && o->max_nodes > 1 && !getenv(cddp__knob_var(CDDP_KNOB_TOKEN)) &&
      !getenv(cddp__knob_var(CDDP_KNOB_TOKEN_FILE))) {
    if (cddp__slurm_token(environ, token, sizeof token, path, sizeof path) != CDDP_OK) {
      fprintf(stderr, "cddp run: %s\n", cddp_last_error());
      return 2;
    }
    setenv(cddp__knob_var(CDDP_KNOB_TOKEN), token, 1);
  }
  setenv("TORCHELASTIC_RUN_ID", o->run_id, 1);
  setenv("TORCHELASTIC_USE_AGENT_STORE", "False", 1); /* torch's rank 0 hosts its TCPStore */
  setenv("ROLE_NAME", o->role, 1);
  unsetenv("CDDP_STORE"); /* no agent hosts a store: rank 0 does (cddp_env_connect) */
  execvp(argv[0], argv);
  fprintf(stderr, "cddp run: cannot run '%s': %s\n", argv[0], strerror(errno));
  return 127;
}

int cddp__slurm_exec_srun(int argc, char **argv, int replace) {
  const char *nn = getenv("SLURM_JOB_NUM_NODES");
  if (!nn) nn = getenv("SLURM_NNODES");
  char self[4096], nodes[64];
  ssize_t l = readlink("/proc/self/exe", self, sizeof self - 1);
  if (l <= 0 || !nn) {
    fprintf(stderr, "cddp run: --launcher slurm outside a job step needs SLURM_JOB_NUM_NODES and /proc/self/exe\n");
    return 2;
  }
  self[l] = '\0';
  snprintf(nodes, sizeof nodes, "--nodes=%s", nn);
  /* The job's token, unless the user gave one: the agents are this process's srun tasks, and srun
   * hands them its environment, which only this user (and root, and Slurm) can read. So the job
   * is authenticated without a flag, and a stranger on the nodes' network cannot join it. */
  char token[40];
  if (!getenv(cddp__knob_var(CDDP_KNOB_TOKEN)) && !getenv(cddp__knob_var(CDDP_KNOB_TOKEN_FILE)) &&
      cddp__job_token_random(token, sizeof token) == 0)
    setenv(cddp__knob_var(CDDP_KNOB_TOKEN), token, 1);
  char **av = calloc((size_t)argc + 8, sizeof *av);
  int k = 0;
  av[k++] = "srun";
  av[k++] = nodes;
  av[k++] = "--ntasks-per-node=1";
  av[k++] = replace ? "--kill-on-bad-exit=0" : "--kill-on-bad-exit=1";
  av[k++] = self;
  av[k++] = "run";
  av[k++] = "--launcher=slurm";
  for (int i = 1; i < argc; i++) av[k++] = argv[i];
  av[k] = NULL;
  execvp("srun", av);
  fprintf(stderr, "cddp run: cannot run srun: %s\n", strerror(errno));
  return 127;
}
