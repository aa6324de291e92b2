/* run_worker.c - a worker for the launcher's shell tests: reads its env, joins the store,
 * does a barrier with the token, prints its place; optional behaviours via arguments. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cddp/env.h"

/* usage: run_worker [barrier] [exit=CODE@RANK] [exit=CODE@RANK/RESTART] [ignore-term] [sleep=S]
 *                   [partial] [print=N] */
int main(int argc, char **argv) {
  cddp_env_t e;
  if (cddp_env_read(&e) != CDDP_OK) {
    fprintf(stderr, "env: %s\n", cddp_last_error());
    return 10;
  }
  int barrier = 0, ignore_term = 0, partial = 0, lines = 0;
  double sleep_s = 0;
  for (int i = 1; i < argc; i++) {
    int code, rank, restart = -1;
    if (!strcmp(argv[i], "barrier")) barrier = 1;
    else if (!strcmp(argv[i], "ignore-term")) ignore_term = 1;
    else if (!strcmp(argv[i], "partial")) partial = 1;
    else if (!strncmp(argv[i], "sleep=", 6)) sleep_s = atof(argv[i] + 6);
    else if (!strncmp(argv[i], "print=", 6)) lines = atoi(argv[i] + 6);
    else if (sscanf(argv[i], "exit=%d@%d/%d", &code, &rank, &restart) >= 2) {
      if (rank == e.rank && (restart < 0 || restart == e.restart_count)) {
        fprintf(stderr, "rank %d exiting with %d\n", e.rank, code);
        return code;
      }
    }
  }
  if (ignore_term) signal(SIGTERM, SIG_IGN);
  printf("rank=%d world=%d local=%d/%d node=%d/%d round=%d restart=%d max_restarts=%d run=%s store=%s:%d\n", e.rank,
         e.world_size, e.local_rank, e.local_world_size, e.node_rank, e.nnodes, e.round, e.restart_count,
         e.max_restarts, e.run_id, e.master_addr, e.master_port);
  fflush(stdout);
  for (int i = 0; i < lines; i++) printf("line %d of rank %d\n", i, e.rank);
  if (barrier) {
    cddp_store_t *s;
    cddp_store_server_t *hosted;
    if (cddp_env_connect(&e, 20000, &s, &hosted) != CDDP_OK) {
      fprintf(stderr, "connect: %s\n", cddp_last_error());
      return 11;
    }
    char key[64], round[32];
    snprintf(round, sizeof round, "test/%d/", e.round);
    snprintf(key, sizeof key, "%sin/%d", round, e.rank);
    cddp_store_set(s, key, "1", 1);
    for (int r = 0; r < e.world_size; r++) {
      const char *k = key;
      snprintf(key, sizeof key, "%sin/%d", round, r);
      if (cddp_store_wait(s, &k, 1, 20000) != CDDP_OK) {
        fprintf(stderr, "barrier: %s\n", cddp_last_error());
        return 12;
      }
    }
    printf("barrier passed rank=%d world=%d\n", e.rank, e.world_size);
    fflush(stdout);
    /* whoever hosts the store (rank 0 without an agent) stops it only after all have left */
    snprintf(key, sizeof key, "%sout/%d", round, e.rank);
    cddp_store_set(s, key, "1", 1);
    for (int r = 0; hosted && r < e.world_size; r++) {
      const char *k = key;
      snprintf(key, sizeof key, "%sout/%d", round, r);
      cddp_store_wait(s, &k, 1, 20000);
    }
    cddp_env_disconnect(s, hosted);
  }
  if (sleep_s > 0) usleep((useconds_t)(sleep_s * 1e6));
  if (partial) {
    printf("no newline from rank %d", e.rank);
    fflush(stdout);
  }
  return 0;
}
