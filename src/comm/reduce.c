/* reduce.c - vectorised reduction kernels (GCC clones them for AVX-512, AVX2 and baseline). */
/* -O2 in GCC 12 vectorises only loops whose trip count needs no epilogue; these loops are the
 * data path, so this file weighs the cost of vectorising each one instead (same bits: no
 * reassociation, only wider registers). */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("vect-cost-model=dynamic")
#endif
#include <stdint.h>
#include <string.h>

/* F16C conversions on x86 (checked at run time); -DCDDP_NO_F16C builds the portable path only. */
#if (defined(__x86_64__) || defined(__i386__)) && !defined(CDDP_NO_F16C)
#include <immintrin.h>
#define HAVE_X86 1
#else
#define HAVE_X86 0
#endif

#include "comm/reduce.h"
#include "common/cpu.h"

/* ifunc resolvers run before the sanitizer runtimes start, which crashes them: no clones there. */
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
#define CLONES
#else
#define CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#endif


/* One kernel per (type, op) family: acc = s0; acc = acc op s_k; dst = acc (* scale). */
#define DEFINE_KERNEL(NAME, T, ACC, LOAD, STORE)                                               \
  CLONES static void NAME(void *dst_, const void *const *srcs, int nsrc, size_t n,            \
                          cddp_redop_t op, double scale_) {                                   \
    T *restrict dst = (T *)dst_;                                                              \
    const ACC scale = (ACC)scale_;                                                            \
    const size_t B = 1024; /* block so partial sums stay in L1 for nsrc > 2 */                 \
    for (size_t b0 = 0; b0 < n; b0 += B) {                                                    \
      size_t m = n - b0 < B ? n - b0 : B;                                                     \
      ACC acc[1024];                                                                          \
      const T *s0 = (const T *)srcs[0] + b0;                                                  \
      for (size_t i = 0; i < m; i++) acc[i] = LOAD(s0[i]);                                    \
      for (int k = 1; k < nsrc; k++) {                                                        \
        const T *s = (const T *)srcs[k] + b0;                                                 \
        switch (op) {                                                                         \
          case CDDP_MAX:                                                                      \
            for (size_t i = 0; i < m; i++) acc[i] = acc[i] < LOAD(s[i]) ? LOAD(s[i]) : acc[i]; \
            break;                                                                            \
          case CDDP_MIN:                                                                      \
            for (size_t i = 0; i < m; i++) acc[i] = acc[i] > LOAD(s[i]) ? LOAD(s[i]) : acc[i]; \
            break;                                                                            \
          default:                                                                            \
            for (size_t i = 0; i < m; i++) acc[i] += LOAD(s[i]);                              \
        }                                                                                     \
      }                                                                                       \
      if (op == CDDP_AVG && scale != (ACC)1)                                                  \
        for (size_t i = 0; i < m; i++) acc[i] *= scale;                                       \
      for (size_t i = 0; i < m; i++) dst[b0 + i] = STORE(acc[i]);                             \
    }                                                                                         \
  }

#define ID(x) (x)
DEFINE_KERNEL(kernel_f32, float, float, ID, ID)
DEFINE_KERNEL(kernel_f64, double, double, ID, ID)

/* IEEE half: convert a block to f32 (F16C where present: vcvtph2ps/vcvtps2ph round to
 * nearest even, keep subnormals and NaN exactly as the scalar converters do), reduce in f32
 * with the same loops as every other float type, round once on the way out. */
#if HAVE_X86
__attribute__((target("avx,f16c"))) static void f16_load_hw(float *d, const uint16_t *s, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(d + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(s + i))));
  for (; i < n; i++) d[i] = cddp__f16_to_f32(s[i]);
}

__attribute__((target("avx,f16c"))) static void f16_store_hw(uint16_t *d, const float *s, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128((__m128i *)(d + i), _mm256_cvtps_ph(_mm256_loadu_ps(s + i), _MM_FROUND_TO_NEAREST_INT));
  for (; i < n; i++) d[i] = cddp__f32_to_f16(s[i]);
}

