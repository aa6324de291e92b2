/* test_reduce_bf16.c - bf16 converters and kernels: every vector path (AVX-512F, AVX2) against the portable one, bit for bit. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "comm/reduce.h"
#include "test.h"

static uint32_t bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static float from_bits(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
static int b_isnan(uint16_t h) { return (h & 0x7f80) == 0x7f80 && (h & 0x7f); }
static float bw(uint16_t h) { return from_bits((uint32_t)h << 16); }
static uint32_t lcg(uint32_t *u) { return *u = *u * 1664525u + 1013904223u; }

static const char *const isa_name[] = {"portable", "AVX2", "AVX-512F"};

/* The widest bf16 path this CPU has; the tests below run each of 0..that in turn. */
static int widest(void) {
  cddp__bf16_isa(2);
  return cddp__bf16_isa(-1);
}

/* Random float bit patterns: a third anywhere (NaN, inf, subnormals included), a third with
 * exponents near 1.0 whose low 16 bits are often exactly 0x8000 (ties), a third subnormal or
 * tiny. */
static uint32_t some_float(uint32_t *u) {
  uint32_t x = lcg(u), k = x % 3, y = lcg(u);
  if (k == 0) return y;
  if (k == 1) {
    uint32_t v = (y & 0x807fffffu) | ((120u + (x >> 8) % 16) << 23);
    return (x >> 4) & 1 ? (v & 0xffff0000u) | 0x8000u : v;
  }
  return (y & 0x80ffffffu) & ((x >> 5) & 1 ? 0x807fffffu : 0x80ffffffu);
}

/* The bf16 nearest to f by the definition, computed in double; ties to even; NaN excluded. */
static uint16_t nearest_bf16(float f) {
  uint32_t u = bits(f), x = u & 0x7fffffffu, lo = x >> 16, sign = (u >> 16) & 0x8000u;
  double d = fabs((double)f), vlo = (double)bw((uint16_t)lo);
  double vhi = lo == 0x7f7f ? 0x1p128 : lo == 0x7f80 ? INFINITY : (double)bw((uint16_t)(lo + 1));
  uint32_t r = d - vlo < vhi - d ? lo : d - vlo > vhi - d ? lo + 1 : (lo & 1 ? lo + 1 : lo);
  if (x == 0x7f800000u) r = lo;
  return (uint16_t)(sign | r);
}

TEST(bf16_scalar_converter_rounds_to_nearest_even_and_keeps_nan) {
  int wrong = 0;
  for (uint32_t h = 0; h < 65536; h++) { /* every bf16 widens exactly and comes back */
    float f = bw((uint16_t)h);
    if (b_isnan((uint16_t)h)) wrong += cddp__f32_to_bf16(f) != (h | 0x40);
    else wrong += cddp__f32_to_bf16(f) != h;
  }
  CHECK_EQ(wrong, 0);
  for (uint32_t h = 0; h < 0x7f80; h++) { /* midpoints between neighbours go to the even one */
    uint32_t mid = (h << 16) | 0x8000u;
    uint16_t even = (uint16_t)(h & 1 ? h + 1 : h);
    for (uint32_t s = 0; s < 2; s++) {
      uint32_t sb = s << 31;
      wrong += cddp__f32_to_bf16(from_bits(mid | sb)) != (even | (sb >> 16));
      wrong += cddp__f32_to_bf16(from_bits((mid - 1) | sb)) != (h | (sb >> 16));
      wrong += cddp__f32_to_bf16(from_bits((mid + 1) | sb)) != ((h + 1) | (sb >> 16));
    }
  }
  CHECK_EQ(wrong, 0);
  uint32_t u = 99;
  for (int i = 0; i < 200000; i++) {
    float f = from_bits(some_float(&u));
    if (!isnan(f)) wrong += cddp__f32_to_bf16(f) != nearest_bf16(f);
  }
  CHECK_EQ(wrong, 0);
  CHECK_EQ(cddp__f32_to_bf16(from_bits(0x7f7fffffu)), 0x7f80); /* FLT_MAX rounds to inf */
  CHECK_EQ(cddp__f32_to_bf16(from_bits(0x7f7f7fffu)), 0x7f7f);
  CHECK_EQ(cddp__f32_to_bf16(-INFINITY), 0xff80);
  CHECK_EQ(cddp__f32_to_bf16(from_bits(0x7f800001u)), 0x7fc0); /* signalling NaN: quiet NaN */
  CHECK_EQ(cddp__f32_to_bf16(from_bits(0xff810000u)), 0xffc1);
  CHECK_EQ(cddp__f32_to_bf16(from_bits(0x00008000u)), 0x0000); /* subnormal tie: even 0 */
  CHECK_EQ(cddp__f32_to_bf16(from_bits(0x00018000u)), 0x0002);
  CHECK_EQ(cddp__f32_to_bf16(from_bits(0x80008001u)), 0x8001);
  CHECK_EQ(cddp__f32_to_bf16(1.0f), 0x3f80);
}

