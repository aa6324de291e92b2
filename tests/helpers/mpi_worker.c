/* mpi_worker.c - a worker for tests/sh/test_mpirun.sh's backend-mpi cases: the aliasing forms
 * of every collective, async requests, and what timeout and abort do (run it under mpirun). */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cddp/ddp.h"
#include "comm/reduce.h"

static int wrong;
#define EXPECT(cond, ...)                                         \
  do {                                                            \
    if (!(cond)) {                                                \
      wrong++;                                                    \
      fprintf(stderr, "rank %d: ", cddp_world_rank(W)), fprintf(stderr, __VA_ARGS__), fputc('\n', stderr); \
    }                                                             \
  } while (0)

static cddp_world_t *W;

#define OK(call) EXPECT((call) == CDDP_OK, "%s: %s", #call, cddp_last_error())

/* Every aliasing form the native transports accept, with exact integer-valued data. */
static void aliasing(void) {
  enum { N = 1000 };
  const int R = cddp_world_rank(W), P = cddp_world_size(W);
  float *a = malloc(sizeof(float) * N * (size_t)P), *b = malloc(sizeof(float) * N * (size_t)P);
  /* allreduce in place and out of place; avg of ints truncates */
  for (int i = 0; i < N; i++) a[i] = (float)(R + i);
  OK(cddp_allreduce(cddp_world_comm(W), a, a, N, CDDP_F32, CDDP_SUM));
  for (int i = 0; i < N; i++) EXPECT(a[i] == (float)(P * i + P * (P - 1) / 2), "allreduce in place [%d] = %g", i, a[i]);
  int64_t iv[3] = {R, 10 * R + 1, -R}, io[3];
  OK(cddp_allreduce(cddp_world_comm(W), iv, io, 3, CDDP_I64, CDDP_AVG));
  EXPECT(io[0] == (P - 1) / 2 && io[2] == -((P - 1) / 2), "i64 avg %lld %lld", (long long)io[0], (long long)io[2]);
  /* reduce_scatter: send == recv (result at the start), and NCCL's recv = send + rank*n */
  for (int i = 0; i < N * P; i++) a[i] = (float)(i + R);
  OK(cddp_reduce_scatter(cddp_world_comm(W), a, a, N, CDDP_F32, CDDP_SUM));
  for (int i = 0; i < N; i++) EXPECT(a[i] == (float)(P * (R * N + i) + P * (P - 1) / 2), "reduce_scatter send==recv [%d] = %g", i, a[i]);
  for (int i = 0; i < N * P; i++) a[i] = (float)(i + R);
  OK(cddp_reduce_scatter(cddp_world_comm(W), a, a + (size_t)R * N, N, CDDP_F32, CDDP_MAX));
  for (int i = 0; i < N; i++) EXPECT(a[R * N + i] == (float)(R * N + i + P - 1), "reduce_scatter nccl in place [%d]", i);
  /* allgather: NCCL's in place (send = recv + rank*n) and send == recv */
  for (int i = 0; i < N; i++) b[R * N + i] = (float)(R * 7 + i);
  OK(cddp_allgather(cddp_world_comm(W), b + (size_t)R * N, b, N, CDDP_F32));
  for (int q = 0; q < P; q++)
    for (int i = 0; i < N; i++) EXPECT(b[q * N + i] == (float)(q * 7 + i), "allgather in place [%d][%d]", q, i);
  for (int i = 0; i < N; i++) b[i] = (float)(R * 7 + i);
  OK(cddp_allgather(cddp_world_comm(W), b, b, N, CDDP_F32));
  for (int q = 0; q < P; q++)
    for (int i = 0; i < N; i++) EXPECT(b[q * N + i] == (float)(q * 7 + i), "allgather send==recv [%d][%d]", q, i);
  /* bf16 avg over f32 accumulation; broadcast from the last rank; async requests in order */
  uint16_t h[4];
  for (int i = 0; i < 4; i++) h[i] = (uint16_t)(0x3f80 + 0x80 * R); /* 1.0, 2.0, 4.0, ... (powers of 2) */
  OK(cddp_allreduce(cddp_world_comm(W), h, h, 4, CDDP_BF16, CDDP_MAX));
  EXPECT(h[0] == (uint16_t)(0x3f80 + 0x80 * (P - 1)), "bf16 max %#x", h[0]);
  /* f16: 1 + (P-1) * 2^-11 summed in f32, rounded once (each 2^-11 alone is half an ulp of
   * 1.0 and would round away); avg of 1000 * (rank + 1) scales the f32 sum before rounding */
  uint16_t f[2] = {R == 0 ? 0x3c00 : 0x1000, cddp__f32_to_f16(1000.0f * (float)(R + 1))};
  OK(cddp_allreduce(cddp_world_comm(W), f, f, 1, CDDP_F16, CDDP_SUM));
  int hk = P - 1, m = hk / 2 + ((hk & 1) && ((hk / 2) & 1)); /* hk half-ulps, ties to even */
  EXPECT(f[0] == 0x3c00 + m, "f16 sum %#x, want %#x", f[0], 0x3c00 + m);
  OK(cddp_allreduce(cddp_world_comm(W), f + 1, f + 1, 1, CDDP_F16, CDDP_AVG));
  EXPECT(cddp__f16_to_f32(f[1]) == 500.0f * (float)(P + 1), "f16 avg %g", cddp__f16_to_f32(f[1]));
  int32_t bc[5] = {R, R, R, R, R};
  OK(cddp_broadcast(cddp_world_comm(W), bc, 5, CDDP_I32, P - 1));
  EXPECT(bc[0] == P - 1 && bc[4] == P - 1, "broadcast from %d got %d", P - 1, bc[0]);
  cddp_request_t *rq[4];
  int32_t x[4];
  for (int k = 0; k < 4; k++) {
    x[k] = R + k;
    OK(cddp_iallreduce(cddp_world_comm(W), &x[k], &x[k], 1, CDDP_I32, CDDP_MIN, &rq[k]));
  }
  for (int k = 0; k < 4; k++) OK(cddp_wait(rq[k]));
  EXPECT(x[3] == 3, "async min %d", x[3]);
  OK(cddp_barrier(cddp_world_comm(W)));
  free(a), free(b);
}

