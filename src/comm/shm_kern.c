/* shm_kern.c - copy kernels for the shm transport (non-temporal stores for huge messages). */
#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#include "comm/shm.h"

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

void cddp__shm_copy_demote(void *dst_, const void *src_, size_t bytes) {
  char *dst = dst_;
  const char *src = src_;
  for (size_t off = 0; off < bytes; off += 4096) { /* demote while the block is fresh */
    size_t n = bytes - off < 4096 ? bytes - off : 4096;
    memcpy(dst + off, src + off, n);
    cddp__shm_demote(dst + off, n);
  }
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
  if (__builtin_cpu_supports("avx512f")) stream512(dst + head, src + head, bytes - head);
  else if (__builtin_cpu_supports("avx2")) stream256(dst + head, src + head, bytes - head);
  else memcpy(dst + head, src + head, bytes - head);
}
