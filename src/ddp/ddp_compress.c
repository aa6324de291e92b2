/* ddp_compress.c - the per-bucket compression kernels of DDP (see ddp_compress.h). */
#include <math.h>
#include <string.h>

#include "comm/reduce.h"
#include "ddp/ddp_compress.h"

void cddp__to_bf16(uint16_t *wire, const float *g, size_t n) { cddp__f32_to_bf16_n(wire, g, n); }

void cddp__from_bf16(float *g, const uint16_t *wire, size_t n) { cddp__bf16_to_f32_n(g, wire, n); }

void cddp__to_f16(uint16_t *wire, const float *g, size_t n, float scale) {
  if (scale == 1.0f) return cddp__f32_to_f16_n(wire, g, n);
  float tmp[1024];
  for (size_t b = 0; b < n; b += 1024) {
    size_t m = n - b < 1024 ? n - b : 1024;
    for (size_t i = 0; i < m; i++) tmp[i] = g[b + i] * scale;
    cddp__f32_to_f16_n(wire + b, tmp, m);
  }
}

void cddp__from_f16(float *g, const uint16_t *wire, size_t n) { cddp__f16_to_f32_n(g, wire, n); }

/* Sign compression with one scale per chunk of CDDP_SIGN_CHUNK elements (see the header). */

/* out = [scales of the chunks][sign bits]; the scale of a chunk is the mean |e| over it, which
 * is the s minimising |e - s sign(e)|^2 there. */
void cddp__sign_pack(uint32_t *out, const float *g, float *residual, size_t len) {
  size_t nc = cddp__sign_chunks(len);
  uint32_t *bits = out + nc;
  for (size_t c = 0; c < nc; c++) {
    size_t lo = c * CDDP_SIGN_CHUNK, hi = lo + CDDP_SIGN_CHUNK < len ? lo + CDDP_SIGN_CHUNK : len;
    float abs_sum = 0;
    for (size_t i = lo; i < hi; i++) {
      float e = g[i] + residual[i];
      residual[i] = e; /* holds e until the scale is known */
      abs_sum += fabsf(e);
    }
    float scale = abs_sum / (float)(hi - lo);
    memcpy(&out[c], &scale, sizeof scale);
    for (size_t w = lo / 32; w < (hi + 31) / 32; w++) {
      uint32_t word = 0;
      size_t base = w * 32, end = base + 32 < hi ? base + 32 : hi;
      for (size_t i = base; i < end; i++) {
        float e = residual[i];
        uint32_t pos = e >= 0.0f;
        word |= pos << (i - base);
        residual[i] = e - (pos ? scale : -scale);
      }
      bits[w] = word;
    }
  }
}

void cddp__sign_unpack_sum(float *g, const uint32_t *packs, int world, size_t len, float post_scale) {
  size_t words = cddp__sign_words(len), nc = cddp__sign_chunks(len);
  memset(g, 0, len * sizeof *g);
  for (int r = 0; r < world; r++) {
    const uint32_t *p = packs + (size_t)r * words, *bits = p + nc;
    for (size_t c = 0; c < nc; c++) {
      size_t lo = c * CDDP_SIGN_CHUNK, hi = lo + CDDP_SIGN_CHUNK < len ? lo + CDDP_SIGN_CHUNK : len;
      float scale;
      memcpy(&scale, &p[c], sizeof scale);
      for (size_t i = lo; i < hi; i++) g[i] += (bits[i / 32] >> (i % 32)) & 1u ? scale : -scale;
    }
  }
  if (post_scale != 1.0f)
    for (size_t i = 0; i < len; i++) g[i] *= post_scale;
}

void cddp__adam_moments(float *m, float *v, const float *g, size_t n, float beta1, float beta2, float gscale) {
  const float c1 = (1.0f - beta1) * gscale, c2 = (1.0f - beta2) * gscale * gscale;
  for (size_t i = 0; i < n; i++) {
    m[i] = beta1 * m[i] + c1 * g[i];
    v[i] = beta2 * v[i] + c2 * g[i] * g[i];
  }
}

void cddp__to_bf16_scaled(uint16_t *wire, const float *g, size_t n, float scale) {
  float tmp[1024];
  for (size_t b = 0; b < n; b += 1024) {
    size_t m = n - b < 1024 ? n - b : 1024;
    for (size_t i = 0; i < m; i++) tmp[i] = g[b + i] * scale;
    cddp__f32_to_bf16_n(wire + b, tmp, m);
  }
}
