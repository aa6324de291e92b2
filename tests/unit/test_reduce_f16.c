/* test_reduce_f16.c - IEEE half converters (scalar and F16C, exhaustively) and the f16 kernel. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "comm/reduce.h"
#include "test.h"

static uint32_t bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static float from_bits(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
static int h_isnan(uint16_t h) { return (h & 0x7c00) == 0x7c00 && (h & 0x3ff); }

/* The value of a half by its definition, computed in double. */
static double h_value(uint16_t h) {
  int e = (h >> 10) & 0x1f, m = h & 0x3ff;
  double v = e == 0 ? ldexp(m, -24) : e == 31 ? (m ? NAN : INFINITY) : ldexp(1024 + m, e - 25);
  return h & 0x8000 ? -v : v;
}

TEST(f16_every_half_widens_exactly_and_round_trips) {
  static float hw[65536];
  static uint16_t all[65536], back[65536];
  for (int h = 0; h < 65536; h++) all[h] = (uint16_t)h;
  cddp__f16_to_f32_n(hw, all, 65536);
  int wrong = 0;
  for (int h = 0; h < 65536; h++) {
    float f = cddp__f16_to_f32((uint16_t)h);
    double want = h_value((uint16_t)h);
    if (bits(f) != bits(hw[h])) wrong++; /* scalar and vector widen to the same bits, NaN too */
    if (h_isnan((uint16_t)h)) {
      if (!isnan(f) || (bits(f) >> 31) != (unsigned)(h >> 15) || !h_isnan(cddp__f32_to_f16(f))) wrong++;
      if ((h & 0x200) && cddp__f32_to_f16(f) != h) wrong++; /* quiet NaN: every bit kept */
      continue;
    }
    if ((double)f != want || !signbit(f) != !signbit(want)) wrong++;
    if (cddp__f32_to_f16(f) != h) wrong++;
  }
  CHECK_EQ(wrong, 0);
  cddp__f32_to_f16_n(back, hw, 65536);
  wrong = 0;
  for (int h = 0; h < 65536; h++) wrong += h_isnan((uint16_t)h) ? !h_isnan(back[h]) : back[h] != h;
  CHECK_EQ(wrong, 0);
}

/* Between every two adjacent finite halves (and from 65504 towards the first value past it,
 * 65536, which is inf): the midpoint goes to the even one, the floats beside it to the nearer. */
TEST(f16_rounds_to_nearest_ties_to_even_everywhere) {
  int wrong = 0;
  for (uint32_t h = 0; h < 0x7c00; h++) {
    double lo = h_value((uint16_t)h), hi = h == 0x7bff ? 65536.0 : h_value((uint16_t)(h + 1));
    float mid = (float)((lo + hi) / 2); /* exact: 12 significant bits */
    if ((double)mid != (lo + hi) / 2) wrong++;
    uint16_t even = (uint16_t)(h & 1 ? h + 1 : h);
    for (int s = 0; s < 2; s++) {
      float sg = s ? -1.0f : 1.0f;
      uint16_t sb = (uint16_t)(s ? 0x8000 : 0);
      if (cddp__f32_to_f16(sg * mid) != (even | sb)) wrong++;
      if (cddp__f32_to_f16(sg * nextafterf(mid, 0)) != (h | sb)) wrong++;
      if (cddp__f32_to_f16(sg * nextafterf(mid, INFINITY)) != ((h + 1) | sb)) wrong++;
    }
  }
  CHECK_EQ(wrong, 0);
}

