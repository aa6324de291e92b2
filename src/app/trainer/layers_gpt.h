/* layers_gpt.h - the GPT's layers (gpt.c) as plain functions over flat float buffers, row-major
 * [rows, features] as PyTorch: LayerNorm, tanh GELU, causal multi-head self-attention, token +
 * position embeddings with the tied output head, and a softmax cross-entropy in place. The
 * linear layers are layers.h's. */
#ifndef CDDP_TRAINER_LAYERS_GPT_H
#define CDDP_TRAINER_LAYERS_GPT_H

#include <stddef.h>
#include <stdint.h>

#define CDDP_LN_EPS 1e-5f

/* The vector loops of GELU and the attention softmax exist for AVX-512 (2), AVX2+FMA (1) and
 * SSE (0); cddp__cpu_isa() says which this CPU runs (layer_gelu.c), cddp__cpu_isa_limit(l)
 * caps it at l (tests run every width; not thread-safe, call it before any model work). */
int cddp__cpu_isa(void);
void cddp__cpu_isa_limit(int level);

/* ---- LayerNorm (layer_norm.c) over the last dimension c of x [n, c] (biased variance, eps
 * 1e-5, as nn.LayerNorm). mean and rstd [n] are kept for backward. */
void cddp__layernorm_forward(float *y, float *mean, float *rstd, const float *x, const float *w,
                             const float *b, int n, int c);
/* dx [n,c] += the input gradient (the residual stream accumulates it); dw, db [c] (+)= the
 * parameter gradients (accumulate=0 overwrites). */
void cddp__layernorm_backward(float *dx, float *dw, float *db, const float *dy, const float *x,
                              const float *w, const float *mean, const float *rstd, int n, int c,
                              int accumulate);

/* acc [c] (+)= the column sums of x [n, c] (a linear layer's bias gradient); accumulate=0
 * overwrites. Vector loops as above (layers.h's cddp__sum_rows is SSE only). */
void cddp__colsum(float *acc, const float *x, int n, int c, int accumulate);

/* ---- GELU, tanh approximation (layer_gelu.c), as torch's F.gelu(approximate='tanh'):
 * y = x/2 (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))). */
/* x [n,c] += b (a linear layer's bias; b may be NULL), then y = gelu(x): x keeps the
 * pre-activation. */
void cddp__bias_gelu_forward(float *y, float *x, const float *b, int n, int c);
/* d [count] *= gelu'(x), in place. */
void cddp__gelu_backward(float *d, const float *x, size_t count);

/* ---- causal self-attention (layer_attn.c). qkv [B, T, 3C] is c_attn's output, q | k | v
 * along the last dimension, each [T, n_head, hs] (hs = C / n_head), as nanoGPT splits it.
 * y [B, T, C]: the heads' outputs side by side. att [B, n_head, T, T] keeps the softmax
 * probabilities (zero above the diagonal) for backward. */
void cddp__attn_forward(float *y, float *att, const float *qkv, int B, int T, int C, int n_head);
/* dqkv [B,T,3C] = the gradient of qkv (overwritten) from dy [B,T,C]. scratch: T*T floats. */
void cddp__attn_backward(float *dqkv, const float *dy, const float *qkv, const float *att,
                         float *scratch, int B, int T, int C, int n_head);

/* The fused form (layer_attn_flash.c, the reference of the CUDA kernel in cuda/k_flash.cu): the
 * same y without the T x T scores, each row's softmax taken online over its keys, plus each
 * row's log-sum-exp lse [B, n_head, T] (what a fused backward recomputes P from). _bf16: qkv
 * as bf16 bits (uint16_t), every product and sum in float32. */
void cddp__attn_flash_forward(float *y, float *lse, const float *qkv, int B, int T, int C, int n_head);
void cddp__attn_flash_forward_bf16(float *y, float *lse, const uint16_t *qkv, int B, int T, int C, int n_head);
/* Its backward: dqkv [B,T,3C] = the gradient of qkv (overwritten) from dy [B,T,C], the
 * forward's y and lse, each probability recomputed from lse (no scratch, no T x T). */
void cddp__attn_flash_backward(float *dqkv, const float *dy, const float *qkv, const float *y, const float *lse,
                               int B, int T, int C, int n_head);
/* The same with the operands of its products in bf16 where a tensor-core kernel (cuda/k_flash_tc.cu)
 * takes them: q, k, v and dy rounded to bf16 (nearest even), each probability p and each
 * ds = p (dp - D) rounded to bf16 before it multiplies, every sum in float32, D = dy . y in
 * float32, the softmax scale applied to s after its sum and to dq, dk at the end. Heads whose
 * width cddp__attn_bf16_bwd_ok refuses take the float32 backward (as the kernel does). */
void cddp__attn_flash_backward_bf16(float *dqkv, const float *dy, const float *qkv, const float *y, const float *lse,
                                    int B, int T, int C, int n_head);
/* The forward on tensor cores (cuda/k_flash_tc.cu), its reference: q, k, v rounded to bf16, s =
 * q k^T summed in float32 then scaled, the online softmax over tiles of 16 keys (each tile's
 * probabilities taken against the running maximum after it, their sum in float32), each
 * probability rounded to bf16 before it multiplies v, y = o / l and lse = m + log l. Widths
 * cddp__attn_bf16_bwd_ok refuses take the float32 forward. */
void cddp__attn_flash_forward_tc(float *y, float *lse, const float *qkv, int B, int T, int C, int n_head);
/* Head widths the tensor-core kernels take: 16-row tiles, up to 128 (GPT-2's heads are 64). */
static inline int cddp__attn_bf16_bwd_ok(int hs) { return hs > 0 && hs % 16 == 0 && hs <= 128; }

/* ---- embeddings and the tied head (layer_embed.c): wte [V, C], wpe [context, C]. */
/* x [B,T,C] = wte[tok[b,t]] + wpe[t]. Tokens must be < V (the caller checks). */
void cddp__embed_forward(float *x, const uint8_t *tok, const float *wte, const float *wpe, int B,
                         int T, int C);
/* dwte[tok] += dx rows (always adds: the head wrote dwte first); dwpe [T,C] (+)= the sum over b. */
void cddp__embed_backward(float *dwte, float *dwpe, const float *dx, const uint8_t *tok, int B,
                          int T, int C, int accumulate);
/* logits [n, V] = h [n, C] wte^T */
void cddp__head_forward(float *logits, const float *h, const float *wte, int n, int C, int V);
/* dh [n,C] = dlogits wte; dwte [V,C] (+)= dlogits^T h. */
void cddp__head_backward(float *dh, float *dwte, const float *dlogits, const float *h,
                         const float *wte, int n, int C, int V, int accumulate);

/* ---- softmax cross-entropy (layer_embed.c): prob [n,V] = softmax of the logits z [n,V]
 * (prob may equal z); returns the SUM of -log p[y] (NAN for a target >= V). The backward is
 * layers.h's cddp__xent_backward. */
double cddp__softmax_xent(float *prob, const float *z, const uint8_t *y, int n, int V);

#endif /* CDDP_TRAINER_LAYERS_GPT_H */
