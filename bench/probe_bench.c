/* probe_bench.c - the watchdog's pass over workers without a flight page, measured apart (issue
 * 30): cddp__probe_find over N live, idle child processes (each read from /proc, as the agent does
 * every 0.5 s), its wall and CPU time per pass; and what that is as a share of one CPU at the
 * agent's 2 passes a second. Usage: build/bench/probe_bench [RANKS] [PASSES]  (default 2, 20000) */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "launcher/hang_probe.h"

#define MAX_RANKS 64
#define PASSES_PER_S 2 /* workers.c's HANG_CHECK_MS of 500 */

static double secs(clockid_t c) {
  struct timespec t;
  clock_gettime(c, &t);
  return (double)t.tv_sec + t.tv_nsec / 1e9;
}

int main(int argc, char **argv) {
  int ranks = argc > 1 ? atoi(argv[1]) : 2, passes = argc > 2 ? atoi(argv[2]) : 20000;
  if (ranks < 1 || ranks > MAX_RANKS || passes < 1) {
    fprintf(stderr, "probe_bench: RANKS is 1-%d and PASSES positive\n", MAX_RANKS);
    return 2;
  }
  static cddp__probe_t p[MAX_RANKS];
  for (int i = 0; i < ranks; i++) {
    pid_t c = fork();
    if (c < 0) return perror("fork"), 1;
    if (c == 0) for (;;) pause();
    p[i] = (cddp__probe_t){.pid = c, .rank = i};
  }
  char why[320];
  double w0 = secs(CLOCK_MONOTONIC), c0 = secs(CLOCK_PROCESS_CPUTIME_ID);
  for (int k = 0; k < passes; k++) {
    for (int i = 0; i < ranks; i++) p[i].line_ns = (uint64_t)k + 1; /* a line each pass: a healthy job */
    cddp__probe_find(p, ranks, (uint64_t)(secs(CLOCK_MONOTONIC) * 1e9), 5000, 0, "/nonexistent", why, sizeof why);
  }
  double wall = (secs(CLOCK_MONOTONIC) - w0) / passes, cpu = (secs(CLOCK_PROCESS_CPUTIME_ID) - c0) / passes;
  for (int i = 0; i < ranks; i++) kill(p[i].pid, SIGKILL), waitpid(p[i].pid, NULL, 0);
  printf("the watchdog's pass over %d ranks: %.2f us wall, %.2f us CPU; at %d passes a second %.4f%% of one CPU\n",
         ranks, wall * 1e6, cpu * 1e6, PASSES_PER_S, 100.0 * cpu * PASSES_PER_S);
  return 0;
}
