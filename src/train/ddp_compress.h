/* ddp_compress.h - gradient compression of one DDP bucket: bf16 or f16 on the wire, or sign bits
 * with error feedback (1-bit SGD: each rank sends sign(g + residual) and one scale per
 * bucket, keeps what the signs lost in its residual, and adds it back next step). */
#ifndef CDDP_TRAIN_DDP_COMPRESS_H
#define CDDP_TRAIN_DDP_COMPRESS_H

#include <stddef.h>
#include <stdint.h>

/* 32-bit words one rank sends for a sign-compressed bucket of len floats: the scale, then
 * one bit per element. */
static inline size_t cddp__sign_words(size_t len) { return 1 + (len + 31) / 32; }

/* wire[i] = bf16(g[i]) for n elements. */
void cddp__to_bf16(uint16_t *wire, const float *g, size_t n);
/* g[i] = float(wire[i]). */
void cddp__from_bf16(float *g, const uint16_t *wire, size_t n);
/* wire[i] = f16(g[i] * scale): scaled in float32, rounded once (nearest even; past 65504: inf). */
void cddp__to_f16(uint16_t *wire, const float *g, size_t n, float scale);
/* g[i] = float(wire[i]). */
void cddp__from_f16(float *g, const uint16_t *wire, size_t n);

/* e = g + residual; out = [scale = mean |e|, sign bits of e]; residual = e - scale * sign(e). */
void cddp__sign_pack(uint32_t *out, const float *g, float *residual, size_t len);
/* g[i] = scale_r * sign_r(i) summed over the world ranks' packs (gathered one after the
 * other, cddp__sign_words(len) words each), in rank order (identical on every rank), times
 * post_scale. */
void cddp__sign_unpack_sum(float *g, const uint32_t *packs, int world, size_t len, float post_scale);

#endif /* CDDP_TRAIN_DDP_COMPRESS_H */
