/* slurm_token.h - the job token of a hand-written `srun cddp run` that was given none: a secret
 * every node of the Slurm job reads from a private file under the user's home, which the job's
 * nodes share (a shared file system is assumed; without one the nodes' tokens differ and the
 * store refuses them in one line, which names CDDP_TOKEN_FILE as the way out). */
#ifndef CDDP_LAUNCHER_SLURM_TOKEN_H
#define CDDP_LAUNCHER_SLURM_TOKEN_H

#include <stddef.h>

#include "cddp/cddp.h"

/* The token of the Slurm job that envp names (SLURM_JOB_ID): read from
 * HOME/.cddp/slurm-tokens/job-JOBID, made there first (random, 0600, published whole with
 * link(2) so a node never reads half of one) by whichever node comes first. The folders must be
 * the user's own and private (0700): anything else is refused in one line, as is a token file
 * that is a link, not the user's or readable by others. path (path_size bytes) gets the file's
 * path, for cddp__slurm_token_remove once the job is over; files older than 30 days (of jobs
 * whose tasks ran as ranks, with no agent left to remove them) go when a new one is made. */
cddp_result_t cddp__slurm_token(char **envp, char *token, size_t size, char *path, size_t path_size);
/* Removes the job's token file (the node that hosted the store, after the others left). */
void cddp__slurm_token_remove(const char *path);

#endif /* CDDP_LAUNCHER_SLURM_TOKEN_H */
