/* ddp_compress.h - gradient compression of one DDP bucket: bf16 or f16 on the wire, or sign bits
 * with error feedback (1-bit SGD: each rank sends sign(g + residual) and one scale per
 * chunk of CDDP_SIGN_CHUNK elements, keeps what the signs lost in its residual, and adds it
 * back next step). */
#ifndef CDDP_DDP_COMPRESS_H
#define CDDP_DDP_COMPRESS_H

#include <stddef.h>
#include <stdint.h>

#include "cddp/ddp.h"

/* Sign compression keeps one scale per chunk of this many elements (a multiple of 32): one
 * scale per 4 MiB bucket let the large gradients of some tensors set the step of every other
 * element of the bucket (GPT on KJV, 150 steps: validation loss 3.18 against fp32's 2.19;
 * per 128 elements: 2.32; per 32: 2.33). 1.25 bits per element: 25.6x fewer bytes. */
#define CDDP_SIGN_CHUNK 128
/* Chunks of a sign-compressed bucket of len floats. */
static inline size_t cddp__sign_chunks(size_t len) { return (len + CDDP_SIGN_CHUNK - 1) / CDDP_SIGN_CHUNK; }
/* 32-bit words one rank sends for a sign-compressed bucket of len floats: one scale per
 * chunk, then one bit per element. */
static inline size_t cddp__sign_words(size_t len) { return cddp__sign_chunks(len) + (len + 31) / 32; }

/* wire[i] = bf16(g[i]) for n elements. */
void cddp__to_bf16(uint16_t *wire, const float *g, size_t n);
/* g[i] = float(wire[i]). */
void cddp__from_bf16(float *g, const uint16_t *wire, size_t n);
/* wire[i] = f16(g[i] * scale): scaled in float32, rounded once (nearest even; past 65504: inf). */
void cddp__to_f16(uint16_t *wire, const float *g, size_t n, float scale);
/* g[i] = float(wire[i]). */
void cddp__from_f16(float *g, const uint16_t *wire, size_t n);

/* e = g + residual; out = [scale of each chunk = its mean |e|, sign bits of e];
 * residual = e - scale * sign(e). */
void cddp__sign_pack(uint32_t *out, const float *g, float *residual, size_t len);
/* g[i] = scale_r * sign_r(i) summed over the world ranks' packs (gathered one after the
 * other, cddp__sign_words(len) words each), in rank order (identical on every rank), times
 * post_scale. */
void cddp__sign_unpack_sum(float *g, const uint32_t *packs, int world, size_t len, float post_scale);

/* m = beta1 m + (1 - beta1) gscale g; v = beta2 v + (1 - beta2) (gscale g)^2: one rank's own Adam
 * moments under sign-Adam. */
void cddp__adam_moments(float *m, float *v, const float *g, size_t n, float beta1, float beta2, float gscale);
/* wire[i] = bf16(g[i] * scale). */
void cddp__to_bf16_scaled(uint16_t *wire, const float *g, size_t n, float scale);

/* Sign-Adam (ddp.sign_adam, docs/train.md), after cddp_ddp_set_compress(SIGN): each rank keeps
 * Adam's moments of its OWN uncompressed gradient (mloc, vloc; beta1, beta2) and sends
 * sign(mloc + residual) instead of the gradient's signs, so cddp_ddp_grads then holds the world's
 * mean momentum (the optimizer must take it as m: cddp_optim_t.m_external). On the first step
 * and every `every`-th after it, v_shared (the optimizer's v; cddp_optim_t.v_external) becomes
 * the world's mean bias-corrected vloc, bf16 on the wire, counted in the stats. opt_t: the
 * optimizer's step count, read at each finish. vloc and mloc are per-rank state: they lie after
 * the residual in cddp_ddp_residual's buffer, cddp__ddp_residual_len floats (n, or 3n). */
cddp_result_t cddp__ddp_set_sign_adam(cddp_ddp_t *d, int every, float beta1, float beta2, float *v_shared,
                                      const int64_t *opt_t);
size_t cddp__ddp_residual_len(const cddp_ddp_t *d);

#endif /* CDDP_DDP_COMPRESS_H */
