/* tcp_speed.c - allreduce busbw over the TCP transport, ranks as threads of one process (TCP forced).
 * usage: tcp_speed [-b bytes] [-n iters] [-w warmup] [-r ranks] [-o] (out of place) [-d dtype f32|bf16] */
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cddp/comm.h"
#include "cddp/store.h"

static size_t bytes = 64u << 20;
static int iters = 20, warmup = 3, ranks = 2, out_of_place = 0;
static cddp_dtype_t dt = CDDP_F32;
static cddp_store_t *store;
static double secs[64];
static int wrong[64];

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void *rank_main(void *arg) {
  int r = (int)(long)arg;
  if (getenv("TCP_SPEED_PIN")) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(r % 2, &set);
    pthread_setaffinity_np(pthread_self(), sizeof set, &set);
  }
  cddp_comm_t *c;
  cddp_comm_config_t cfg;
  cddp_comm_config_default(&cfg);
  cfg.transport = "tcp";
  if (cddp_comm_init(&c, store, r, ranks, 0, &cfg) != CDDP_OK) {
    fprintf(stderr, "rank %d: init: %s\n", r, cddp_last_error());
    exit(1);
  }
  size_t n = bytes / cddp_dtype_size(dt);
  float *a = aligned_alloc(4096, bytes + 4096), *b = aligned_alloc(4096, bytes + 4096);
  for (size_t i = 0; dt == CDDP_F32 && i < n; i++) a[i] = (float)(r + 1);
  memset(b, 0, bytes);
  double t0 = 0;
  for (int it = 0; it < warmup + iters; it++) {
    if (it == warmup) t0 = now();
    if (dt == CDDP_F32 && !out_of_place) /* keep values exact: reset before each call */
      for (size_t i = 0; i < n; i += 1024) a[i] = (float)(r + 1);
    if (cddp_allreduce(c, a, out_of_place ? b : a, n, dt, CDDP_SUM) != CDDP_OK) {
      fprintf(stderr, "rank %d: allreduce: %s\n", r, cddp_last_error());
      exit(1);
    }
  }
  secs[r] = (now() - t0) / iters;
  float want = (float)(ranks * (ranks + 1) / 2);
  const float *res = out_of_place ? b : a;
  for (size_t i = 0; dt == CDDP_F32 && i < n; i += 1024) wrong[r] += res[i] != want;
  cddp_comm_destroy(c);
  free(a);
  free(b);
  return NULL;
}

int main(int argc, char **argv) {
  int opt;
  while ((opt = getopt(argc, argv, "b:n:w:r:od:")) != -1) {
    if (opt == 'b') bytes = strtoull(optarg, NULL, 0);
    else if (opt == 'n') iters = atoi(optarg);
    else if (opt == 'w') warmup = atoi(optarg);
    else if (opt == 'r') ranks = atoi(optarg);
    else if (opt == 'o') out_of_place = 1;
    else if (opt == 'd') dt = strcmp(optarg, "bf16") == 0 ? CDDP_BF16 : CDDP_F32;
    else return fprintf(stderr, "usage: %s [-b bytes] [-n iters] [-w warmup] [-r ranks] [-o] [-d f32|bf16]\n", argv[0]), 2;
  }
  if (ranks < 2 || ranks > 64 || iters < 1) return fprintf(stderr, "tcp_speed: need 2..64 ranks, >= 1 iteration\n"), 2;
  if (cddp_store_mem_create(&store) != CDDP_OK) return fprintf(stderr, "store: %s\n", cddp_last_error()), 1;
  pthread_t th[64];
  for (long r = 0; r < ranks; r++) pthread_create(&th[r], NULL, rank_main, (void *)r);
  double worst = 0;
  int bad = 0;
  for (int r = 0; r < ranks; r++) {
    pthread_join(th[r], NULL);
    worst = secs[r] > worst ? secs[r] : worst;
    bad += wrong[r];
  }
  double algbw = bytes / worst / 1e9, busbw = algbw * 2 * (ranks - 1) / ranks;
  printf("tcp allreduce %zu bytes %s, %d ranks: %.3f ms  algbw %.2f GB/s  busbw %.2f GB/s  wrong %d\n", bytes,
         out_of_place ? "out-of-place" : "in-place", ranks, worst * 1e3, algbw, busbw, bad);
  cddp_store_close(store);
  return bad ? 1 : 0;
}