int cddp__f16_hw(void) { return cddp__cpu_has(CDDP_CPU_AVX | CDDP_CPU_F16C); }
#else
int cddp__f16_hw(void) { return 0; }
#endif

void cddp__f16_to_f32_n(float *dst, const uint16_t *src, size_t n) {
#if HAVE_X86
  if (cddp__f16_hw()) return f16_load_hw(dst, src, n);
#endif
  for (size_t i = 0; i < n; i++) dst[i] = cddp__f16_to_f32(src[i]);
}

void cddp__f32_to_f16_n(uint16_t *dst, const float *src, size_t n) {
#if HAVE_X86
  if (cddp__f16_hw()) return f16_store_hw(dst, src, n);
#endif
  for (size_t i = 0; i < n; i++) dst[i] = cddp__f32_to_f16(src[i]);
}

/* The hot half-precision case, two inputs summed (or averaged) in one pass: the same bits as
 * the block kernels (widen both, add in f32, scale, round once). Each 8 elements are read
 * before they are written, so dst may be a or b exactly (not a shifted overlap). */
#if HAVE_X86
__attribute__((target("avx,f16c"))) static void sum2_f16_hw(uint16_t *d, const uint16_t *a, const uint16_t *b,
                                                            size_t n, float scale) {
  const __m256 s = _mm256_set1_ps(scale);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 x = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(a + i)));
    __m256 y = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(b + i)));
    __m256 r = _mm256_add_ps(x, y);
    if (scale != 1.0f) r = _mm256_mul_ps(r, s);
    _mm_storeu_si128((__m128i *)(d + i), _mm256_cvtps_ph(r, _MM_FROUND_TO_NEAREST_INT));
  }
  for (; i < n; i++) {
    float r = cddp__f16_to_f32(a[i]) + cddp__f16_to_f32(b[i]);
    if (scale != 1.0f) r *= scale;
    d[i] = cddp__f32_to_f16(r);
  }
}
#endif

/* acc[i] = acc[i] op x[i], the inner step of DEFINE_KERNEL for the f16 kernel. */
CLONES static void combine_f32(float *restrict acc, const float *restrict x, size_t m, cddp_redop_t op) {
  switch (op) {
    case CDDP_MAX:
      for (size_t i = 0; i < m; i++) acc[i] = acc[i] < x[i] ? x[i] : acc[i];
      break;
    case CDDP_MIN:
      for (size_t i = 0; i < m; i++) acc[i] = acc[i] > x[i] ? x[i] : acc[i];
      break;
    default:
      for (size_t i = 0; i < m; i++) acc[i] += x[i];
  }
}

/* A 16-bit float type through f32, any op and number of inputs: widen a block, combine in
 * f32, round once on the way out. */
typedef void (*widen_fn)(float *, const uint16_t *, size_t);
typedef void (*narrow_fn)(uint16_t *, const float *, size_t);
static void kernel_half(void *dst_, const void *const *srcs, int nsrc, size_t n, cddp_redop_t op, double scale_,
                        widen_fn widen, narrow_fn narrow) {
  uint16_t *dst = dst_;
  const float scale = (float)scale_;
  enum { B = 1024 };
  float acc[B], x[B];
  for (size_t b0 = 0; b0 < n; b0 += B) {
    size_t m = n - b0 < B ? n - b0 : B;
    widen(acc, (const uint16_t *)srcs[0] + b0, m);
    for (int k = 1; k < nsrc; k++) {
      widen(x, (const uint16_t *)srcs[k] + b0, m);
      combine_f32(acc, x, m, op);
    }
    if (op == CDDP_AVG && scale != 1.0f)
      for (size_t i = 0; i < m; i++) acc[i] *= scale;
    narrow(dst + b0, acc, m);
  }
}

static void kernel_f16(void *dst, const void *const *srcs, int nsrc, size_t n, cddp_redop_t op, double scale) {
  kernel_half(dst, srcs, nsrc, n, op, scale, cddp__f16_to_f32_n, cddp__f32_to_f16_n);
}