/* ~1M float bit patterns through the block converters on every path; lengths with tails of
 * every size the 8- and 16-wide loops leave, at odd offsets. */
TEST(bf16_block_converters_match_scalar_on_every_path) {
  enum { N = 1 << 20 };
  float *f = malloc(N * sizeof *f), *g = malloc(N * sizeof *g);
  uint16_t *h = malloc(N * sizeof *h), *all = malloc(65536 * sizeof *all);
  CHECK(f && g && h && all);
  uint32_t u = 0x9e3779b9u;
  for (int i = 0; i < N; i++) f[i] = from_bits(some_float(&u));
  for (int i = 0; i < 65536; i++) all[i] = (uint16_t)i;
  for (int isa = 0; isa <= widest(); isa++) {
    CHECK_EQ(cddp__bf16_isa(isa), isa);
    printf("# bf16 block converters: %s\n", isa_name[isa]);
    int wrong = 0;
    cddp__f32_to_bf16_n(h, f, N - 3);
    for (int i = 0; i < N - 3; i++) wrong += h[i] != cddp__f32_to_bf16(f[i]);
    for (size_t len = 0; len <= 40; len++) {
      memset(h, 0xa5, 64 * sizeof *h);
      cddp__f32_to_bf16_n(h + 1, f + 7 + len, len);
      for (size_t i = 0; i < len; i++) wrong += h[1 + i] != cddp__f32_to_bf16(f[7 + len + i]);
      wrong += h[0] != 0xa5a5 || h[1 + len] != 0xa5a5; /* nothing written outside */
    }
    CHECK_EQ(wrong, 0);
    cddp__bf16_to_f32_n(g, all, 65536);
    for (int i = 0; i < 65536; i++) wrong += bits(g[i]) != (uint32_t)i << 16;
    cddp__bf16_to_f32_n(g + 1, all + 3, 37);
    for (int i = 0; i < 37; i++) wrong += bits(g[1 + i]) != (uint32_t)(i + 3) << 16;
    CHECK_EQ(wrong, 0);
  }
  cddp__bf16_isa(2);
  free(f);
  free(g);
  free(h);
  free(all);
}

/* The reference for one element of a two-input sum/avg: widen, add, scale, round once. */
static uint16_t ref2(uint16_t a, uint16_t b, int avg, float scale) {
  float r = bw(a) + bw(b);
  if (avg) r *= scale;
  return cddp__f32_to_bf16(r);
}

/* Equal bits; where the result is NaN, both NaN and quiet (which NaN payload wins an add of two
 * NaNs is the hardware's choice, and the compiler may swap a + b). */
static int same(uint16_t x, uint16_t ref) {
  if (b_isnan(ref)) return b_isnan(x) && (x & 0x40);
  return x == ref;
}

/* The fused two-input sum/avg on every path, every aliasing shape, ~1M random bf16 pairs (any
 * bits: NaN, inf, subnormals; and sums that land exactly on ties), a length that is not a
 * multiple of 16. */
