#ifndef CDDP_COMMON_CPU_H
#define CDDP_COMMON_CPU_H
/* cpu.h - what this CPU can run: the one place the library and the trainer ask which vector
 * instructions a kernel may use. Read once (CPUID through the compiler); every answer is 0 on a
 * CPU that is not x86. */

enum {
  CDDP_CPU_AVX = 1u << 0,        /* also: the OS saves the YMM registers */
  CDDP_CPU_AVX2 = 1u << 1,
  CDDP_CPU_FMA = 1u << 2,
  CDDP_CPU_F16C = 1u << 3,
  CDDP_CPU_AVX512F = 1u << 4,
  CDDP_CPU_AVX512BW = 1u << 5,
  CDDP_CPU_AVX512VL = 1u << 6,
  CDDP_CPU_AVX512DQ = 1u << 7,
  CDDP_CPU_AVX512BF16 = 1u << 8,
};

/* 1 when the CPU has every feature in the mask (CDDP_CPU_* or'ed together), else 0. Cheap: the
 * features are read on the first call. */
int cddp__cpu_has(unsigned mask);

#endif