/* bfloat16: widening is a 16-bit shift and rounding is integer arithmetic (the scalar
 * converters in reduce.h, done 8 or 16 lanes at a time), so AVX2 and AVX-512F give the same
 * bits as the portable loops. vcvtneps2bf16 (AVX512_BF16) is not used: it flushes subnormals. */
static int bf16_cap = 2; /* the widest path allowed: 2 AVX-512F, 1 AVX2, 0 portable */

static int bf16_level(void) {
#if HAVE_X86
  if (bf16_cap >= 2 && cddp__cpu_has(CDDP_CPU_AVX512F | CDDP_CPU_AVX512BW)) return 2;
  if (bf16_cap >= 1 && cddp__cpu_has(CDDP_CPU_AVX2)) return 1;
#endif
  return 0;
}

int cddp__bf16_isa(int cap) {
  if (cap >= 0) bf16_cap = cap;
  return bf16_level();
}

static void bf16_load_c(float *d, const uint16_t *s, size_t n) {
  for (size_t i = 0; i < n; i++) d[i] = cddp__bf16_to_f32(s[i]);
}

static void bf16_store_c(uint16_t *d, const float *s, size_t n) {
  for (size_t i = 0; i < n; i++) d[i] = cddp__f32_to_bf16(s[i]);
}

static void sum2_bf16_c(uint16_t *d, const uint16_t *a, const uint16_t *b, size_t n, float scale) {
  for (size_t i = 0; i < n; i++) {
    float r = cddp__bf16_to_f32(a[i]) + cddp__bf16_to_f32(b[i]);
    if (scale != 1.0f) r *= scale;
    d[i] = cddp__f32_to_bf16(r);
  }
}

#if HAVE_X86
#define AVX2 __attribute__((target("avx2")))
#define AVX512 __attribute__((target("avx512f,avx512bw")))

AVX2 static inline __m256 bf16x8_widen(const uint16_t *s) {
  __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)s));
  return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
}

/* 8 floats rounded to bf16, each in the low half of its 32-bit lane (cddp__f32_to_bf16). */
AVX2 static inline __m256i bf16x8_round(__m256 f) {
  __m256i u = _mm256_castps_si256(f), hi = _mm256_srli_epi32(u, 16);
  __m256i lsb = _mm256_and_si256(hi, _mm256_set1_epi32(1));
  __m256i rne = _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7fff)), lsb), 16);
  __m256i nan = _mm256_or_si256(hi, _mm256_set1_epi32(0x40));
  __m256i isnan = _mm256_cmpgt_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff)),
                                     _mm256_set1_epi32(0x7f800000));
  return _mm256_blendv_epi8(rne, nan, isnan);
}

/* 16 rounded lanes (two vectors of 8) stored as 16 bf16; packus keeps 0..0xffff exactly. */
AVX2 static inline void bf16x16_store(uint16_t *d, __m256i lo, __m256i hi) {
  __m256i p = _mm256_permute4x64_epi64(_mm256_packus_epi32(lo, hi), 0xd8);
  _mm256_storeu_si256((__m256i *)d, p);
}

AVX2 static void bf16_load_avx2(float *d, const uint16_t *s, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(d + i, bf16x8_widen(s + i));
  bf16_load_c(d + i, s + i, n - i);
}

AVX2 static void bf16_store_avx2(uint16_t *d, const float *s, size_t n) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16)
    bf16x16_store(d + i, bf16x8_round(_mm256_loadu_ps(s + i)), bf16x8_round(_mm256_loadu_ps(s + i + 8)));
  bf16_store_c(d + i, s + i, n - i);
}

/* Each 16 elements are read before they are written, so d may be a or b exactly. Inlined
 * twice, scaled and not, so the loop carries no test. */
