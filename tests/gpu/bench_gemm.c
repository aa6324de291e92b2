/* bench_gemm.c - the GPU's GEMM peak as cuBLAS reaches it: bf16 operands with float32
 * accumulation (what mixed precision runs on) and float32, square sizes, TFLOP/s from the
 * wall time of back-to-back calls after a warm-up. The figure MFU will be measured against;
 * each line names the size, so a reader compares like with like. Exit 77 without a GPU. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gpu/gpu_main.h"

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* TFLOP/s of reps calls of C[n,n] = A B^T (the layers' usual shape), after 3 warm-up calls */
static double run(const cddp_ops_t *d, int bf16, int n, int reps) {
  size_t e = (size_t)n * n;
  void *A = d->alloc(e * (bf16 ? 2 : 4)), *B = d->alloc(e * (bf16 ? 2 : 4));
  float *C = d->alloc(e * 4);
  if (!A || !B || !C) return -1;
  double t0 = 0;
  for (int i = 0; i < reps + 3; i++) {
    if (i == 3) d->sync(), t0 = now_s();
    if (bf16) d->gemm_bf16(0, 1, n, n, n, 1.0f, A, B, 0.0f, C);
    else d->gemm(0, 1, n, n, n, 1.0f, A, B, 0.0f, C);
  }
  d->sync();
  double dt = now_s() - t0;
  d->release(A), d->release(B), d->release(C);
  return 2.0 * n * n * (double)n * reps / dt / 1e12;
}

int main(int argc, char **argv) {
  const cddp_ops_t *d = gpu_or_exit();
  int sizes[] = {1024, 4096, 8192};
  double best = 0;
  printf("# cuBLAS GEMM C = A B^T, square n, TFLOP/s (wall time of back-to-back calls)\n");
  printf("%8s %12s %12s\n", "n", "bf16->f32", "f32");
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
    int n = sizes[i], reps = n >= 8192 ? 20 : n >= 4096 ? 50 : 200;
    double b = run(d, 1, n, reps), f = run(d, 0, n, reps / 4 + 1);
    printf("%8d %12.1f %12.1f\n", n, b, f);
    if (b > best) best = b;
  }
  printf("bf16 GEMM peak (measured): %.1f TFLOP/s\n", best);
  (void)argc, (void)argv;
  return 0;
}
