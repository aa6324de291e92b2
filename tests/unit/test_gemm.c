/* test_gemm.c - the bf16 matrix product (gemm_bf16.c), on every path this CPU has (VDPBF16PS,
 * FMA at 512, 256 and 128 bits), against a double-precision product of the same bf16-rounded
 * inputs, over every orientation, ragged shapes, strides, several k blocks and beta; the FMA
 * paths giving one another's bits; threads that give the bits of one; A by rows the bits of A
 * packed; and CDDP_CPU_BF16's refusal of a path the CPU lacks. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "test.h"
#include "trainer/gemm.h"

static float bf16_round(float x) { /* round to nearest even, as VCVTNEPS2BF16 */
  uint32_t u;
  memcpy(&u, &x, 4);
  u = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
  memcpy(&x, &u, 4);
  return x;
}

static float *rnd(size_t n, uint64_t *s) {
  float *p = malloc(n * sizeof *p);
  for (size_t i = 0; i < n; i++) {
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    p[i] = (float)(*s >> 40) / 16777216.0f - 0.5f;
  }
  return p;
}

static void check_case(int ta, int tb, int M, int N, int K, float alpha, float beta, int pad) {
  uint64_t s = (uint64_t)(M * 131 + N * 7 + K + ta * 3 + tb);
  int lda = (ta ? M : K) + pad, ldb = (tb ? K : N) + pad, ldc = N + pad;
  size_t na = (size_t)(ta ? K : M) * lda, nb = (size_t)(tb ? N : K) * ldb, nc = (size_t)M * ldc;
  float *A = rnd(na, &s), *B = rnd(nb, &s), *C = rnd(nc, &s), *C0 = malloc(nc * sizeof *C0);
  memcpy(C0, C, nc * sizeof *C);
  cddp__gemm_bf16(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  for (int i = 0; i < M; i++) {
    for (int j = 0; j < N; j++) {
      double sum = 0, mag = 0;
      for (int k = 0; k < K; k++) {
        double a = bf16_round(ta ? A[(size_t)k * lda + i] : A[(size_t)i * lda + k]);
        double b = bf16_round(tb ? B[(size_t)j * ldb + k] : B[(size_t)k * ldb + j]);
        sum += a * b, mag += fabs(a * b);
      }
      double want = alpha * sum + (beta != 0 ? beta * C0[(size_t)i * ldc + j] : 0);
      double tol = 1e-6 * (mag + 1) * (K / 64 + 1);
      if (!(fabs(C[(size_t)i * ldc + j] - want) <= tol))
        TEST_FAIL("ta %d tb %d %dx%dx%d beta %g: C[%d,%d] = %.8g, want %.8g", ta, tb, M, N, K,
                  beta, i, j, C[(size_t)i * ldc + j], want);
    }
    for (int j = N; j < ldc; j++) /* padding beyond N is never written */
      CHECK(C[(size_t)i * ldc + j] == C0[(size_t)i * ldc + j]);
  }
  free(A), free(B), free(C), free(C0);
}

/* The paths, fastest first; the FMA ones are checked wherever the CPU has them, VDPBF16PS's in
 * its own tests, which skip (naming the feature) on a CPU without it. */
static const char *const fma_paths[] = {"avx512", "avx2", "sse2"};
enum { NFMA = sizeof fma_paths / sizeof fma_paths[0] };

static void use(const char *path) {
  if (cddp__gemm_bf16_use(path) != CDDP_OK) TEST_FAIL("%s: %s", path, cddp_last_error());
}

static void matches_rounded_reference(const char *path) {
  use(path);
  int shapes[][3] = {{1, 1, 1}, {13, 37, 7}, {12, 32, 2}, {97, 70, 385}, {25, 9, 800}, {5, 130, 33}};
  for (size_t c = 0; c < sizeof shapes / sizeof shapes[0]; c++)
    for (int ta = 0; ta < 2; ta++)
      for (int tb = 0; tb < 2; tb++) {
        int M = shapes[c][0], N = shapes[c][1], K = shapes[c][2];
        check_case(ta, tb, M, N, K, 1.0f, 0.0f, 0);
        check_case(ta, tb, M, N, K, 0.5f, 1.0f, 3);
        check_case(ta, tb, M, N, K, 1.0f, 0.25f, 1);
      }
}

/* A whose k is contiguous and its transpose are packed (or, on VDPBF16PS, rounded row by row)
 * differently: the same pairs summed in the same order, so the same bits, for ragged M (a
 * partial last tile), odd K and K over several blocks. */
static void a_by_rows_gives_the_bits_of_a_packed(const char *path) {
  use(path);
  static const int shapes[][3] = {{13, 40, 31}, {25, 33, 257}, {96, 64, 600}, {1, 17, 2}, {130, 32, 513}};
  for (size_t c = 0; c < sizeof shapes / sizeof shapes[0]; c++) {
    int M = shapes[c][0], N = shapes[c][1], K = shapes[c][2];
    uint64_t s = (uint64_t)(M * 31 + N * 17 + K);
    float *A = rnd((size_t)M * K, &s), *At = malloc((size_t)M * K * sizeof *At), *B = rnd((size_t)K * N, &s);
    float *C1 = calloc((size_t)M * N, sizeof *C1), *C2 = calloc((size_t)M * N, sizeof *C2);
    for (int i = 0; i < M; i++)
      for (int k = 0; k < K; k++) At[(size_t)k * M + i] = A[(size_t)i * K + k];
    cddp__gemm_bf16(0, 0, M, N, K, 1.0f, A, K, B, N, 0.0f, C1, N);  /* A rows, k contiguous */
    cddp__gemm_bf16(1, 0, M, N, K, 1.0f, At, M, B, N, 0.0f, C2, N); /* the same A, lanes contiguous */
    if (memcmp(C1, C2, (size_t)M * N * sizeof *C1) != 0)
      TEST_FAIL("%s %dx%dx%d: A by rows and A packed differ", path, M, N, K);
    free(A), free(At), free(B), free(C1), free(C2);
  }
}

/* Products large enough to be split over threads (rows of C, or columns when there are few
 * row blocks) give the bits of one thread: each element sums the same blocks in the same order. */
static void threads_give_the_bits_of_one(const char *path) {
  use(path);
  int shapes[][3] = {{1000, 64, 300}, {400, 300, 160}, {150, 1100, 110}, {2050, 70, 129}};
  for (size_t c = 0; c < sizeof shapes / sizeof shapes[0]; c++)
    for (int ta = 0; ta < 2; ta++)
      for (int tb = 0; tb < 2; tb++)
        for (int b = 0; b < 2; b++) {
          int M = shapes[c][0], N = shapes[c][1], K = shapes[c][2], ldc = N + 3;
          int lda = ta ? M : K, ldb = tb ? K : N;
          uint64_t s = (uint64_t)(M + N + K + ta + tb);
          float *A = rnd((size_t)(ta ? K : M) * lda, &s), *B = rnd((size_t)(tb ? N : K) * ldb, &s);
          float *C1 = rnd((size_t)M * ldc, &s), *C2 = malloc((size_t)M * ldc * sizeof *C2);
          memcpy(C2, C1, (size_t)M * ldc * sizeof *C2);
          float beta = b ? 0.5f : 0.0f;
          cddp__gemm_bf16_set_threads(1);
          cddp__gemm_bf16(ta, tb, M, N, K, 1.0f, A, lda, B, ldb, beta, C1, ldc);
          cddp__gemm_bf16_set_threads(3); /* 3: parts that do not divide the blocks evenly */
          CHECK_EQ(cddp__gemm_bf16_threads(), 3);
          cddp__gemm_bf16(ta, tb, M, N, K, 1.0f, A, lda, B, ldb, beta, C2, ldc);
          if (memcmp(C1, C2, (size_t)M * ldc * sizeof *C1) != 0)
            TEST_FAIL("%s ta %d tb %d %dx%dx%d beta %g: 3 threads differ from 1", path, ta, tb, M, N, K, beta);
          free(A), free(B), free(C1), free(C2);
        }
  cddp__gemm_bf16_set_threads(1);
  CHECK_EQ(cddp__gemm_bf16_threads(), 1);
}

/* each check on every FMA path this CPU has (SSE2: every x86-64), then back to auto */
static void on_fma_paths(void (*check)(const char *path)) {
  for (int i = 0; i < NFMA; i++)
    if (cddp__gemm_bf16_path(fma_paths[i])) check(fma_paths[i]);
  CHECK(cddp__gemm_bf16_path("sse2") != NULL);
  use("auto");
}

static void on_vdpbf16ps(void (*check)(const char *path)) {
  if (!cddp__gemm_bf16_path("avx512_bf16")) CDDP_TEST_SKIP("[cpu:avx512_bf16] VDPBF16PS needs it");
  check("avx512_bf16");
  use("auto");
}

TEST(gemm_bf16_fma_matches_rounded_reference) { on_fma_paths(matches_rounded_reference); }
TEST(gemm_bf16_fma_a_by_rows_gives_the_bits_of_a_packed) { on_fma_paths(a_by_rows_gives_the_bits_of_a_packed); }
/* on the widest FMA path only: the split is the driver's, the same for every path, and
 * gemm_bf16_fma_paths_give_the_same_bits shows the paths' bits equal (this one is the slowest
 * under TSan) */
TEST(gemm_bf16_fma_threads_give_the_bits_of_one) {
  for (int i = 0; i < NFMA; i++)
    if (cddp__gemm_bf16_path(fma_paths[i])) {
      threads_give_the_bits_of_one(fma_paths[i]);
      break;
    }
  use("auto");
}
/* the three above on VDPBF16PS, as one test: one skip where the CPU lacks it */
static void vdpbf16ps_contract(const char *path) {
  matches_rounded_reference(path);
  a_by_rows_gives_the_bits_of_a_packed(path);
  threads_give_the_bits_of_one(path);
}
TEST(gemm_bf16_vdpbf16ps_keeps_the_contract) { on_vdpbf16ps(vdpbf16ps_contract); }

/* The FMA paths keep one contract (gemm_bf16_kern.h), so each gives SSE2's bits: every
 * orientation, beta 0, 1 and another, K over several blocks and odd, ragged tiles, and ties
 * and denormals in the inputs. */
TEST(gemm_bf16_fma_paths_give_the_same_bits) {
  int shapes[][3] = {{13, 37, 7}, {97, 70, 385}, {25, 33, 800}, {130, 65, 513}};
  for (size_t c = 0; c < sizeof shapes / sizeof shapes[0]; c++)
    for (int ta = 0; ta < 2; ta++)
      for (int tb = 0; tb < 2; tb++)
        for (int b = 0; b < 3; b++) {
          int M = shapes[c][0], N = shapes[c][1], K = shapes[c][2], ldc = N + 1;
          int lda = ta ? M : K, ldb = tb ? K : N;
          uint64_t s = (uint64_t)(M * 7 + N + K + ta + 2 * tb);
          float *A = rnd((size_t)(ta ? K : M) * lda, &s), *B = rnd((size_t)(tb ? N : K) * ldb, &s);
          float *C0 = rnd((size_t)M * ldc, &s), *C1 = malloc((size_t)M * ldc * sizeof *C1);
          float *C2 = malloc((size_t)M * ldc * sizeof *C2), beta = b == 0 ? 0.0f : b == 1 ? 1.0f : -0.3f;
          if (c == 0) { /* ties to even (down, up), just past a tie, denormals */
            static const uint32_t odd[] = {0x3f808000u, 0x3f818000u, 0xbf808001u, 0x00000001u, 0x80018000u};
            for (int k = 0; k < 5; k++) memcpy(ta ? &A[(size_t)k * lda] : &A[k], &odd[k], 4);
          }
          memcpy(C1, C0, (size_t)M * ldc * sizeof *C1);
          use("sse2");
          cddp__gemm_bf16(ta, tb, M, N, K, 1.5f, A, lda, B, ldb, beta, C1, ldc);
          for (int i = 0; i < NFMA - 1; i++) {
            if (!cddp__gemm_bf16_path(fma_paths[i])) continue;
            memcpy(C2, C0, (size_t)M * ldc * sizeof *C2);
            use(fma_paths[i]);
            cddp__gemm_bf16(ta, tb, M, N, K, 1.5f, A, lda, B, ldb, beta, C2, ldc);
            if (memcmp(C1, C2, (size_t)M * ldc * sizeof *C1) != 0)
              TEST_FAIL("%s ta %d tb %d %dx%dx%d beta %g: not SSE2's bits", fma_paths[i], ta, tb, M, N, K, beta);
          }
          free(A), free(B), free(C0), free(C1), free(C2);
        }
  use("auto");
}

TEST(gemm_precision_switches_and_refuses) {
  CHECK_EQ(cddp__gemm_precision(), CDDP_PRECISION_FP32);
  float a[4] = {1.001f, 2, 3, 4}, b[4] = {1, 0, 0, 1}, c[4];
  cddp__gemm(CblasNoTrans, CblasNoTrans, 2, 2, 2, 1.0f, a, 2, b, 2, 0.0f, c, 2);
  CHECK(c[0] == 1.001f); /* fp32: no rounding of the inputs */
  CHECK_OK(cddp__gemm_set_precision(CDDP_PRECISION_BF16)); /* on any CPU */
  cddp__gemm(CblasNoTrans, CblasNoTrans, 2, 2, 2, 1.0f, a, 2, b, 2, 0.0f, c, 2);
  CHECK(c[0] == 1.0f && c[3] == 4.0f); /* 1.001 has no bf16 of its own */
  float big = 3.4e38f, nan = NAN, one = 1.0f; /* the largest floats round up to infinity */
  cddp__gemm(CblasNoTrans, CblasNoTrans, 1, 1, 1, 1.0f, &big, 1, &one, 1, 0.0f, c, 1);
  CHECK(isinf(c[0]) && c[0] > 0);
  cddp__gemm(CblasNoTrans, CblasNoTrans, 1, 1, 1, 1.0f, &nan, 1, &one, 1, 0.0f, c, 1);
  CHECK(isnan(c[0]));
  CHECK_OK(cddp__gemm_set_precision(CDDP_PRECISION_FP32));
  /* auto is the fastest path this CPU has */
  const char *best = cddp__gemm_bf16_path("auto");
  CHECK(best != NULL);
  if (cddp__gemm_bf16_path("avx512_bf16")) CHECK(strcmp(best, "avx512_bf16") == 0);
  else if (cddp__gemm_bf16_path("avx2") && !cddp__gemm_bf16_path("avx512")) CHECK(strcmp(best, "avx2") == 0);
  /* CDDP_CPU_BF16 names a path; one the CPU lacks, or no path at all, is refused in one line */
  setenv("CDDP_CPU_BF16", "sse2", 1);
  CHECK(strcmp(cddp__gemm_bf16_path(NULL), "sse2") == 0);
  CHECK_OK(cddp__gemm_set_precision(CDDP_PRECISION_BF16));
  CHECK_OK(cddp__gemm_set_precision(CDDP_PRECISION_FP32));
  const char *lacking = !cddp__gemm_bf16_path("avx512_bf16") ? "avx512_bf16" : NULL;
  for (int i = 0; i < 2; i++) {
    const char *bad = i == 0 ? lacking : "avx9";
    if (!bad) continue; /* this CPU has every path */
    setenv("CDDP_CPU_BF16", bad, 1);
    CHECK(cddp__gemm_bf16_path(NULL) == NULL);
    CHECK_RESULT(cddp__gemm_set_precision(CDDP_PRECISION_BF16), CDDP_INVALID_ARG);
    CHECK(strstr(cddp_last_error(), "CDDP_CPU_BF16") != NULL);
    CHECK(strstr(cddp_last_error(), bad) != NULL);
    CHECK(strchr(cddp_last_error(), '\n') == NULL);
    CHECK_EQ(cddp__gemm_precision(), CDDP_PRECISION_FP32);
  }
  unsetenv("CDDP_CPU_BF16");
}
