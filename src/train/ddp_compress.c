/* ddp_compress.c - the per-bucket compression kernels of DDP (see ddp_compress.h). */
#include <math.h>
#include <string.h>

#include "comm/reduce.h"
#include "train/ddp_compress.h"

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

void cddp__sign_pack(uint32_t *out, const float *g, float *residual, size_t len) {
  double abs_sum = 0;
  for (size_t i = 0; i < len; i++) {
    float e = g[i] + residual[i];
    residual[i] = e; /* holds e until the scale is known */
    abs_sum += fabsf(e);
  }
  float scale = len ? (float)(abs_sum / (double)len) : 0.0f;
  memcpy(&out[0], &scale, sizeof scale);
  uint32_t *bits = out + 1;
  for (size_t w = 0; w < (len + 31) / 32; w++) {
    uint32_t word = 0;
    size_t base = w * 32, end = base + 32 < len ? base + 32 : len;
    for (size_t i = base; i < end; i++) {
      float e = residual[i];
      uint32_t pos = e >= 0.0f;
      word |= pos << (i - base);
      residual[i] = e - (pos ? scale : -scale);
    }
    bits[w] = word;
  }
}

void cddp__sign_unpack_sum(float *g, const uint32_t *packs, int world, size_t len, float post_scale) {
  size_t words = cddp__sign_words(len);
  memset(g, 0, len * sizeof *g);
  for (int r = 0; r < world; r++) {
    const uint32_t *p = packs + (size_t)r * words;
    float scale;
    memcpy(&scale, &p[0], sizeof scale);
    for (size_t i = 0; i < len; i++) g[i] += (p[1 + i / 32] >> (i % 32)) & 1u ? scale : -scale;
  }
  if (post_scale != 1.0f)
    for (size_t i = 0; i < len; i++) g[i] *= post_scale;
}
