/* ranks.h - every rank's own step timings, gathered every few steps, and the straggler rule. */
#ifndef CDDP_TRAINER_RANKS_H
#define CDDP_TRAINER_RANKS_H

#include "cddp/comm.h"

/* One rank's means over a window, ms per step. busy = compute + data + optim: its own work, not
 * the time it waited for the others (comm, the exposed all-reduce). */
typedef struct cddp__rank_times {
  double compute_ms, data_ms, optim_ms, comm_ms;
  double peak_rss_mb; /* the process's peak resident memory so far (getrusage ru_maxrss) */
} cddp__rank_times_t;

typedef struct cddp__ranks {
  int every, pct, windows;  /* log.rank_every, log.straggler_pct, log.straggler_windows */
  double sum[4];            /* this rank's window so far: compute, data, optim, comm (s) */
  int steps;
  int world;                /* of the last gather */
  cddp__rank_times_t *all;  /* each rank's means at the last gather (world entries) */
  int *over;                /* consecutive windows each rank's busy time was over the line */
  int slowest;              /* busiest rank at the last gather, -1 before the first */
  double spread;            /* (busiest - least busy) / least busy */
  int straggler;            /* the rank named a straggler (-1: none) */
  int fresh;                /* the last gather named it for the first time: say so */
  int calm;                 /* consecutive windows the named straggler was under the line */
  double straggler_pct;     /* how far above the others' median its busy time was */
} cddp__ranks_t;

void cddp__ranks_init(cddp__ranks_t *r, int every, int pct, int windows);
void cddp__ranks_free(cddp__ranks_t *r);
/* This rank's figures of one step (seconds). */
void cddp__ranks_add(cddp__ranks_t *r, double compute_s, double data_s, double optim_s, double comm_s);
/* Every rank calls it at the same steps (step % every == 0): one all-gather of 6 doubles a rank;
 * then all, slowest, spread and the straggler rule are up to date on every rank (judge below).
 * Errors are the all-gather's. */
cddp_result_t cddp__ranks_gather(cddp__ranks_t *r, cddp_comm_t *comm);
/* The rule, on all (world entries, just gathered): slowest and spread; a rank whose busy time
 * is more than pct % above the median of the others' for `windows` gathers in a row is the
 * straggler (fresh the gather it is named); it stays one until it has been under the line for
 * `windows` gathers in a row. */
cddp_result_t cddp__ranks_judge(cddp__ranks_t *r);

#endif /* CDDP_TRAINER_RANKS_H */
