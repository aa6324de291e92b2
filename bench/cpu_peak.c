/* cpu_peak.c - the limits the models' products are judged against, on one core: the clock, the
 * fp32 FMA peak (12 independent zmm accumulators, or ymm without AVX-512, nothing from memory)
 * and the bf16 VDPBF16PS peak where the CPU has it, then OpenBLAS's sgemm and cddp's bf16
 * product (gemm_bf16.c, on the path CDDP_CPU_BF16 picks) on the MLP's and the GPT's shapes,
 * each as GFLOP/s and as a fraction of its peak (the bf16 product's: VDPBF16PS's, or the fp32
 * FMA peak on the FMA paths).
 *
 *   make lib && make -C bench peak && build/bench/cpu_peak [-r REPS]
 *
 * Operands rotate through 128 MiB, so a product starts from memory as in a training step. */
#include <cblas.h>
#include <immintrin.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "trainer/gemm.h"

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

#define R12(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11)
#define LOOPS 50000000L

/* Dependent adds retire one a cycle: their rate is the clock. */
static double clock_ghz(void) {
  long v = 0;
  double t = now();
  for (long k = 0; k < LOOPS; k++)
    __asm__ volatile("add $1, %0\n\tadd $1, %0\n\tadd $1, %0\n\tadd $1, %0" : "+r"(v));
  return 4.0 * LOOPS / (now() - t) / 1e9;
}

/* GFLOP/s of LOOPS x 12 instructions of `flops` each in t seconds; the accumulators' sum goes
 * to a volatile, so the loop cannot be dropped. */
#define D(i) __m512 a##i = _mm512_set1_ps((float)(i) * 1e-3f);
#define S(i) s = _mm512_add_ps(s, a##i);
__attribute__((target("avx512f"))) static double rate(__m512 s, double t, double flops) {
  volatile float sink = _mm512_reduce_add_ps(s);
  (void)sink;
  return LOOPS * 12.0 * flops / t / 1e9;
}

__attribute__((target("avx512f"))) static double fma_peak(void) {
  R12(D)
  __m512 x = _mm512_set1_ps(0.999f), y = _mm512_set1_ps(1e-6f);
  double t = now();
  for (long k = 0; k < LOOPS; k++) {
#define F(i) a##i = _mm512_fmadd_ps(a##i, x, y);
    R12(F)
    __asm__ volatile("" ::: "memory"); /* keeps the loop */
  }
  t = now() - t;
  __m512 s = a0;
  R12(S)
  return rate(s, t, 32); /* 16 lanes x 2 flops */
}

/* the same with ymm registers (AVX2 + FMA) */
#define DY(i) __m256 y##i = _mm256_set1_ps((float)(i) * 1e-3f);
#define SY(i) sy = _mm256_add_ps(sy, y##i);
__attribute__((target("avx2,fma"))) static double fma_peak_avx2(void) {
  R12(DY)
  __m256 x = _mm256_set1_ps(0.999f), z = _mm256_set1_ps(1e-6f);
  double t = now();
  for (long k = 0; k < LOOPS; k++) {
#define FY(i) y##i = _mm256_fmadd_ps(y##i, x, z);
    R12(FY)
    __asm__ volatile("" ::: "memory");
  }
  t = now() - t;
  __m256 sy = y0;
  R12(SY)
  float out[8];
  _mm256_storeu_ps(out, sy);
  volatile float sink = out[0];
  (void)sink;
  return LOOPS * 12.0 * 16 / t / 1e9; /* 8 lanes x 2 flops */
}

__attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16"))) static double bf16_peak(void) {
  R12(D)
  __m512bh p = (__m512bh)_mm512_set1_epi32(0x3f803f80), q = (__m512bh)_mm512_set1_epi32(0x3c003c00);
  double t = now();
  for (long k = 0; k < LOOPS; k++) {
#define G(i) a##i = _mm512_dpbf16_ps(a##i, p, q);
    R12(G)
    __asm__ volatile("" ::: "memory");
  }
  t = now() - t;
  __m512 s = a0;
  R12(S)
  return rate(s, t, 64); /* 16 lanes x 2 pairs x 2 flops */
}

typedef struct {
  const char *what;
  int ta, tb, m, n, k;
} shape_t;

