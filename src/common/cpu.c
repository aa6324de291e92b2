/* cpu.c - this CPU's vector features, read once (cpu.h). */
#include "common/cpu.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>

static unsigned read_features(void) {
  unsigned f = 0, a, b, c, d;
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx")) f |= CDDP_CPU_AVX;
  if (__builtin_cpu_supports("avx2")) f |= CDDP_CPU_AVX2;
  if (__builtin_cpu_supports("fma")) f |= CDDP_CPU_FMA;
  /* F16C is CPUID.1:ECX bit 29: clang 14's __builtin_cpu_supports does not know "f16c"; its
   * instructions need the YMM state the AVX check covers */
  if ((f & CDDP_CPU_AVX) && __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C)) f |= CDDP_CPU_F16C;
  if (__builtin_cpu_supports("avx512f")) f |= CDDP_CPU_AVX512F;
  if (__builtin_cpu_supports("avx512bw")) f |= CDDP_CPU_AVX512BW;
  if (__builtin_cpu_supports("avx512vl")) f |= CDDP_CPU_AVX512VL;
  if (__builtin_cpu_supports("avx512dq")) f |= CDDP_CPU_AVX512DQ;
  if (__builtin_cpu_supports("avx512bf16")) f |= CDDP_CPU_AVX512BF16;
  return f;
}
#else
static unsigned read_features(void) { return 0; }
#endif

int cddp__cpu_has(unsigned mask) {
  /* threads that ask first may each read the CPU: they compute the same value, stored atomically */
  static unsigned features, known;
  if (!__atomic_load_n(&known, __ATOMIC_ACQUIRE)) {
    __atomic_store_n(&features, read_features(), __ATOMIC_RELAXED);
    __atomic_store_n(&known, 1, __ATOMIC_RELEASE);
  }
  return (__atomic_load_n(&features, __ATOMIC_RELAXED) & mask) == mask;
}
