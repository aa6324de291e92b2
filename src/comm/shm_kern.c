/* shm_kern.c - copy kernels for the shm transport (non-temporal stores for huge messages). */
#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#include "comm/shm.h"
#include "common/cpu.h"

/* Streams dst (64-byte aligned) from src with AVX-512 non-temporal stores. */
__attribute__((target("avx512f"))) static void stream512(char *dst, const char *src, size_t n) {
  size_t i = 0;
  for (; i + 256 <= n; i += 256) {
    __m512i a = _mm512_loadu_si512(src + i), b = _mm512_loadu_si512(src + i + 64);
    __m512i c = _mm512_loadu_si512(src + i + 128), d = _mm512_loadu_si512(src + i + 192);
    _mm512_stream_si512((void *)(dst + i), a);
    _mm512_stream_si512((void *)(dst + i + 64), b);
    _mm512_stream_si512((void *)(dst + i + 128), c);
    _mm512_stream_si512((void *)(dst + i + 192), d);
  }
  if (i < n) memcpy(dst + i, src + i, n - i);
}

__attribute__((target("avx2"))) static void stream256(char *dst, const char *src, size_t n) {
  size_t i = 0;
  for (; i + 128 <= n; i += 128) {
    __m256i a = _mm256_loadu_si256((const void *)(src + i));
    __m256i b = _mm256_loadu_si256((const void *)(src + i + 32));
    __m256i c = _mm256_loadu_si256((const void *)(src + i + 64));
    __m256i d = _mm256_loadu_si256((const void *)(src + i + 96));
    _mm256_stream_si256((void *)(dst + i), a);
    _mm256_stream_si256((void *)(dst + i + 32), b);
    _mm256_stream_si256((void *)(dst + i + 64), c);
    _mm256_stream_si256((void *)(dst + i + 96), d);
  }
  if (i < n) memcpy(dst + i, src + i, n - i);
}

/* CLDEMOTE is a hint NOP on CPUs without it, so it is safe to issue anywhere on x86-64. */
void cddp__shm_demote(const void *p, size_t bytes) {
#if defined(__x86_64__)
  const char *c = (const char *)((uintptr_t)p & ~(uintptr_t)63), *end = (const char *)p + bytes;
  for (; c < end; c += 64) __asm__ __volatile__(".byte 0x0f, 0x1c, 0x00" ::"a"(c) : "memory");
#else
  (void)p, (void)bytes;
#endif
}

void cddp__shm_prefetchw(const void *p, size_t bytes) {
  const char *c = (const char *)((uintptr_t)p & ~(uintptr_t)63), *end = (const char *)p + bytes;
#if defined(__x86_64__) /* 0F 0D /1: a NOP on x86-64 CPUs that lack PREFETCHW */
  for (; c < end; c += 64) __asm__ __volatile__("prefetchw (%0)" ::"r"(c));
#else
  for (; c < end; c += 64) __builtin_prefetch(c, 1, 3);
#endif
}

void cddp__shm_copy(void *dst_, const void *src_, size_t bytes, int nt) {
  char *dst = dst_;
  const char *src = src_;
  if (!nt || bytes < 4096) {
    memcpy(dst, src, bytes);
    return;
  }
  size_t head = (64 - ((uintptr_t)dst & 63)) & 63;
  memcpy(dst, src, head);
  if (cddp__cpu_has(CDDP_CPU_AVX512F)) stream512(dst + head, src + head, bytes - head);
  else if (cddp__cpu_has(CDDP_CPU_AVX2)) stream256(dst + head, src + head, bytes - head);
  else memcpy(dst + head, src + head, bytes - head);
}

/* d0[i] (and d1[i] when d1) = (a[i] + b[i]) * scale, f32, in one pass; streaming stores into
 * d1 when nt. Same operations in the same order as cddp__reduce_n, so the same bits. */
__attribute__((target("avx512f"))) static void sum2_f32_512(float *d0, float *d1, const float *a,
                                                           const float *b, size_t n, float scale,
                                                           int avg, int nt) {
  size_t i = 0;
  const __m512 sc = _mm512_set1_ps(scale);
  int d1_aligned = d1 && ((uintptr_t)d1 & 63) == 0;
  for (; i + 32 <= n; i += 32) {
    __m512 x = _mm512_add_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i));
    __m512 y = _mm512_add_ps(_mm512_loadu_ps(a + i + 16), _mm512_loadu_ps(b + i + 16));
    if (avg) x = _mm512_mul_ps(x, sc), y = _mm512_mul_ps(y, sc);
    _mm512_storeu_ps(d0 + i, x);
    _mm512_storeu_ps(d0 + i + 16, y);
    if (!d1) continue;
    if (nt && d1_aligned) {
      _mm512_stream_ps(d1 + i, x);
      _mm512_stream_ps(d1 + i + 16, y);
    } else {
      _mm512_storeu_ps(d1 + i, x);
      _mm512_storeu_ps(d1 + i + 16, y);
    }
  }
  for (; i < n; i++) {
    float x = a[i] + b[i];
    if (avg) x *= scale;
    d0[i] = x;
    if (d1) d1[i] = x;
  }
}

static void sum2_f32_c(float *d0, float *d1, const float *a, const float *b, size_t n,
                       float scale, int avg) {
  for (size_t i = 0; i < n; i++) {
    float x = a[i] + b[i];
    if (avg) x *= scale;
    d0[i] = x;
    if (d1) d1[i] = x;
  }
}

void cddp__shm_sum2_f32(float *d0, float *d1, const float *a, const float *b, size_t n,
                        float scale, int avg, int nt) {
  if (cddp__cpu_has(CDDP_CPU_AVX512F)) sum2_f32_512(d0, d1, a, b, n, scale, avg, nt);
  else sum2_f32_c(d0, d1, a, b, n, scale, avg);
}