static const shape_t shapes[] = {
    {"MLP fwd 784->1024, x W^T", 0, 1, 128, 1024, 784},
    {"MLP fwd 1024->1024, x W^T", 0, 1, 128, 1024, 1024},
    {"MLP fwd 1024->1024, W x^T", 0, 1, 1024, 128, 1024},
    {"MLP dX 1024->1024, dy W", 0, 0, 128, 1024, 1024},
    {"MLP dW 784->1024, dy^T x", 1, 0, 1024, 784, 128},
    {"GPT fwd qkv 256->768", 0, 1, 2048, 768, 256},
    {"GPT fwd mlp 1024->256", 0, 1, 2048, 256, 1024},
    {"GPT dX 256->1024, dy W", 0, 0, 2048, 256, 1024},
    {"GPT dW 256->768, dy^T x", 1, 0, 768, 256, 2048},
};

int main(int argc, char **argv) {
  int reps = 20;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "-r") && i + 1 < argc && atoi(argv[i + 1]) > 0) reps = atoi(argv[++i]);
    else {
      fprintf(stderr, "cpu_peak: unknown or bad argument '%s' (-r REPS, a positive number)\n", argv[i]);
      return 2;
    }
  }
  __builtin_cpu_init();
  const char *path = cddp__gemm_bf16_path(NULL);
  if (!path || cddp__gemm_bf16_use(NULL) != CDDP_OK) {
    fprintf(stderr, "cpu_peak: %s\n", cddp_last_error());
    return 2;
  }
  int avx512 = __builtin_cpu_supports("avx512f"), avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  int dp = strcmp(path, "avx512_bf16") == 0, bf16 = 1;
  openblas_set_num_threads(1);
  double ghz = clock_ghz(), fp = avx512 ? fma_peak() : avx2 ? fma_peak_avx2() : 0;
  double bp = dp ? bf16_peak() : fp; /* the FMA paths' peak is the fp32 FMA peak */
  printf("clock %.2f GHz; fp32 FMA peak %.1f GFLOP/s (%.1f flops a cycle, %s)", ghz, fp, fp / ghz,
         avx512 ? "zmm" : "ymm");
  if (dp) printf("; bf16 VDPBF16PS peak %.1f GFLOP/s (%.1f a cycle)", bp, bp / ghz);
  printf("; bf16 path: %s\n", path);
  if (!avx512 && !avx2) printf("(no AVX2 or AVX-512 here: no peak to compare with)\n");
  size_t span = (size_t)32 << 20; /* floats: 128 MiB, past any L3 here */
  float *A = malloc(span * sizeof *A), *B = malloc(span * sizeof *B), *C = malloc(span * sizeof *C);
  if (!A || !B || !C) {
    fprintf(stderr, "cpu_peak: no memory for 3 x 128 MiB of operands\n");
    return 1;
  }
  for (size_t i = 0; i < span; i++) A[i] = B[i] = C[i] = (float)(i % 97) * 1e-2f - 0.5f;
  printf("%-30s %6s %6s %6s %10s %7s %10s %7s\n", "product (1 thread)", "M", "N", "K", "sgemm", "of peak",
         bf16 ? "bf16" : "", bf16 ? "of peak" : "");
  for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
    const shape_t *p = &shapes[s];
    int lda = p->ta ? p->m : p->k, ldb = p->tb ? p->k : p->n;
    size_t need = (size_t)p->m * p->k + (size_t)p->k * p->n, slots = span / need;
    double ts = 0, tb = 0;
    for (int r = 0; r < reps; r++) { /* interleaved, each from a new place in the span */
      const float *a = A + (size_t)(r % slots) * need, *b = B + (size_t)(r % slots) * need;
      double t0 = now();
      cblas_sgemm(CblasRowMajor, p->ta ? CblasTrans : CblasNoTrans, p->tb ? CblasTrans : CblasNoTrans,
                  p->m, p->n, p->k, 1.0f, a, lda, b, ldb, 0.0f, C, p->n);
      ts += now() - t0;
      if (!bf16) continue;
      t0 = now();
      cddp__gemm_bf16(p->ta, p->tb, p->m, p->n, p->k, 1.0f, a, lda, b, ldb, 0.0f, C, p->n);
      tb += now() - t0;
    }
    double flops = 2.0 * p->m * p->n * p->k * reps, gs = flops / ts / 1e9, gb = bf16 ? flops / tb / 1e9 : 0;
    printf("%-30s %6d %6d %6d %10.1f %6.0f%%", p->what, p->m, p->n, p->k, gs, fp > 0 ? 100 * gs / fp : 0);
    if (bf16) printf(" %10.1f %6.0f%%", gb, bp > 0 ? 100 * gb / bp : 0);
    printf("\n");
  }
  free(A), free(B), free(C);
  return 0;
}
