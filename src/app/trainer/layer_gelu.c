/* layer_gelu.c - GELU, tanh approximation (GPT-2's; torch's approximate='tanh'), fused with
 * the bias of the linear layer before it. The loops (layer_gelu_body.h) are compiled for
 * AVX-512, AVX2 and plain SSE, and picked at run time by what the CPU has: the SSE build alone
 * cost 12% of a GPT step. */
#include <math.h>
#include <string.h>

#include "common/cpu.h"
#include "trainer/layers_gpt.h"
#include "trainer/vmath.h"

#define K0 0.7978845608028654f /* sqrt(2/pi) */
#define K1 0.044715f

static inline float gelu1(float x) {
  return 0.5f * x * (1.0f + tanhf(K0 * (x + K1 * x * x * x)));
}
static inline float gelu1_grad(float x) {
  float t = tanhf(K0 * (x + K1 * x * x * x));
  return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * K0 * (1.0f + 3.0f * K1 * x * x);
}

#define VBODY "trainer/layer_gelu_body.h"
#include "trainer/vwidths.h"

static int forced = 3;

int cddp__cpu_isa(void) {
  static int level = -1;
  if (level < 0) {
    level = cddp__cpu_has(CDDP_CPU_AVX512F) ? 2 : cddp__cpu_has(CDDP_CPU_AVX2 | CDDP_CPU_FMA) ? 1 : 0;
  }
  return level < forced ? level : forced;
}

void cddp__cpu_isa_limit(int level) { forced = level; }

void cddp__bias_gelu_forward(float *y, float *x, const float *b, int n, int c) {
  switch (cddp__cpu_isa()) {
    case 2: bias_gelu_rows_avx512(y, x, b, n, c); break;
    case 1: bias_gelu_rows_avx2(y, x, b, n, c); break;
    default: bias_gelu_rows_sse(y, x, b, n, c); break;
  }
}

void cddp__gelu_backward(float *d, const float *x, size_t count) {
  switch (cddp__cpu_isa()) {
    case 2: gelu_backward_avx512(d, x, count); break;
    case 1: gelu_backward_avx2(d, x, count); break;
    default: gelu_backward_sse(d, x, count); break;
  }
}
