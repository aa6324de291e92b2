/* desync_bench.c - what the desync check (CDDP_DESYNC_CHECK) costs a small allreduce, with and
 * without in the same run. Build: make lib && make -C bench desync; run:
 *   build/bench/desync_bench [-t shm|tcp] [-b BYTES] [-n CALLS] [-r ROUNDS] [-w WORLD]
 * Each rank (forked, over a TCP store of its own) opens two communicators, one with the check
 * and one without (the knob is read at init), and times CALLS allreduces of BYTES on each in
 * turn, ROUNDS times, the order alternating. Rank 0 prints the median time per call of each,
 * and the difference. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cddp/comm.h"
#include "cddp/store.h"

enum { MAXR = 201 };

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int cmp_d(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_d);
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static void die(const char *what, cddp_result_t r) {
  fprintf(stderr, "desync_bench: %s: %s: %s\n", what, cddp_result_name(r), cddp_last_error());
  exit(1);
}

static int rank_main(int rank, int world, int port, const char *tp, size_t bytes, int calls, int rounds) {
  cddp_store_t *st;
  cddp_result_t r = cddp_store_tcp_connect(&st, "127.0.0.1", port, "", 5000);
  if (r) die("store", r);
  cddp_comm_config_t cfg;
  cddp_comm_config_default(&cfg);
  cfg.transport = tp;
  cddp_comm_t *c[2]; /* [0] without the check, [1] with it */
  for (int k = 0; k < 2; k++) {
    setenv("CDDP_DESYNC_CHECK", k ? "1" : "0", 1);
    if ((r = cddp_comm_init(&c[k], st, rank, world, k, &cfg))) die("comm init", r);
  }
  size_t n = bytes / 4;
  float *x = calloc(n ? n : 1, 4);
  double t[2][MAXR];
  for (int k = 0; k < 2; k++) /* warm-up, and the tuner's calibration where it runs */
    for (int i = 0; i < calls; i++)
      if ((r = cddp_allreduce(c[k], x, x, n, CDDP_F32, CDDP_SUM))) die("allreduce", r);
  for (int round = 0; round < rounds; round++)
    for (int j = 0; j < 2; j++) {
      int k = (round + j) % 2; /* alternate which goes first */
      if ((r = cddp_barrier(c[k]))) die("barrier", r);
      double t0 = now();
      for (int i = 0; i < calls; i++)
        if ((r = cddp_allreduce(c[k], x, x, n, CDDP_F32, CDDP_SUM))) die("allreduce", r);
      t[k][round] = (now() - t0) / calls;
    }
  if (rank == 0) {
    double off = median(t[0], rounds), on = median(t[1], rounds);
    printf("%-4s %2d ranks %8zu B  without %8.3f us  with %8.3f us  difference %+7.3f us  (median of %d x %d calls)\n",
           tp, world, bytes, off * 1e6, on * 1e6, (on - off) * 1e6, rounds, calls);
  }
  for (int k = 0; k < 2; k++) cddp_comm_destroy(c[k]);
  cddp_store_close(st);
  free(x);
  return 0;
}

int main(int argc, char **argv) {
  const char *tp = "shm";
  size_t bytes = 4096;
  int calls = 2000, rounds = 31, world = 2, opt;
  while ((opt = getopt(argc, argv, "t:b:n:r:w:")) != -1) {
    switch (opt) {
      case 't': tp = optarg; break;
      case 'b': bytes = (size_t)strtoull(optarg, NULL, 10); break;
      case 'n': calls = atoi(optarg); break;
      case 'r': rounds = atoi(optarg); break;
      case 'w': world = atoi(optarg); break;
      default:
        fprintf(stderr, "usage: desync_bench [-t shm|tcp] [-b BYTES] [-n CALLS] [-r ROUNDS] [-w WORLD]\n");
        return 2;
    }
  }
  if (calls < 1 || rounds < 1 || rounds > MAXR || world < 2 || world > 64) {
    fprintf(stderr, "desync_bench: -n >= 1, -r in 1..%d, -w in 2..64\n", MAXR);
    return 2;
  }
  cddp_store_server_t *srv;
  cddp_result_t r = cddp_store_server_start(&srv, "127.0.0.1", 0, "");
  if (r) die("store server", r);
  int port = cddp_store_server_port(srv);
  pid_t pids[64];
  fflush(NULL);
  for (int q = 0; q < world; q++) {
    pids[q] = fork();
    if (pids[q] == 0) {
      int rc = rank_main(q, world, port, tp, bytes, calls, rounds);
      fflush(stdout); /* _exit does not flush */
      _exit(rc);
    }
  }
  int bad = 0;
  for (int q = 0; q < world; q++) {
    int st = 0;
    waitpid(pids[q], &st, 0);
    bad |= !WIFEXITED(st) || WEXITSTATUS(st);
  }
  cddp_store_server_stop(srv);
  return bad;
}
