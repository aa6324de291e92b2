/* slurm_exec.h - the two Slurm modes of `cddp run` that replace the process (exec). */
#ifndef CDDP_RUN_SLURM_EXEC_H
#define CDDP_RUN_SLURM_EXEC_H

#include "run/options.h"

/* A task per rank: sets RANK, WORLD_SIZE, MASTER_* ... from o and execs prog. Returns only on
 * failure (127, with one line). */
int cddp__slurm_exec_rank(cddp_run_opts_t *o, char **prog);
/* The batch step: re-runs this command under `srun --ntasks-per-node=1`, one agent per node.
 * Returns only on failure (2 or 127, with one line). */
int cddp__slurm_exec_srun(int argc, char **argv);

#endif /* CDDP_RUN_SLURM_EXEC_H */
