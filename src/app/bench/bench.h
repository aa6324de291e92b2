/* bench.h - `cddp bench` internals: options, and the data patterns whose exact results it checks. */
#ifndef CDDP_BENCH_H
#define CDDP_BENCH_H

#include <stddef.h>

#include "cddp/comm.h"

typedef enum bench_coll {
  BENCH_ALLREDUCE = 0,
  BENCH_ALLGATHER,
  BENCH_REDUCE_SCATTER,
  BENCH_BROADCAST,
  BENCH_COLL_COUNT
} bench_coll_t;

typedef struct bench_opts {
  bench_coll_t coll;
  size_t minbytes, maxbytes, stepbytes; /* -b -e -i */
  long factor;                          /* -f; 0: step by stepbytes */
  long warmup, iters;                   /* -w -n */
  int check;                            /* -c */
  cddp_dtype_t dt;                      /* -d */
  cddp_redop_t op;                      /* -o */
  int root;                             /* -r */
  int zero_copy;                        /* --zero-copy: buffers from cddp_comm_mem_alloc */
  int thp;                              /* --thp: ordinary buffers on transparent huge pages */
  const char *transport;                /* --transport; NULL: CDDP_TRANSPORT */
  const char *backend;                  /* --backend; NULL: CDDP_BACKEND */
  int algo;                             /* --algo; -1: CDDP_ALGO */
  int blocking;                         /* --blocking 0: start every iteration, then wait */
  int device;                           /* --device cuda: the data in device memory, staged */
} bench_opts_t;

/* Parses argv (argv[0] is "bench"). Returns 0, 1 for --help (usage printed to stdout),
 * or 2 after printing one line naming the bad flag or value, then the usage, to stderr. */
int cddp__bench_parse(int argc, char **argv, bench_opts_t *o);
const char *cddp__bench_coll_name(bench_coll_t c);

/* The test pattern: element i of rank r holds the small integer v(r, i) = 1 + (i + 3r) % mod,
 * so that every sum over the world is exact in every type (mod shrinks for bf16 and f16 on
 * big worlds: sums stay <= 256 and <= 2048). */
int cddp__bench_mod(cddp_dtype_t dt, int world);
/* buf[j] = v(rank, first + j) for j < n. */
void cddp__bench_fill(void *buf, size_t n, cddp_dtype_t dt, int rank, size_t first, int mod);
/* buf[j] = val for j < n (val a small integer). */
void cddp__bench_fill_value(void *buf, size_t n, cddp_dtype_t dt, double val);
/* Number of j < n where buf[j] differs from op reduced over ranks 0..world-1 of
 * v(r, first + j) (AVG: within rounding for floats, truncated for integers). */
size_t cddp__bench_check_reduced(const void *buf, size_t n, cddp_dtype_t dt, cddp_redop_t op,
                                 int world, size_t first, int mod);
/* Number of j < n where buf[j] != v(rank, first + j). */
size_t cddp__bench_check_rank(const void *buf, size_t n, cddp_dtype_t dt, int rank, size_t first,
                              int mod);

#endif /* CDDP_BENCH_H */
