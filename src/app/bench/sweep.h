/* sweep.h - `cddp bench train --sweep`: cddp train over a grid of settings, one table. */
#ifndef CDDP_BENCH_SWEEP_H
#define CDDP_BENCH_SWEEP_H

/* argv[0] is "train". Returns the exit status: 0, 1 when a run failed, 2 on bad input. */
int cddp__bench_sweep(int argc, char **argv);

#endif /* CDDP_BENCH_SWEEP_H */