#define INLINE inline __attribute__((always_inline))
AVX2 static INLINE void sum2_bf16_avx2_body(uint16_t *d, const uint16_t *a, const uint16_t *b, size_t n,
                                            float scale, const int scaled) {
  const __m256 s = _mm256_set1_ps(scale);
  const __m256i z = _mm256_setzero_si256();
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    /* unpack with zero widens within each 128-bit lane (elements 0-3 and 4-7 of each lane);
     * packus is the inverse interleave, so the order comes back without permutes */
    __m256i x = _mm256_loadu_si256((const __m256i *)(a + i)), y = _mm256_loadu_si256((const __m256i *)(b + i));
    __m256 lo = _mm256_add_ps(_mm256_castsi256_ps(_mm256_unpacklo_epi16(z, x)),
                              _mm256_castsi256_ps(_mm256_unpacklo_epi16(z, y)));
    __m256 hi = _mm256_add_ps(_mm256_castsi256_ps(_mm256_unpackhi_epi16(z, x)),
                              _mm256_castsi256_ps(_mm256_unpackhi_epi16(z, y)));
    if (scaled) lo = _mm256_mul_ps(lo, s), hi = _mm256_mul_ps(hi, s);
    _mm256_storeu_si256((__m256i *)(d + i), _mm256_packus_epi32(bf16x8_round(lo), bf16x8_round(hi)));
  }
  sum2_bf16_c(d + i, a + i, b + i, n - i, scale);
}

AVX2 static void sum2_bf16_avx2(uint16_t *d, const uint16_t *a, const uint16_t *b, size_t n, float scale) {
  if (scale != 1.0f) sum2_bf16_avx2_body(d, a, b, n, scale, 1);
  else sum2_bf16_avx2_body(d, a, b, n, scale, 0);
}

AVX512 static inline __m512 bf16x16_widen(const uint16_t *s) {
  __m512i w = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)s));
  return _mm512_castsi512_ps(_mm512_slli_epi32(w, 16));
}

/* 16 floats rounded to bf16, each in the low half of its 32-bit lane (cddp__f32_to_bf16). */
AVX512 static inline __m512i bf16x16_round(__m512 f) {
  __m512i u = _mm512_castps_si512(f), hi = _mm512_srli_epi32(u, 16);
  __m512i lsb = _mm512_and_si512(hi, _mm512_set1_epi32(1));
  __m512i rne = _mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7fff)), lsb), 16);
  __m512i nan = _mm512_or_si512(hi, _mm512_set1_epi32(0x40));
  __mmask16 isnan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)),
                                            _mm512_set1_epi32(0x7f800000));
  return _mm512_mask_blend_epi32(isnan, rne, nan);
}

/* 16 floats rounded to bf16 and stored (vpmovdw keeps the low 16 bits of each lane). */
AVX512 static inline void bf16x16_round_store(uint16_t *d, __m512 f) {
  _mm256_storeu_si256((__m256i *)d, _mm512_cvtepi32_epi16(bf16x16_round(f)));
}

AVX512 static void bf16_load_avx512(float *d, const uint16_t *s, size_t n) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(d + i, bf16x16_widen(s + i));
  bf16_load_c(d + i, s + i, n - i);
}

AVX512 static void bf16_store_avx512(uint16_t *d, const float *s, size_t n) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16) bf16x16_round_store(d + i, _mm512_loadu_ps(s + i));
  bf16_store_c(d + i, s + i, n - i);
}

AVX512 static INLINE void sum2_bf16_avx512_body(uint16_t *d, const uint16_t *a, const uint16_t *b, size_t n,
                                                float scale, const int scaled) {
  const __m512 s = _mm512_set1_ps(scale);
  const __m512i z = _mm512_setzero_si512();
  size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    /* unpack with zero widens within each 128-bit lane (elements 0-3 and 4-7 of each lane);
     * packus is the inverse interleave, so the order comes back without permutes */
    __m512i x = _mm512_loadu_si512(a + i), y = _mm512_loadu_si512(b + i);
    __m512 lo = _mm512_add_ps(_mm512_castsi512_ps(_mm512_unpacklo_epi16(z, x)),
                              _mm512_castsi512_ps(_mm512_unpacklo_epi16(z, y)));
    __m512 hi = _mm512_add_ps(_mm512_castsi512_ps(_mm512_unpackhi_epi16(z, x)),
                              _mm512_castsi512_ps(_mm512_unpackhi_epi16(z, y)));
    if (scaled) lo = _mm512_mul_ps(lo, s), hi = _mm512_mul_ps(hi, s);
    _mm512_storeu_si512(d + i, _mm512_packus_epi32(bf16x16_round(lo), bf16x16_round(hi)));
  }
  sum2_bf16_c(d + i, a + i, b + i, n - i, scale);
}

