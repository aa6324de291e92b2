/* gemm_bf16_fma.c - the bf16 product's kernels for CPUs without AVX512-BF16: bf16 inputs
 * widened to fp32 and summed with fp32 FMA, under the contract of gemm_bf16_kern.h, so they
 * give the bits of VDPBF16PS. One body (gemm_bf16_fma_body.h) at three widths: AVX-512F,
 * AVX2 + FMA, and SSE2, which every x86-64 has (multiply then add: the products are exact). */
#include <immintrin.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/cpu.h"
#include "trainer/gemm_bf16_kern.h"

#define MC 96 /* rows of A packed at once: a multiple of every width's MR (12 and 6) */

/* x rounded to bf16, to nearest even (VCVTNEPS2BF16), as an fp32; a NaN stays a (quiet) NaN. */
static inline float bf16_round(float x) {
  uint32_t u;
  memcpy(&u, &x, 4);
  u = (u & 0x7fffffffu) > 0x7f800000u ? (u | 0x00400000u) & 0xffff0000u
                                      : (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
  memcpy(&x, &u, 4);
  return x;
}

#define VBODY "trainer/gemm_bf16_fma_body.h"
#include "trainer/vwidths.h"

const cddp__bf16_kernel_t cddp__bf16_fma_avx512 = {"avx512", CDDP_CPU_AVX512F, MC, 32, region_avx512};
const cddp__bf16_kernel_t cddp__bf16_fma_avx2 = {"avx2", CDDP_CPU_AVX2 | CDDP_CPU_FMA, MC, 16, region_avx2};
const cddp__bf16_kernel_t cddp__bf16_fma_sse2 = {"sse2", 0, MC, 8, region_sse};
