/* task_exec.h - the modes of `cddp run` that replace the process (exec): a task of srun or
 * mpirun becomes its rank; a Slurm batch step re-runs itself under srun. */
#ifndef CDDP_LAUNCHER_TASK_EXEC_H
#define CDDP_LAUNCHER_TASK_EXEC_H

#include "launcher/options.h"

/* A task per rank (srun -n N, mpirun -np N): sets RANK, WORLD_SIZE, MASTER_* ... from o and
 * execs argv (launcher/program.h). No agent runs, so no store: rank 0 of the program hosts its own
 * rendezvous on MASTER_PORT (a cddp program's store, torch's TCPStore); over several nodes
 * without a token, the Slurm job's (launcher/slurm_token.h) in CDDP_TOKEN. Returns only on
 * failure (2 or 127, with one line). */
int cddp__task_exec_rank(cddp_run_opts_t *o, char **argv);
/* The batch step: re-runs this command under `srun --ntasks-per-node=1`, one agent per node;
 * one failed node ends the step (--kill-on-bad-exit) unless replace (--restart-mode replace:
 * the others go on without it). Returns only on failure (2 or 127, with one line). */
int cddp__slurm_exec_srun(int argc, char **argv, int replace);

#endif /* CDDP_LAUNCHER_TASK_EXEC_H */