TEST(reduce2_bf16_fused_matches_scalar_reference_on_every_path) {
  enum { N = (1 << 20) + 13 };
  uint16_t *a = malloc(N * 2), *b = malloc(N * 2), *ref = malloc(N * 2), *d = malloc(N * 2);
  CHECK(a && b && ref && d);
  uint32_t u = 4242;
  int ties = 0;
  for (int i = 0; i < N; i++) {
    a[i] = (uint16_t)(some_float(&u) >> 16);
    b[i] = (uint16_t)(some_float(&u) >> 16);
    if (i % 4 == 0) { /* a + half an ulp of a: an exact tie */
      uint16_t e = (uint16_t)((a[i] & 0x7f80) >> 7);
      if (e > 8 && e < 250) b[i] = (uint16_t)((a[i] & 0x8000) | ((e - 8) << 7));
    }
    float s = bw(a[i]) + bw(b[i]);
    ties += !isnan(s) && (bits(s) & 0xffff) == 0x8000;
  }
  printf("# %d of %d sums are exact ties\n", ties, N);
  CHECK(ties > N / 8);
  const float scales[] = {0.5f, 1.0f / 3.0f};
  for (int isa = 0; isa <= widest(); isa++) {
    CHECK_EQ(cddp__bf16_isa(isa), isa);
    printf("# bf16 fused sum/avg: %s\n", isa_name[isa]);
    for (int avg = 0; avg < 2; avg++)
      for (int sc = 0; sc < 2; sc++) {
        cddp_redop_t op = avg ? CDDP_AVG : CDDP_SUM;
        for (int i = 0; i < N; i++) ref[i] = ref2(a[i], b[i], avg, scales[sc]);
        int wrong = 0;
        for (int shape = 0; shape < 3; shape++) { /* distinct, out == a, out == b */
          memcpy(d, shape == 2 ? b : a, (size_t)N * 2);
          const uint16_t *x = shape == 1 ? d : a, *y = shape == 2 ? d : b;
          cddp__reduce2(d, x, y, N, CDDP_BF16, op, scales[sc]);
          for (int i = 0; i < N; i++) wrong += !same(d[i], ref[i]);
        }
        for (size_t len = 1; len <= 35; len++) { /* short tails, output next to untouched bits */
          memset(d, 0x5a, 128);
          cddp__reduce2(d, a + 100, b + 100, len, CDDP_BF16, op, scales[sc]);
          for (size_t i = 0; i < len; i++) wrong += !same(d[i], ref[100 + i]);
          wrong += d[len] != 0x5a5a;
        }
        CHECK_EQ(wrong, 0);
      }
  }
  cddp__bf16_isa(2);
  free(a);
  free(b);
  free(ref);
  free(d);
}

/* Every op with three inputs (the block kernel) and max/min with two (which skip the fused
 * path), NaNs included, against f32 accumulation in source order and one rounding. */
TEST(reduce_bf16_kernel_every_op_matches_scalar_reference_on_every_path) {
  enum { N = 5003, K = 3 };
  static uint16_t in[K][N], out[N], ref[N];
  uint32_t u = 12345;
  for (int k = 0; k < K; k++)
    for (int i = 0; i < N; i++) in[k][i] = (uint16_t)(some_float(&u) >> 16);
  for (int isa = 0; isa <= widest(); isa++) {
    CHECK_EQ(cddp__bf16_isa(isa), isa);
    for (int nsrc = 2; nsrc <= K; nsrc++)
      for (int op = 0; op < CDDP_REDOP_COUNT; op++) {
        const float scale = 1.0f / (float)nsrc;
        for (int i = 0; i < N; i++) {
          float acc = bw(in[0][i]);
          for (int k = 1; k < nsrc; k++) {
            float v = bw(in[k][i]);
            acc = op == CDDP_MAX ? (acc < v ? v : acc) : op == CDDP_MIN ? (acc > v ? v : acc) : acc + v;
          }
          if (op == CDDP_AVG) acc *= scale;
          ref[i] = cddp__f32_to_bf16(acc);
        }
        const void *srcs[K] = {in[0], in[1], in[2]};
        cddp__reduce_n(out, srcs, nsrc, N, CDDP_BF16, (cddp_redop_t)op, (double)scale);
        int wrong = 0;
        for (int i = 0; i < N; i++)
          wrong += op >= CDDP_MAX ? out[i] != ref[i] : !same(out[i], ref[i]); /* max/min: exact bits */
        static uint16_t d[N]; /* dst aliasing the first input */
        memcpy(d, in[0], sizeof d);
        const void *alias[K] = {d, in[1], in[2]};
        cddp__reduce_n(d, alias, nsrc, N, CDDP_BF16, (cddp_redop_t)op, (double)scale);
        for (int i = 0; i < N; i++) wrong += d[i] != out[i] && !(b_isnan(d[i]) && b_isnan(out[i]));
        CHECK_EQ(wrong, 0);
      }
  }
  cddp__bf16_isa(2);
  /* accumulation in f32: 1 + 2^-8 + 2^-8, each addend alone a tie that rounds away */
  uint16_t a[1] = {0x3f80}, b[1] = {0x3b80}, c[1] = {0x3b80}, o[1];
  const void *s3[3] = {a, b, c};
  cddp__reduce_n(o, s3, 3, 1, CDDP_BF16, CDDP_SUM, 1.0);
  CHECK_EQ(o[0], 0x3f81);
  cddp__reduce2(o, a, b, 1, CDDP_BF16, CDDP_SUM, 1.0);
  CHECK_EQ(o[0], 0x3f80); /* 1 + 2^-8: the tie goes to even 1.0 */
}
