/* gpt.h - a byte-level GPT (GPT-2's pre-norm block) as plain functions over one flat parameter
 * buffer and one flat gradient buffer, like model.h: token + position embeddings, n_layer
 * blocks x + attn(ln_1(x)), x + mlp(ln_2(x)) (mlp = c_fc 4d -> GELU(tanh) -> c_proj), a final
 * LayerNorm, the output head tied to the token embedding, cross-entropy over the vocabulary.
 * Parameters lie in forward order (wte first), so backward finishes the buffer from its end;
 * the tied wte at offset 0 is finished last. docs/gpt.md has the layout, names and init. */
#ifndef CDDP_TRAINER_GPT_H
#define CDDP_TRAINER_GPT_H

#include <stddef.h>
#include <stdint.h>

#include "cddp/cddp.h"
#include "trainer/model.h" /* cddp_param_info_t, cddp_grad_ready_fn */

#define CDDP_GPT_VOCAB 256 /* bytes */

/* model.recompute: none keeps every block's activations for backward; attn keeps one
 * [B, n_head, T, T] buffer of attention probabilities for all blocks and rebuilds each block's
 * in backward; block keeps only each block's input and output and reruns the whole block's
 * forward in backward. Gradients are bitwise those of none (the same calls on the same
 * inputs). */
typedef enum cddp_gpt_recompute {
  CDDP_GPT_RECOMPUTE_NONE = 0,
  CDDP_GPT_RECOMPUTE_ATTN = 1,
  CDDP_GPT_RECOMPUTE_BLOCK = 2
} cddp_gpt_recompute_t;

/* model.attention: materialised keeps the [B, n_head, T, T] probabilities (layer_attn.c: the
 * CPU's fastest); fused keeps each row's log-sum-exp [B, n_head, T] and recomputes the
 * probabilities in backward (FlashAttention: layer_attn_flash.c, cuda/k_flash.cu), the same
 * function with its sums in another order, so not the same bits; auto takes the device table's
 * choice (cddp_ops_t.attn_fused: the CPU materialised, CUDA and the emulated device fused). */
typedef enum cddp_gpt_attention {
  CDDP_GPT_ATTN_AUTO = 0,
  CDDP_GPT_ATTN_MATERIALISED = 1,
  CDDP_GPT_ATTN_FUSED = 2
} cddp_gpt_attention_t;

typedef struct cddp_gpt_spec {
  int n_layer;  /* blocks, 1..64 */
  int n_head;   /* heads; must divide d_model */
  int d_model;  /* embedding width C */
  int context;  /* T: the longest sequence (positions of wpe) */
  int vocab;    /* 2..256; tokens are bytes < vocab (256 for the byte-level model) */
  int recompute; /* cddp_gpt_recompute_t: what backward rebuilds instead of forward keeping it */
  int attention; /* cddp_gpt_attention_t */
} cddp_gpt_spec_t;

typedef struct cddp_gpt cddp_gpt_t;

/* Validates the spec (one cddp__fail line naming the bad field) and sizes the activations for
 * up to max_batch sequences of context tokens. */
cddp_result_t cddp__gpt_create(const cddp_gpt_spec_t *spec, int max_batch, cddp_gpt_t **out);
/* The same on the device of ops (cddp__ops_for): activations, tokens and targets in its memory,
 * every layer through it; the buffers bound must be its memory too (the tokens and targets
 * given to forward stay host memory: forward copies them). */
struct cddp_ops;
cddp_result_t cddp__gpt_create_on(const struct cddp_ops *ops, const cddp_gpt_spec_t *spec, int max_batch,
                                  cddp_gpt_t **out);
const struct cddp_ops *cddp__gpt_ops(const cddp_gpt_t *m);
/* 1 when the model's attention is the fused one (model.attention, auto resolved), else 0. */
int cddp__gpt_attention_fused(const cddp_gpt_t *m);
void cddp__gpt_destroy(cddp_gpt_t *m);
const cddp_gpt_spec_t *cddp__gpt_spec(const cddp_gpt_t *m);
size_t cddp__gpt_param_count(const cddp_gpt_t *m);
int cddp__gpt_n_params(const cddp_gpt_t *m); /* number of tensors */
const cddp_param_info_t *cddp__gpt_param(const cddp_gpt_t *m, int i);
/* Bytes of the activation buffers (forward's and backward's), as model.recompute sized them. */
size_t cddp__gpt_activation_bytes(const cddp_gpt_t *m);
/* GEMM FLOPs of one token's forward + backward at T = context (attention counted over the
 * full T x T, as computed). */
double cddp__gpt_flops_per_token(const cddp_gpt_t *m);

/* The model computes over buffers the caller owns. */
void cddp__gpt_bind(cddp_gpt_t *m, float *params, float *grads);
/* GPT-2's init from a deterministic generator (splitmix64 + Box-Muller) seeded by seed: every
 * weight ~ N(0, 0.02) (wte, wpe, c_attn, c_fc), the residual projections (attn.c_proj,
 * mlp.c_proj) ~ N(0, 0.02 / sqrt(2 n_layer)), biases 0, LayerNorm weight 1 and bias 0. */
void cddp__gpt_init_params(cddp_gpt_t *m, uint64_t seed);

/* Forward of B sequences of T tokens (tokens [B,T] row-major, T <= context, B <= max_batch;
 * both are copied). With targets [B,T] returns the SUM over the B*T positions of
 * -log softmax(logits)[target] (the caller divides by the token count); a target >= vocab gives
 * NAN. targets may be NULL (returns 0): only the logits are computed. B may be 0. A bad B, T
 * or token (>= vocab) logs a warning and returns NAN. */
double cddp__gpt_forward(cddp_gpt_t *m, const uint8_t *tokens, const uint8_t *targets, int B,
                        int T);
/* The same for the trainer's double-buffered input slots (0 or 1): tokens and targets are
 * host_alloc memory, copied on the copy stream into the slot's device buffers while the
 * device may still run the last micro-step's backward; the compute stream waits on the copy's
 * event. The host may rewrite the slot's memory once a later forward has returned. */
double cddp__gpt_forward_slot(cddp_gpt_t *m, int slot, const uint8_t *tokens, const uint8_t *targets, int B,
                              int T);
/* The logits [B, T, vocab] of the last forward (valid until the next backward), in the
 * device's memory. */
const float *cddp__gpt_logits(const cddp_gpt_t *m);
/* Backward of the last forward (which must have had targets): grads (+)= grad_scale *
 * d(sum loss)/d(params); accumulate=0 overwrites, 1 adds. ready (may be NULL) is called each
 * time grads[offset, param_count) is final, offsets strictly decreasing, the last call 0. */
void cddp__gpt_backward(cddp_gpt_t *m, float grad_scale, int accumulate, cddp_grad_ready_fn ready,
                       void *ready_ctx);

#endif /* CDDP_TRAINER_GPT_H */
