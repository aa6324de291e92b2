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

/* Random operands: zeros would draw less power and flatter the figure. */
static void *random_operand(const cddp_ops_t *d, size_t e, int bf16) {
  float *h = malloc(e * sizeof(float));
  void *dev = d->alloc(e * (bf16 ? 2 : 4));
  if (!h || !dev) {
    free(h);
    return dev;
  }
  uint64_t x = 0x9e3779b97f4a7c15ull ^ e;
  for (size_t i = 0; i < e; i++) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    h[i] = (float)((x >> 40) / (double)(1ull << 24)) * 2.0f - 1.0f;
  }
  uint16_t *h16 = bf16 ? malloc(e * 2) : NULL;
  if (h16) cddp__ops_cpu.to_bf16(h16, h, e);
  if (!bf16 || h16) d->to_device(dev, bf16 ? (void *)h16 : (void *)h, e * (bf16 ? 2 : 4));
  free(h16);
  free(h);
  return dev;
}

/* TFLOP/s of reps calls of C[n,n] = A B^T (the layers' usual shape), after 3 warm-up calls */
static double run(const cddp_ops_t *d, int bf16, int n, int reps) {
  size_t e = (size_t)n * n;
  void *A = random_operand(d, e, bf16), *B = random_operand(d, e, bf16);
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
  /* --cpu: the CPU table at one small size, the harness's own check where there is no GPU */
  int on_cpu = argc > 1 && !strcmp(argv[1], "--cpu");
  const cddp_ops_t *d = on_cpu ? &cddp__ops_cpu : gpu_or_exit();
  int sizes[] = {1024, 4096, 8192}, n_sizes = on_cpu ? 1 : 3;
  if (on_cpu) sizes[0] = 256;
  double best = 0;
  printf("# %s GEMM C = A B^T, square n, TFLOP/s (wall time of back-to-back calls)\n", on_cpu ? "CPU table" : "cuBLAS");
  printf("%8s %12s %12s\n", "n", "bf16->f32", "f32");
  for (int i = 0; i < n_sizes; i++) {
    int n = sizes[i], reps = on_cpu ? 4 : n >= 8192 ? 20 : n >= 4096 ? 50 : 200;
    double b = run(d, 1, n, reps), f = run(d, 0, n, reps / 4 + 1);
    printf("%8d %12.3f %12.3f\n", n, b, f);
    if (b > best) best = b;
  }
  printf("bf16 GEMM peak (measured, %s): %.3f TFLOP/s\n", d->name, best);
  return 0;
}