AVX512 static void sum2_bf16_avx512(uint16_t *d, const uint16_t *a, const uint16_t *b, size_t n, float scale) {
  if (scale != 1.0f) sum2_bf16_avx512_body(d, a, b, n, scale, 1);
  else sum2_bf16_avx512_body(d, a, b, n, scale, 0);
}
#endif

void cddp__bf16_to_f32_n(float *dst, const uint16_t *src, size_t n) {
#if HAVE_X86
  switch (bf16_level()) {
    case 2: return bf16_load_avx512(dst, src, n);
    case 1: return bf16_load_avx2(dst, src, n);
  }
#endif
  bf16_load_c(dst, src, n);
}

void cddp__f32_to_bf16_n(uint16_t *dst, const float *src, size_t n) {
#if HAVE_X86
  switch (bf16_level()) {
    case 2: return bf16_store_avx512(dst, src, n);
    case 1: return bf16_store_avx2(dst, src, n);
  }
#endif
  bf16_store_c(dst, src, n);
}

static void sum2_bf16(uint16_t *d, const uint16_t *a, const uint16_t *b, size_t n, float scale) {
#if HAVE_X86
  switch (bf16_level()) {
    case 2: return sum2_bf16_avx512(d, a, b, n, scale);
    case 1: return sum2_bf16_avx2(d, a, b, n, scale);
  }
#endif
  sum2_bf16_c(d, a, b, n, scale);
}

static void kernel_bf16(void *dst, const void *const *srcs, int nsrc, size_t n, cddp_redop_t op, double scale) {
  kernel_half(dst, srcs, nsrc, n, op, scale, cddp__bf16_to_f32_n, cddp__f32_to_bf16_n);
}

/* Integers: AVG truncates toward zero, so it is applied through double. */
#define DEFINE_INT_KERNEL(NAME, T)                                                             \
  CLONES static void NAME(void *dst_, const void *const *srcs, int nsrc, size_t n,            \
                          cddp_redop_t op, double scale) {                                    \
    T *restrict dst = (T *)dst_;                                                              \
    for (size_t i = 0; i < n; i++) {                                                          \
      T acc = ((const T *)srcs[0])[i];                                                        \
      for (int k = 1; k < nsrc; k++) {                                                        \
        T v = ((const T *)srcs[k])[i];                                                        \
        if (op == CDDP_MAX) acc = acc < v ? v : acc;                                          \
        else if (op == CDDP_MIN) acc = acc > v ? v : acc;                                     \
        else acc = (T)((uint64_t)acc + (uint64_t)v); /* wraps instead of UB on overflow */    \
      }                                                                                       \
      if (op == CDDP_AVG && scale != 1.0) acc = (T)((double)acc * scale);                     \
      dst[i] = acc;                                                                           \
    }                                                                                         \
  }

DEFINE_INT_KERNEL(kernel_i32, int32_t)
DEFINE_INT_KERNEL(kernel_i64, int64_t)

/* The hot case (two f32 inputs, sum or average) in one fused pass; the output may be one of
 * the inputs, so each aliasing shape gets its own restrict-qualified loop that GCC vectorises
 * without run-time overlap checks (which would fall back to scalar code when dst == a). */
CLONES static void sum2_f32_into(float *restrict d, const float *restrict x, size_t n, float scale) {
  if (scale == 1.0f)
    for (size_t i = 0; i < n; i++) d[i] += x[i];
  else
    for (size_t i = 0; i < n; i++) d[i] = (d[i] + x[i]) * scale;
}

CLONES static void sum2_f32(float *restrict d, const float *restrict a, const float *restrict b, size_t n,
                            float scale) {
  if (scale == 1.0f)
    for (size_t i = 0; i < n; i++) d[i] = a[i] + b[i];
  else
    for (size_t i = 0; i < n; i++) d[i] = (a[i] + b[i]) * scale;
}