TEST(f16_specials_overflow_subnormals_nan) {
  CHECK_EQ(cddp__f32_to_f16(65504.0f), 0x7bff);
  CHECK_EQ(cddp__f32_to_f16(nextafterf(65520.0f, 0)), 0x7bff);
  CHECK_EQ(cddp__f32_to_f16(65520.0f), 0x7c00); /* the tie above the largest half: inf */
  CHECK_EQ(cddp__f32_to_f16(1e6f), 0x7c00);
  CHECK_EQ(cddp__f32_to_f16(-3e38f), 0xfc00);
  CHECK_EQ(cddp__f32_to_f16(INFINITY), 0x7c00);
  CHECK_EQ(cddp__f32_to_f16(-INFINITY), 0xfc00);
  CHECK(h_isnan(cddp__f32_to_f16(NAN)));
  CHECK(h_isnan(cddp__f32_to_f16(from_bits(0x7f800001u)))); /* signalling, payload only in low bits */
  CHECK(h_isnan(cddp__f32_to_f16(from_bits(0xff800001u))));
  CHECK_EQ(cddp__f32_to_f16(-0.0f), 0x8000);
  CHECK_EQ(cddp__f32_to_f16(0x1p-14f), 0x0400);            /* smallest normal */
  CHECK_EQ(cddp__f32_to_f16(0x1p-24f), 0x0001);            /* smallest subnormal */
  CHECK_EQ(cddp__f32_to_f16(0x1p-25f), 0x0000);            /* tie between 0 and 2^-24: even */
  CHECK_EQ(cddp__f32_to_f16(nextafterf(0x1p-25f, 1)), 0x0001);
  CHECK_EQ(cddp__f32_to_f16(0x3p-25f), 0x0002);            /* 1.5 units: tie, to even 2 */
  CHECK_EQ(cddp__f32_to_f16(0x5p-25f), 0x0002);            /* 2.5 units: tie, to even 2 */
  CHECK_EQ(cddp__f32_to_f16(nextafterf(0x1p-14f, 0)), 0x0400); /* rounds up into the normals */
  CHECK_EQ(cddp__f32_to_f16(from_bits(1)), 0x0000);        /* float subnormal */
  CHECK_EQ(cddp__f32_to_f16(-from_bits(1)), 0x8000);
  CHECK_EQ(cddp__f32_to_f16(1.0f), 0x3c00);
  CHECK_EQ(cddp__f32_to_f16(-2.0f), 0xc000);
  CHECK_EQ(cddp__f32_to_f16(0.1f), 0x2e66);
  CHECK(cddp__f16_to_f32(0x7c00) == INFINITY && cddp__f16_to_f32(0xfc00) == -INFINITY);
  CHECK_EQ(cddp_dtype_size(CDDP_F16), 2);
  CHECK(strcmp(cddp_dtype_name(CDDP_F16), "f16") == 0);
}

/* The block converters (F16C on this CPU, or the scalar path) against the scalar converter
 * and, where the compiler has _Float16, its own conversion, over ~1M float bit patterns. */
TEST(f16_vector_and_scalar_paths_agree) {
  enum { N = 1 << 20 };
  float *f = malloc(N * sizeof *f);
  uint16_t *h = malloc(N * sizeof *h);
  CHECK(f && h);
  uint32_t u = 0x9e3779b9u;
  for (int i = 0; i < N; i++) {
    u = u * 1664525u + 1013904223u;
    /* half of them near the half range (exponents 100..145), half anywhere */
    uint32_t x = i & 1 ? u : (u & 0x807fffffu) | ((100u + (u >> 24) % 46) << 23);
    f[i] = from_bits(x);
  }
  cddp__f32_to_f16_n(h, f, N - 3); /* a tail the vector loop leaves to the scalar one */
  int wrong = 0, wrong_c = 0;
  for (int i = 0; i < N - 3; i++) {
    uint16_t s = cddp__f32_to_f16(f[i]);
    if (h[i] != s && !(h_isnan(h[i]) && h_isnan(s))) wrong++;
#ifdef __FLT16_MAX__
    _Float16 c = (_Float16)f[i];
    uint16_t cb;
    memcpy(&cb, &c, 2);
    if (!isnan(f[i]) && cb != s) wrong_c++;
#endif
  }
  printf("# f16 block converters use %s\n", cddp__f16_hw() ? "F16C" : "the scalar path");
  CHECK_EQ(wrong, 0);
  CHECK_EQ(wrong_c, 0);
  free(f);
  free(h);
}

/* 1 + 2^-11 + 2^-11: each addend alone is half an ulp of 1.0 in f16 and rounds away (ties to
 * even); accumulated in f32 they reach 1 + 2^-10, which f16 holds. */
