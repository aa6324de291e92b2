/* torch_fr_vars.h - torch's own flight recorder in a torch 2.x worker: the variables that turn it
 * on with its dumps in the run's flight folder (the user's own values win), and the request, through
 * torch's debug-info pipe, that a live rank dump now. */
#ifndef CDDP_LAUNCHER_TORCH_FR_VARS_H
#define CDDP_LAUNCHER_TORCH_FR_VARS_H

#define CDDP__TORCH_FR_VARS_MAX 8        /* "NAME=value" strings cddp__torch_fr_vars may give */
#define CDDP__TORCH_FR_DUMP "torch-fr-"       /* flight_dir/torch-fr-<rank>: torch's dump of that rank */
#define CDDP__TORCH_FR_PIPE "torch-fr-pipe-"  /* flight_dir/torch-fr-pipe-<rank>.pipe: torch's request fifo */

/* torch 2.7 renamed the variables (TORCH_NCCL_TRACE_BUFFER_SIZE -> TORCH_FR_BUFFER_SIZE ...) and
 * warns on every rank about an older name it finds set. */
#define CDDP__TORCH_FR_NEW_NAMES_MINOR 7

/* "NAME=value" strings (malloc'd, the caller frees) for each variable whose pair the agent's
 * environment leaves unset, into out[0..CDDP__TORCH_FR_VARS_MAX), under the one name torch
 * 2.<torch_minor> reads; returns how many. Creates flight_dir when it sets a path in it, since
 * torch writes there and never makes a folder. */
int cddp__torch_fr_vars(const char *flight_dir, int torch_minor, char **out);

/* Asks the rank's torch to write its dump (torch reads the fifo it made, NCCL groups only).
 * Never blocks: returns 1 when the request went in, 0 when there is no such fifo or no reader. */
int cddp__torch_fr_poke(const char *flight_dir, int rank);

#endif
