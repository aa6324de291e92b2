/* reduce_bench.c - GB/s of the two-input reduction kernels and the bf16/f16 block converters. */
/* Build: make lib && make -C bench reduce; run: build/bench/reduce_bench [-n ELEMS] [-r REPS] [-i BF16_ISA_CAP]
 * GB/s counts the bytes of one input per second (ELEMS * sizeof(type) / time); each line is
 * the median of REPS timed passes (after one warm-up pass) over the same buffers. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "comm/reduce.h"

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int cmp_d(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

enum { MAXR = 101 };
static size_t n = 4u << 20;
static int reps = 15;

/* what: 0 reduce2 in place (d == a), 1 reduce2 out of place, 2 f32->x block, 3 x->f32 block */
static double run(int what, cddp_dtype_t dt, cddp_redop_t op, void *a, void *b, void *d, float *f) {
  double t[MAXR];
  for (int r = -1; r < reps; r++) {
    double t0 = now();
    switch (what) {
      case 0: cddp__reduce2(a, a, b, n, dt, op, 0.5); break;
      case 1: cddp__reduce2(d, a, b, n, dt, op, 0.5); break;
      case 2: dt == CDDP_F16 ? cddp__f32_to_f16_n(a, f, n) : cddp__f32_to_bf16_n(a, f, n); break;
      default: dt == CDDP_F16 ? cddp__f16_to_f32_n(f, a, n) : cddp__bf16_to_f32_n(f, a, n); break;
    }
    if (r >= 0) t[r] = now() - t0;
  }
  qsort(t, (size_t)reps, sizeof t[0], cmp_d);
  return (double)(n * cddp_dtype_size(dt)) / t[reps / 2] / 1e9;
}

int main(int argc, char **argv) {
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "-n")) n = strtoull(argv[i + 1], NULL, 0);
    else if (!strcmp(argv[i], "-r")) reps = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "-i")) cddp__bf16_isa(atoi(argv[i + 1])); /* 0 portable, 1 AVX2, 2 AVX-512F */
    else { fprintf(stderr, "reduce_bench: unknown flag %s (-n ELEMS, -r REPS, -i 0|1|2)\n", argv[i]); return 2; }
  }
  if (reps < 1 || reps > MAXR || n == 0) { fprintf(stderr, "reduce_bench: -r 1..%d, -n > 0\n", MAXR); return 2; }
  float *f = malloc(n * 4);
  char *a = malloc(n * 8), *b = malloc(n * 8), *d = malloc(n * 8);
  if (!f || !a || !b || !d) { fprintf(stderr, "reduce_bench: out of memory for %zu elements\n", n); return 1; }
  for (size_t i = 0; i < n; i++) f[i] = (float)((i * 2654435761u) % 1000) * 0.001f - 0.5f;
  static const char *isa[] = {"portable", "AVX2", "AVX-512F"};
  printf("# %zu elements, median of %d; GB/s of one input; bf16 path %s\n", n, reps, isa[cddp__bf16_isa(-1)]);
  printf("%-5s %-4s %10s %10s\n", "type", "op", "inplace", "outofplace");
  const cddp_dtype_t dts[] = {CDDP_F32, CDDP_F16, CDDP_BF16};
  for (int k = 0; k < 3; k++) {
    cddp_dtype_t dt = dts[k];
    for (int op = 0; op < CDDP_REDOP_COUNT; op++) {
      /* refill each time so averages and sums stay finite and normal */
      for (size_t i = 0; i < n; i++) {
        if (dt == CDDP_F32) { ((float *)a)[i] = f[i]; ((float *)b)[i] = f[n - 1 - i]; }
        else if (dt == CDDP_F16) { ((uint16_t *)a)[i] = cddp__f32_to_f16(f[i]); ((uint16_t *)b)[i] = cddp__f32_to_f16(f[n - 1 - i]); }
        else { ((uint16_t *)a)[i] = cddp__f32_to_bf16(f[i]); ((uint16_t *)b)[i] = cddp__f32_to_bf16(f[n - 1 - i]); }
      }
      double ip = run(0, dt, (cddp_redop_t)op, a, b, d, f), op2 = run(1, dt, (cddp_redop_t)op, a, b, d, f);
      printf("%-5s %-4s %10.2f %10.2f\n", cddp_dtype_name(dt), cddp_redop_name((cddp_redop_t)op), ip, op2);
    }
  }
  printf("%-5s %-9s %10s %10s\n", "type", "convert", "to_f32", "from_f32");
  for (int k = 1; k < 3; k++)
    printf("%-5s %-9s %10.2f %10.2f\n", cddp_dtype_name(dts[k]), "block", run(3, dts[k], CDDP_SUM, a, b, d, f),
           run(2, dts[k], CDDP_SUM, a, b, d, f));
  free(f); free(a); free(b); free(d);
  return 0;
}
