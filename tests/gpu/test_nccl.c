/* test_nccl.c - the nccl backend on real GPUs: a world of one on device buffers (every
 * collective, two rounds, device cddp_comm_mem_alloc), two ranks on one GPU refused by name,
 * and with two GPUs or more: a two-rank all-reduce, then a timeout that ends in ncclCommAbort.
 * TAP output; exit 77 without a GPU (tests/gpu/run.sh). */
#include <cuda_runtime_api.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cddp/comm.h"
#include "cddp/store.h"
#include "gpu/gpu_main.h"

static int n_test, n_failed;
static void result(const char *name, int pass, const char *detail) {
  n_test++;
  if (!pass) n_failed++;
  printf("%s %d - %s%s%s\n", pass ? "ok" : "not ok", n_test, name, detail && detail[0] ? ": " : "", detail ? detail : "");
  fflush(stdout);
}

static cddp_comm_config_t nccl_cfg(int timeout_ms) {
  cddp_comm_config_t cfg;
  cddp_comm_config_default(&cfg);
  cfg.backend = "nccl";
  cfg.timeout_ms = timeout_ms;
  return cfg;
}

#define N 4096

/* in-place all-reduce SUM of v on GPU memory; returns the first element after it */
static cddp_result_t allreduce_value(cddp_comm_t *c, float v, float *out) {
  float *d = NULL, h[N];
  for (int i = 0; i < N; i++) h[i] = v;
  if (cudaMalloc((void **)&d, sizeof h) != cudaSuccess) return CDDP_SYSTEM;
  cudaMemcpy(d, h, sizeof h, cudaMemcpyHostToDevice);
  cddp_result_t r = cddp_allreduce(c, d, d, N, CDDP_F32, CDDP_SUM);
  cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost);
  cudaFree(d);
  *out = h[N - 1];
  return r;
}

static void world_of_one(void) {
  cddp_store_t *s = NULL;
  cddp_store_mem_create(&s);
  for (int round = 0; round < 2; round++) {
    cddp_comm_config_t cfg = nccl_cfg(30000);
    cddp_comm_t *c = NULL;
    cddp_result_t r = cddp_comm_init(&c, s, 0, 1, round, &cfg);
    char name[96];
    snprintf(name, sizeof name, "world of one, round %d: init", round);
    result(name, r == CDDP_OK && !strcmp(cddp_comm_transport(c), "nccl"), r == CDDP_OK ? cddp_comm_transport(c) : cddp_last_error());
    if (r != CDDP_OK) continue;
    float got = 0;
    r = allreduce_value(c, 2.5f, &got);
    snprintf(name, sizeof name, "world of one, round %d: all-reduce on device memory", round);
    result(name, r == CDDP_OK && got == 2.5f, r == CDDP_OK ? "" : cddp_last_error());
    void *mem = NULL;
    r = cddp_comm_mem_alloc(c, 1 << 20, &mem);
    struct cudaPointerAttributes at;
    int on_gpu = r == CDDP_OK && cudaPointerGetAttributes(&at, mem) == cudaSuccess && at.type == cudaMemoryTypeDevice;
    result("cddp_comm_mem_alloc gives device memory", on_gpu, r == CDDP_OK ? "" : cddp_last_error());
    if (r == CDDP_OK) {
      int ok = cddp_allgather(c, mem, mem, 1024, CDDP_BF16) == CDDP_OK && cddp_broadcast(c, mem, 1024, CDDP_I32, 0) == CDDP_OK &&
               cddp_reduce_scatter(c, mem, mem, 1024, CDDP_F16, CDDP_AVG) == CDDP_OK && cddp_barrier(c) == CDDP_OK;
      result("allgather, broadcast, reduce_scatter in place, barrier", ok, ok ? "" : cddp_last_error());
      cddp_comm_mem_free(c, mem);
    }
    cddp_comm_destroy(c);
  }
  cddp_store_close(s);
}

typedef struct rank_arg {
  cddp_store_t *store;
  int rank, world, gpu, skip_second;
  cddp_result_t init, first, second;
  float got;
  char err[320];
} rank_arg_t;

static void *rank_main(void *p) {
  rank_arg_t *a = p;
  cudaSetDevice(a->gpu); /* the backend takes the thread's current GPU */
  cudaFree(0);
  cddp_comm_config_t cfg = nccl_cfg(a->skip_second ? 20000 : 30000);
  cddp_comm_t *c = NULL;
  a->init = cddp_comm_init(&c, a->store, a->rank, a->world, 0, &cfg);
  if (a->init != CDDP_OK) {
    snprintf(a->err, sizeof a->err, "%s", cddp_last_error());
    return NULL;
  }
  a->first = allreduce_value(c, (float)(a->rank + 1), &a->got);
  if (a->rank == 0) {
    /* rank 1 never joins this one: the timeout must end it, through ncclCommAbort */
    float ignored;
    a->second = allreduce_value(c, 1.0f, &ignored);
    snprintf(a->err, sizeof a->err, "%s", cddp_last_error());
  }
  cddp_comm_destroy(c);
  return NULL;
}

static void two_ranks(int gpu0, int gpu1, rank_arg_t *a) {
  cddp_store_t *s = NULL;
  cddp_store_mem_create(&s);
  pthread_t th[2];
  for (int r = 0; r < 2; r++) {
    a[r] = (rank_arg_t){.store = s, .rank = r, .world = 2, .gpu = r ? gpu1 : gpu0, .skip_second = 1};
    pthread_create(&th[r], NULL, rank_main, &a[r]);
  }
  for (int r = 0; r < 2; r++) pthread_join(th[r], NULL);
  cddp_store_close(s);
}

int main(void) {
  gpu_or_exit();
  int gpus = 0;
  cudaGetDeviceCount(&gpus);
  world_of_one();
  rank_arg_t a[2];
  two_ranks(0, 0, a);
  int named = a[0].init == CDDP_INVALID_USAGE && a[1].init == CDDP_INVALID_USAGE && strstr(a[0].err, "rank 0 and rank 1");
  result("two ranks on one GPU: refused by name (NCCL needs one GPU per rank)", named, a[0].err);
  if (gpus < 2) {
    printf("ok %d - two ranks on two GPUs # SKIP %d GPU visible\n", ++n_test, gpus);
  } else {
    two_ranks(0, 1, a);
    result("two ranks on two GPUs: all-reduce", a[0].init == CDDP_OK && a[0].first == CDDP_OK && a[0].got == 3.0f &&
                                                    a[1].first == CDDP_OK && a[1].got == 3.0f, a[0].err);
    result("a peer that never calls: TIMEOUT through ncclCommAbort",
           a[0].second == CDDP_TIMEOUT && strstr(a[0].err, "ncclCommAbort") != NULL, a[0].err);
  }
  printf("1..%d\n# %d passed, %d failed\n", n_test, n_test - n_failed, n_failed);
  return n_failed ? 1 : 0;
}
