/* test_common.c - result codes, last-error text, knobs table vs docs/knobs.md, reduce kernels,
 * the CPU features every kernel asks (common/cpu.h) against /proc/cpuinfo. */
#include <stdint.h>
#include <string.h>

#include "comm/reduce.h"
#include "common/check.h"
#include "common/cpu.h"
#include "common/knobs.h"
#include "test.h"

TEST(result_names_are_distinct) {
  for (int a = 0; a < CDDP_RESULT_COUNT; a++) {
    CHECK(strcmp(cddp_result_name((cddp_result_t)a), "UNKNOWN") != 0);
    for (int b = a + 1; b < CDDP_RESULT_COUNT; b++)
      CHECK(strcmp(cddp_result_name((cddp_result_t)a), cddp_result_name((cddp_result_t)b)) != 0);
  }
  CHECK(strcmp(cddp_result_name((cddp_result_t)99), "UNKNOWN") == 0);
}

TEST(last_error_carries_detail) {
  cddp__clear_error();
  CHECK(cddp_last_error()[0] == '\0');
  cddp_result_t r = cddp__fail(CDDP_TIMEOUT, "wait for key %s", "k1");
  CHECK_EQ(r, CDDP_TIMEOUT);
  CHECK(strcmp(cddp_last_error(), "wait for key k1") == 0);
  errno = ENOENT;
  cddp__fail_errno(CDDP_SYSTEM, "open %s", "/nope");
  CHECK(strstr(cddp_last_error(), "open /nope: No such file") != NULL);
}

/* Every knob must be documented in docs/knobs.md's table, with its default: a row
 * "| `VAR` | `DEFAULT` | ..." (an empty default reads "(what it means)" instead). */
TEST(knobs_are_documented) {
  FILE *f = fopen("docs/knobs.md", "r");
  if (!f) TEST_FAIL("docs/knobs.md not found (run from the repository root)");
  static char doc[1 << 16];
  size_t n = fread(doc, 1, sizeof doc - 1, f);
  doc[n] = '\0';
  fclose(f);
  for (int k = 0; k < CDDP_KNOB_COUNT; k++) {
    char row[160];
    const char *def = cddp__knob_default((cddp_knob_t)k);
    snprintf(row, sizeof row, "| `%s` | ", cddp__knob_var((cddp_knob_t)k));
    const char *at = strstr(doc, row);
    if (!at) TEST_FAIL("docs/knobs.md has no row for `%s`", cddp__knob_var((cddp_knob_t)k));
    at += strlen(row);
    char want[96];
    snprintf(want, sizeof want, "`%s` |", def);
    if (def[0] ? strncmp(at, want, strlen(want)) != 0 : at[0] != '(')
      TEST_FAIL("docs/knobs.md gives `%s` the default '%.*s', the code '%s'", cddp__knob_var((cddp_knob_t)k),
                (int)strcspn(at, "|"), at, def);
  }
}

TEST(knob_int_falls_back_on_garbage) {
  setenv("CDDP_NSTREAMS", "3", 1);
  CHECK_EQ(cddp__knob_int(CDDP_KNOB_NSTREAMS), 3);
  setenv("CDDP_NSTREAMS", "3x", 1);
  CHECK_EQ(cddp__knob_int(CDDP_KNOB_NSTREAMS), strtoll(cddp__knob_default(CDDP_KNOB_NSTREAMS), 0, 10));
}

TEST(reduce_f32_sum_avg_max_min) {
  enum { N = 3000 };
  static float a[N], b[N], c[N], out[N];
  for (int i = 0; i < N; i++) a[i] = (float)i, b[i] = 2.0f * i, c[i] = -1.0f * i;
  const void *srcs[3] = {a, b, c};
  cddp__reduce_n(out, srcs, 3, N, CDDP_F32, CDDP_SUM, 1.0);
  for (int i = 0; i < N; i++) CHECK_NEAR(out[i], 2.0 * i, 0);
  cddp__reduce_n(out, srcs, 3, N, CDDP_F32, CDDP_AVG, 0.5);
  for (int i = 0; i < N; i++) CHECK_NEAR(out[i], 1.0 * i, 0);
  cddp__reduce_n(out, srcs, 3, N, CDDP_F32, CDDP_MAX, 1.0);
  for (int i = 0; i < N; i++) CHECK_NEAR(out[i], 2.0 * i, 0);
  cddp__reduce_n(out, srcs, 3, N, CDDP_F32, CDDP_MIN, 1.0);
  for (int i = 0; i < N; i++) CHECK_NEAR(out[i], -1.0 * i, 0);
}