static int disjoint(const void *p, const void *q, size_t bytes) {
  return (const char *)p + bytes <= (const char *)q || (const char *)q + bytes <= (const char *)p;
}

void cddp__reduce_n(void *dst, const void *const *srcs, int nsrc, size_t n, cddp_dtype_t dt,
                    cddp_redop_t op, double scale) {
  if (nsrc == 2 && dt == CDDP_F32 && (op == CDDP_SUM || op == CDDP_AVG)) {
    const float *a = srcs[0], *b = srcs[1];
    float *d = dst, sc = op == CDDP_AVG ? (float)scale : 1.0f;
    size_t bytes = n * sizeof(float);
    /* a + b == b + a bit for bit, so the order of the operands may follow the aliasing */
    if (d == a && disjoint(d, b, bytes)) return sum2_f32_into(d, b, n, sc);
    if (d == b && disjoint(d, a, bytes)) return sum2_f32_into(d, a, n, sc);
    if (disjoint(d, a, bytes) && disjoint(d, b, bytes)) return sum2_f32(d, a, b, n, sc);
  }
#if HAVE_X86
  if (nsrc == 2 && dt == CDDP_F16 && (op == CDDP_SUM || op == CDDP_AVG) && cddp__f16_hw()) {
    const uint16_t *a = srcs[0], *b = srcs[1];
    uint16_t *d = dst;
    size_t bytes = n * sizeof(uint16_t);
    if ((d == a || disjoint(d, a, bytes)) && (d == b || disjoint(d, b, bytes)))
      return sum2_f16_hw(d, a, b, n, op == CDDP_AVG ? (float)scale : 1.0f);
  }
#endif
  if (nsrc == 2 && dt == CDDP_BF16 && (op == CDDP_SUM || op == CDDP_AVG)) {
    const uint16_t *a = srcs[0], *b = srcs[1];
    uint16_t *d = dst;
    size_t bytes = n * sizeof(uint16_t);
    if ((d == a || disjoint(d, a, bytes)) && (d == b || disjoint(d, b, bytes)))
      return sum2_bf16(d, a, b, n, op == CDDP_AVG ? (float)scale : 1.0f);
  }
  switch (dt) {
    case CDDP_F32: kernel_f32(dst, srcs, nsrc, n, op, scale); break;
    case CDDP_F64: kernel_f64(dst, srcs, nsrc, n, op, scale); break;
    case CDDP_BF16: kernel_bf16(dst, srcs, nsrc, n, op, scale); break;
    case CDDP_F16: kernel_f16(dst, srcs, nsrc, n, op, scale); break;
    case CDDP_I32: kernel_i32(dst, srcs, nsrc, n, op, scale); break;
    case CDDP_I64: kernel_i64(dst, srcs, nsrc, n, op, scale); break;
    default: break;
  }
}

void cddp__reduce2(void *dst, const void *a, const void *b, size_t n, cddp_dtype_t dt,
                   cddp_redop_t op, double scale) {
  const void *srcs[2] = {a, b};
  cddp__reduce_n(dst, srcs, 2, n, dt, op, scale);
}

void cddp__scale(void *buf, size_t n, cddp_dtype_t dt, double scale) {
  const void *srcs[1] = {buf};
  cddp__reduce_n(buf, srcs, 1, n, dt, CDDP_AVG, scale);
}

size_t cddp_dtype_size(cddp_dtype_t dt) {
  static const size_t sizes[CDDP_DTYPE_COUNT] = {4, 8, 2, 4, 8, 2};
  return (unsigned)dt < CDDP_DTYPE_COUNT ? sizes[dt] : 0;
}

const char *cddp_dtype_name(cddp_dtype_t dt) {
  static const char *names[CDDP_DTYPE_COUNT] = {"f32", "f64", "bf16", "i32", "i64", "f16"};
  return (unsigned)dt < CDDP_DTYPE_COUNT ? names[dt] : "?";
}

const char *cddp_redop_name(cddp_redop_t op) {
  static const char *names[CDDP_REDOP_COUNT] = {"sum", "avg", "max", "min"};
  return (unsigned)op < CDDP_REDOP_COUNT ? names[op] : "?";
}
