/* shm_speed.c - tuning driver for the shm transport: ranks as threads (or forked processes
 * over a TCP store), allreduce time and busbw per size, best and median of several runs.
 * usage: shm_speed [-w world] [-b bytes] [-e bytes] [-f factor] [-n iters] [-r repeats]
 *                  [-z] (buffers from cddp_comm_mem_alloc) [-i] (in place) [-p] (processes) */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cddp/comm.h"
#include "cddp/store.h"
#include "comm/transport.h"

const cddp__transport_t *const shm_speed_force_link = &cddp__transport_shm;

static int world = 2, iters = 0, repeats = 5, zc = 0, inplace = 0, procs = 0;
static size_t bmin = 4096, bmax = 64u << 20, factor = 4;
static cddp_store_t *store;
static int store_port;

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static void die(const char *what, cddp_result_t r) {
  fprintf(stderr, "shm_speed: %s: %s (%s)\n", what, cddp_result_name(r), cddp_last_error());
  exit(1);
}

static void *rank_main(void *arg) {
  int rank = (int)(intptr_t)arg;
  cddp_comm_t *c;
  cddp_comm_config_t cfg;
  cddp_comm_config_default(&cfg);
  cfg.transport = "shm";
  cddp_store_t *st = store;
  cddp_result_t r;
  if (procs && (r = cddp_store_tcp_connect(&st, "127.0.0.1", store_port, "", 5000)) != CDDP_OK)
    die("store connect", r);
  if ((r = cddp_comm_init(&c, st, rank, world, 0, &cfg)) != CDDP_OK) die("comm init", r);
  float *send, *recv;
  if (zc) {
    if ((r = cddp_comm_mem_alloc(c, bmax, (void **)&send)) != CDDP_OK) die("mem_alloc", r);
    if ((r = cddp_comm_mem_alloc(c, bmax, (void **)&recv)) != CDDP_OK) die("mem_alloc", r);
  } else {
    send = malloc(bmax), recv = malloc(bmax);
  }
  if (inplace) recv = send;
  memset(send, 0, bmax), memset(recv, 0, bmax);
  if (rank == 0)
    printf("# %d ranks (%s), %s buffers%s\n# %10s %10s %10s %10s %10s\n", world,
           procs ? "processes" : "threads", zc ? "mem_alloc" : "malloc", inplace ? ", in place" : "",
           "bytes", "best_us", "median_us", "busbw_GB/s", "med_GB/s");
  for (size_t bytes = bmin; bytes <= bmax; bytes *= factor) {
    size_t n = bytes / 4;
    int it = iters ? iters : bytes <= (1u << 16) ? 20000 : bytes <= (4u << 20) ? 500 : 20;
    for (int w = 0; w < 5; w++) cddp_allreduce(c, send, recv, n, CDDP_F32, CDDP_SUM);
    double t[64];
    for (int k = 0; k < repeats && k < 64; k++) {
      cddp_barrier(c);
      double t0 = now_s();
      for (int i = 0; i < it; i++)
        if ((r = cddp_allreduce(c, send, recv, n, CDDP_F32, CDDP_SUM)) != CDDP_OK) die("allreduce", r);
      t[k] = (now_s() - t0) / it;
    }
    qsort(t, (size_t)repeats, sizeof t[0], cmp);
    double f = 2.0 * (world - 1) / world;
    if (rank == 0)
      printf("  %10zu %10.2f %10.2f %10.2f %10.2f\n", bytes, t[0] * 1e6, t[repeats / 2] * 1e6,
             bytes / t[0] * f / 1e9, bytes / t[repeats / 2] * f / 1e9);
    fflush(stdout);
  }
  if (zc) {
    cddp_comm_mem_free(c, inplace ? send : recv);
    if (!inplace) cddp_comm_mem_free(c, send);
  } else {
    free(send);
    if (!inplace) free(recv);
  }
  cddp_comm_destroy(c);
  if (procs) cddp_store_close(st);
  return NULL;
}

static size_t parse_size(const char *s) {
  char *end;
  double v = strtod(s, &end);
  if (*end == 'K' || *end == 'k') v *= 1024;
  if (*end == 'M' || *end == 'm') v *= 1048576;
  if (*end == 'G' || *end == 'g') v *= 1073741824;
  return (size_t)v;
}

int main(int argc, char **argv) {
  int opt;
  while ((opt = getopt(argc, argv, "w:b:e:f:n:r:zip")) != -1) {
    switch (opt) {
      case 'w': world = atoi(optarg); break;
      case 'b': bmin = parse_size(optarg); break;
      case 'e': bmax = parse_size(optarg); break;
      case 'f': factor = (size_t)atoi(optarg); break;
      case 'n': iters = atoi(optarg); break;
      case 'r': repeats = atoi(optarg); break;
      case 'z': zc = 1; break;
      case 'i': inplace = 1; break;
      case 'p': procs = 1; break;
      default:
        fprintf(stderr, "usage: shm_speed [-w world] [-b bytes] [-e bytes] [-f factor] [-n iters] "
                        "[-r repeats] [-z] [-i] [-p]\n");
        return 2;
    }
  }
  if (world < 2 || world > 8 || bmin < 4 || bmax < bmin || factor < 2 || repeats < 1) {
    fprintf(stderr, "shm_speed: bad arguments\n");
    return 2;
  }
  cddp_result_t r;
  if (procs) {
    cddp_store_server_t *srv;
    if ((r = cddp_store_server_start(&srv, "127.0.0.1", 0, "")) != CDDP_OK) die("store server", r);
    store_port = cddp_store_server_port(srv);
    pid_t pid[8];
    for (int k = 0; k < world; k++)
      if ((pid[k] = fork()) == 0) {
        rank_main((void *)(intptr_t)k);
        fflush(stdout);
        _exit(0);
      }
    int bad = 0;
    for (int k = 0; k < world; k++) {
      int st;
      waitpid(pid[k], &st, 0);
      bad |= !WIFEXITED(st) || WEXITSTATUS(st);
    }
    cddp_store_server_stop(srv);
    return bad;
  }
  if ((r = cddp_store_mem_create(&store)) != CDDP_OK) die("store", r);
  pthread_t th[8];
  for (int k = 0; k < world; k++) pthread_create(&th[k], NULL, rank_main, (void *)(intptr_t)k);
  for (int k = 0; k < world; k++) pthread_join(th[k], NULL);
  cddp_store_close(store);
  return 0;
}