TEST(reduce_f16_accumulates_in_f32) {
  uint16_t a[1] = {0x3c00}, b[1] = {0x1000}, c[1] = {0x1000}, out[1];
  const void *srcs[3] = {a, b, c};
  cddp__reduce_n(out, srcs, 3, 1, CDDP_F16, CDDP_SUM, 1.0);
  CHECK_EQ(out[0], 0x3c01);
  /* 60000 + 60000 overflows to inf; averaged, the f32 sum is scaled before rounding */
  uint16_t big = cddp__f32_to_f16(60000.0f), x[1] = {big}, y[1] = {big};
  cddp__reduce2(out, x, y, 1, CDDP_F16, CDDP_SUM, 1.0);
  CHECK_EQ(out[0], 0x7c00);
  cddp__reduce2(out, x, y, 1, CDDP_F16, CDDP_AVG, 0.5);
  CHECK_EQ(out[0], big);
}

/* The kernel against a scalar reference (f32 accumulation in source order, one rounding), for
 * every op, three inputs, a length that is not a multiple of the block, dst aliasing src 0. */
TEST(reduce_f16_kernel_matches_scalar_reference) {
  enum { N = 2500, K = 3 };
  static uint16_t in[K][N], out[N], ref[N];
  uint32_t u = 12345;
  for (int k = 0; k < K; k++)
    for (int i = 0; i < N; i++) {
      u = u * 1664525u + 1013904223u;
      in[k][i] = cddp__f32_to_f16(((float)(u >> 8) / (float)(1 << 24) - 0.5f) * 300.0f);
    }
  const void *srcs[K] = {in[0], in[1], in[2]};
  for (int op = 0; op < CDDP_REDOP_COUNT; op++) {
    for (int i = 0; i < N; i++) {
      float acc = cddp__f16_to_f32(in[0][i]);
      for (int k = 1; k < K; k++) {
        float v = cddp__f16_to_f32(in[k][i]);
        acc = op == CDDP_MAX ? (acc < v ? v : acc) : op == CDDP_MIN ? (acc > v ? v : acc) : acc + v;
      }
      if (op == CDDP_AVG) acc *= 1.0f / 3.0f;
      ref[i] = cddp__f32_to_f16(acc);
    }
    cddp__reduce_n(out, srcs, K, N, CDDP_F16, (cddp_redop_t)op, 1.0 / 3.0);
    CHECK(memcmp(out, ref, sizeof out) == 0);
  }
  static uint16_t d[N];
  memcpy(d, in[0], sizeof d);
  const void *alias[K] = {d, in[1], in[2]};
  cddp__reduce_n(d, alias, K, N, CDDP_F16, CDDP_SUM, 1.0);
  cddp__reduce_n(out, srcs, K, N, CDDP_F16, CDDP_SUM, 1.0);
  CHECK(memcmp(d, out, sizeof d) == 0);
}

/* The fused two-input sum/avg (F16C) against the scalar reference, in every aliasing shape
 * and with a tail shorter than a vector. */
TEST(reduce2_f16_fused_matches_scalar_reference) {
  enum { N = 1003 };
  static uint16_t a[N], b[N], ref[N], d[N];
  uint32_t u = 777;
  for (int i = 0; i < N; i++) {
    u = u * 1664525u + 1013904223u;
    a[i] = (uint16_t)(u >> 16); /* any finite half (sums may overflow to inf) */
    if ((a[i] & 0x7c00) == 0x7c00) a[i] = 0x3c00;
    u = u * 1664525u + 1013904223u;
    b[i] = (uint16_t)(u >> 16);
    if ((b[i] & 0x7c00) == 0x7c00) b[i] = 0x0001;
  }
  for (int avg = 0; avg < 2; avg++) {
    cddp_redop_t op = avg ? CDDP_AVG : CDDP_SUM;
    for (int i = 0; i < N; i++) {
      float r = cddp__f16_to_f32(a[i]) + cddp__f16_to_f32(b[i]);
      ref[i] = cddp__f32_to_f16(avg ? r * 0.25f : r);
    }
    cddp__reduce2(d, a, b, N, CDDP_F16, op, 0.25);
    CHECK(memcmp(d, ref, sizeof d) == 0);
    memcpy(d, a, sizeof d);
    cddp__reduce2(d, d, b, N, CDDP_F16, op, 0.25);
    CHECK(memcmp(d, ref, sizeof d) == 0);
    memcpy(d, b, sizeof d);
    cddp__reduce2(d, a, d, N, CDDP_F16, op, 0.25);
    CHECK(memcmp(d, ref, sizeof d) == 0);
  }
}