static void *abort_later(void *arg) {
  usleep(300 * 1000);
  cddp_comm_abort(cddp_world_comm(W));
  return NULL;
}

/* usage: mpi_worker aliasing|timeout|abort [native|mpi]  (timeout, abort: the last rank stays away) */
int main(int argc, char **argv) {
  const char *mode = argc > 1 ? argv[1] : "aliasing";
  cddp_comm_config_t cfg;
  cddp_comm_config_default(&cfg);
  cfg.backend = argc > 2 ? argv[2] : "mpi"; /* "native": the same checks on cddp's own transports */
  if (!strcmp(mode, "timeout")) cfg.timeout_ms = 1000;
  if (cddp_world_join(&W, &cfg) != CDDP_OK) {
    fprintf(stderr, "join: %s\n", cddp_last_error());
    cddp_world_leave(W, 0);
    return 1;
  }
  if (!strcmp(mode, "aliasing")) {
    aliasing();
    if (cddp_world_rank(W) == 0) printf("mpi_worker: %d ranks, transport %s, %d wrong\n", cddp_world_size(W), cddp_comm_transport(cddp_world_comm(W)), wrong);
    cddp_world_leave(W, 1);
    return wrong ? 1 : 0;
  }
  /* timeout / abort: rank 0 waits for a collective the last rank never joins */
  if (cddp_world_rank(W) == cddp_world_size(W) - 1) {
    sleep(30); /* mpirun ends this rank once rank 0 exits without MPI_Finalize */
    return 0;
  }
  pthread_t th;
  int aborting = !strcmp(mode, "abort");
  if (aborting) pthread_create(&th, NULL, abort_later, NULL);
  float v = 1;
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  cddp_result_t r = cddp_allreduce(cddp_world_comm(W), &v, &v, 1, CDDP_F32, CDDP_SUM);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  if (aborting) pthread_join(th, NULL);
  double s = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
  printf("rank %d: %s after %.1f s: %s\n", cddp_world_rank(W), cddp_strerror(r), s, cddp_last_error());
  fflush(stdout);
  cddp_world_leave(W, 0);
  return r == CDDP_OK ? 0 : 3;
}