TEST(reduce_bf16_accumulates_in_f32) {
  /* 1.0 + 2^-8 + 2^-8: each addend alone is half an ulp of 1.0 in bf16 (7 stored bits) and
   * rounds away (ties to even); accumulated in f32 they reach 1 + 2^-7, which bf16 holds. */
  uint16_t one = 0x3f80, tiny = 0x3b80; /* 1.0, 2^-8 */
  uint16_t a[1] = {one}, b[1] = {tiny}, c[1] = {tiny}, out[1];
  const void *srcs[3] = {a, b, c};
  cddp__reduce_n(out, srcs, 3, 1, CDDP_BF16, CDDP_SUM, 1.0);
  CHECK_EQ(out[0], 0x3f81);
}

TEST(reduce_ints_and_avg_truncates) {
  int64_t a[2] = {INT64_MAX, 7}, b[2] = {0, -2}, out[2];
  cddp__reduce2(out, a, b, 2, CDDP_I64, CDDP_SUM, 1.0);
  CHECK(out[0] == INT64_MAX);
  CHECK_EQ(out[1], 5);
  int32_t x[1] = {7}, y[1] = {0}, o[1];
  cddp__reduce2(o, x, y, 1, CDDP_I32, CDDP_AVG, 0.5);
  CHECK_EQ(o[0], 3);
}

/* The fused two-input f32 path: every aliasing shape gives the plain loop's bits. */
TEST(reduce2_f32_aliasing_shapes) {
  enum { N = 10007 };
  static float a[N], b[N], ref[N], d[N], x[N];
  for (int i = 0; i < N; i++) a[i] = 0.1f * i, b[i] = 1.0f / (i + 1);
  for (int avg = 0; avg < 2; avg++) {
    cddp_redop_t op = avg ? CDDP_AVG : CDDP_SUM;
    for (int i = 0; i < N; i++) ref[i] = avg ? (a[i] + b[i]) * 0.5f : a[i] + b[i];
    cddp__reduce2(d, a, b, N, CDDP_F32, op, 0.5); /* distinct */
    CHECK(memcmp(d, ref, sizeof d) == 0);
    memcpy(d, a, sizeof d);
    cddp__reduce2(d, d, b, N, CDDP_F32, op, 0.5); /* dst == a */
    CHECK(memcmp(d, ref, sizeof d) == 0);
    memcpy(d, b, sizeof d);
    cddp__reduce2(d, a, d, N, CDDP_F32, op, 0.5); /* dst == b */
    CHECK(memcmp(d, ref, sizeof d) == 0);
    memcpy(x, a, sizeof x); /* partial overlap falls back to the general kernel */
    cddp__reduce2(x + 1, x, b, N - 1, CDDP_F32, CDDP_SUM, 1.0);
    CHECK(x[1] == a[0] + b[0]);
  }
}

/* cddp__cpu_has agrees with the kernel's own reading of the CPU (/proc/cpuinfo's flags), one
 * feature at a time and combined; a CPU that is not x86 has none of them. */
TEST(cpu_features_match_proc_cpuinfo) {
  FILE *f = fopen("/proc/cpuinfo", "r");
  if (!f) TEST_FAIL("/proc/cpuinfo cannot be read");
  char line[8192], flags[8192] = "";
  while (fgets(line, sizeof line, f))
    if (strncmp(line, "flags", 5) == 0) {
      snprintf(flags, sizeof flags, " %s", strchr(line, ':') ? strchr(line, ':') + 1 : "");
      break;
    }
  fclose(f);
  char *nl = strchr(flags, '\n');
  if (nl) *nl = ' ';
  static const struct { unsigned bit; const char *flag; } want[] = {
      {CDDP_CPU_AVX, " avx "},           {CDDP_CPU_AVX2, " avx2 "},         {CDDP_CPU_FMA, " fma "},
      {CDDP_CPU_F16C, " f16c "},         {CDDP_CPU_AVX512F, " avx512f "},   {CDDP_CPU_AVX512BW, " avx512bw "},
      {CDDP_CPU_AVX512VL, " avx512vl "}, {CDDP_CPU_AVX512DQ, " avx512dq "}, {CDDP_CPU_AVX512BF16, " avx512_bf16 "},
  };
  unsigned all = 0, have = 0;
  for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
    int listed = strstr(flags, want[i].flag) != NULL;
    if (cddp__cpu_has(want[i].bit) != listed) TEST_FAIL("cpu feature%s: cddp__cpu_has says %d, /proc/cpuinfo %d",
                                                        want[i].flag, !listed, listed);
    all |= want[i].bit;
    if (listed) have |= want[i].bit;
  }
  CHECK_EQ(cddp__cpu_has(have), 1);
  CHECK_EQ(cddp__cpu_has(all), have == all);
}
