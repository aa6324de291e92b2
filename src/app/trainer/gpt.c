/* gpt.c - the byte-level GPT over one flat parameter buffer: spec checks, layout and names
 * (nanoGPT's), GPT-2 init, forward, and a backward that reports finished gradients to DDP.
 * Every buffer and every layer call goes through one device table (ops.h), as model.c's. */
#include "trainer/gpt.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/check.h"
#include "common/log.h"
#include "trainer/gemm.h"
#include "trainer/layers.h"
#include "trainer/ops.h"

#define MAX_LAYER 64
#define MAX_ACT_BYTES ((double)(64ull << 30))
#define MAX_PARAMS ((size_t)1 << 31)

/* Offsets (in floats) of one block's parameters, in buffer order. */
typedef struct block_p {
  size_t ln1_w, ln1_b, attn_w, attn_b, aproj_w, aproj_b, ln2_w, ln2_b, fc_w, fc_b, mproj_w,
      mproj_b;
} block_p_t;

/* One block's activations, [rows, width] with rows = B*T. */
typedef struct block_a {
  float *ln1, *mean1, *rstd1; /* ln_1 output, its row statistics */
  float *qkv;                 /* c_attn output [rows, 3C] */
  float *att;                 /* softmax probabilities [B, n_head, T, T]; fused: lse [B, n_head, T] */
  float *y;                   /* attention output (c_proj's input) [rows, C] */
  float *res1;                /* x + attn(ln_1(x)) */
  float *ln2, *mean2, *rstd2;
  float *fc;                  /* c_fc output + bias (GELU's input) [rows, 4C] */
  float *gelu;                /* [rows, 4C] */
  float *res2;                /* the block's output */
} block_a_t;

struct cddp_gpt {
  const cddp_ops_t *ops; /* the device: params, grads, the arena, tok and tgt are its memory */
  cddp_gpt_spec_t spec;
  int fused; /* the attention keeps lse, not the probabilities (model.attention resolved) */
  int max_batch;
  size_t wte, wpe, lnf_w, lnf_b;
  block_p_t bp[MAX_LAYER];
  block_a_t ba[MAX_LAYER];
  int n_params;
  cddp_param_info_t *info;
  size_t param_count;
  float *params, *grads;
  float *arena;
  size_t arena_floats;
  float *x0;                    /* embeddings [rows, C] */
  float *lnf, *meanf, *rstdf;   /* final LayerNorm */
  float *logits, *prob;         /* [rows, V] */
  float *dres, *dsmall, *dbig;  /* gradient scratch: [rows, C], [rows, C], [rows, 4C] */
  float *scratch;               /* [T, T] of attention backward (none when fused) */
  uint8_t *tok, *tgt;           /* [rows] the last forward's input: own, or one of the slots' */
  uint8_t *own_tok, *own_tgt;   /* [rows] cddp__gpt_forward's copies (eval, sampling) */
  uint8_t *slot_tok[2], *slot_tgt[2]; /* [rows] cddp__gpt_forward_slot's, copied on the copy stream */
  void *copied[2];              /* the event recorded after a slot's copy */
  int B, T, have_targets;
};

static cddp_result_t check_range(const char *field, long long v, long long lo, long long hi) {
  if (v < lo || v > hi)
    return cddp__fail(CDDP_INVALID_ARG, "gpt spec: %s = %lld (must be %lld..%lld)", field, v, lo,
                      hi);
  return CDDP_OK;
}

static cddp_result_t check_spec(const cddp_gpt_spec_t *s, int max_batch) {
  CDDP_CHECK(check_range("n_layer", s->n_layer, 1, MAX_LAYER));
  CDDP_CHECK(check_range("d_model", s->d_model, 1, 1 << 16));
  CDDP_CHECK(check_range("n_head", s->n_head, 1, s->d_model));
  if (s->d_model % s->n_head != 0)
    return cddp__fail(CDDP_INVALID_ARG,
                      "gpt spec: d_model = %d is not a multiple of n_head = %d", s->d_model,
                      s->n_head);
  CDDP_CHECK(check_range("context", s->context, 1, 1 << 16));
  CDDP_CHECK(check_range("vocab", s->vocab, 2, CDDP_GPT_VOCAB));
  CDDP_CHECK(check_range("recompute", s->recompute, CDDP_GPT_RECOMPUTE_NONE,
                         CDDP_GPT_RECOMPUTE_BLOCK));
  CDDP_CHECK(check_range("attention", s->attention, CDDP_GPT_ATTN_AUTO, CDDP_GPT_ATTN_FUSED));
  CDDP_CHECK(check_range("max_batch", max_batch, 1, 1 << 20));
  double C = s->d_model, rows = (double)max_batch * s->context;
  double params = s->vocab * C + s->context * C + s->n_layer * (12.0 * C * C + 13.0 * C) + 2 * C;
  if (params > (double)MAX_PARAMS)
    return cddp__fail(CDDP_INVALID_ARG, "gpt spec: %.0f parameters (more than 2^31)", params);
  double act = 4.0 * (rows * (s->n_layer * 16.0 * C + 11.0 * C + 2.0 * s->vocab) +
                      (double)max_batch * s->n_layer * s->n_head * (double)s->context * s->context);
  if (act > MAX_ACT_BYTES)
    return cddp__fail(CDDP_INVALID_ARG,
                      "gpt spec: activations of max_batch = %d x context = %d need %.1f GiB "
                      "(more than 64)",
                      max_batch, s->context, act / (1 << 30));
  return CDDP_OK;
}

static size_t add_param(cddp_gpt_t *m, const char *name, int ndim, int64_t d0, int64_t d1) {
  cddp_param_info_t *p = &m->info[m->n_params++];
  snprintf(p->name, sizeof p->name, "%s", name);
  p->ndim = ndim;
  p->shape[0] = d0, p->shape[1] = d1;
  p->count = (size_t)d0 * (size_t)(ndim == 2 ? d1 : 1);
  p->offset = m->param_count;
  m->param_count += p->count;
  return p->offset;
}

static void plan_params(cddp_gpt_t *m) {
  const cddp_gpt_spec_t *s = &m->spec;
  int64_t C = s->d_model;
  char n[48];
  m->wte = add_param(m, "wte.weight", 2, s->vocab, C);
  m->wpe = add_param(m, "wpe.weight", 2, s->context, C);
  for (int l = 0; l < s->n_layer; l++) {
    block_p_t *b = &m->bp[l];
#define P(field, what, ndim, d0, d1)                   \
  snprintf(n, sizeof n, "h.%d.%s", l, what);          \
  b->field = add_param(m, n, ndim, d0, d1)
    P(ln1_w, "ln_1.weight", 1, C, 0);
    P(ln1_b, "ln_1.bias", 1, C, 0);
    P(attn_w, "attn.c_attn.weight", 2, 3 * C, C);
    P(attn_b, "attn.c_attn.bias", 1, 3 * C, 0);
    P(aproj_w, "attn.c_proj.weight", 2, C, C);
    P(aproj_b, "attn.c_proj.bias", 1, C, 0);
    P(ln2_w, "ln_2.weight", 1, C, 0);
    P(ln2_b, "ln_2.bias", 1, C, 0);
    P(fc_w, "mlp.c_fc.weight", 2, 4 * C, C);
    P(fc_b, "mlp.c_fc.bias", 1, 4 * C, 0);
    P(mproj_w, "mlp.c_proj.weight", 2, C, 4 * C);
    P(mproj_b, "mlp.c_proj.bias", 1, C, 0);
#undef P
  }
  m->lnf_w = add_param(m, "ln_f.weight", 1, C, 0);
  m->lnf_b = add_param(m, "ln_f.bias", 1, C, 0);
}

/* Carves the activations out of one 64-byte aligned arena: pass 0 counts, pass 1 assigns. */
static float *carve(float **cursor, size_t count) {
  float *p = *cursor;
  *cursor += (count + 15) & ~(size_t)15;
  return p;
}

/* Under model.recompute the blocks share what backward rebuilds: attn, one att for all blocks;
 * block, one set of everything but res2 (each block's output, the next one's input). */
static void plan_acts(cddp_gpt_t *m, float *base, size_t *total) {
  const cddp_gpt_spec_t *s = &m->spec;
  size_t C = (size_t)s->d_model, rows = (size_t)m->max_batch * s->context, V = (size_t)s->vocab;
  size_t att = (size_t)m->max_batch * s->n_head * s->context * (m->fused ? 1 : (size_t)s->context);
  float *cur = base;
  for (int l = 0; l < s->n_layer; l++) {
    block_a_t *a = &m->ba[l];
    if (l > 0 && s->recompute == CDDP_GPT_RECOMPUTE_BLOCK) {
      *a = m->ba[0];
      a->res2 = carve(&cur, rows * C);
      continue;
    }
    a->ln1 = carve(&cur, rows * C), a->mean1 = carve(&cur, rows), a->rstd1 = carve(&cur, rows);
    a->qkv = carve(&cur, rows * 3 * C);
    a->att = l > 0 && s->recompute == CDDP_GPT_RECOMPUTE_ATTN ? m->ba[0].att : carve(&cur, att);
    a->y = carve(&cur, rows * C), a->res1 = carve(&cur, rows * C);
    a->ln2 = carve(&cur, rows * C), a->mean2 = carve(&cur, rows), a->rstd2 = carve(&cur, rows);
    a->fc = carve(&cur, rows * 4 * C), a->gelu = carve(&cur, rows * 4 * C);
    a->res2 = carve(&cur, rows * C);
  }
  m->x0 = carve(&cur, rows * C);
  m->lnf = carve(&cur, rows * C), m->meanf = carve(&cur, rows), m->rstdf = carve(&cur, rows);
  m->logits = carve(&cur, rows * V), m->prob = carve(&cur, rows * V);
  m->dres = carve(&cur, rows * C), m->dsmall = carve(&cur, rows * C);
  m->dbig = carve(&cur, rows * 4 * C);
  m->scratch = m->fused ? NULL : carve(&cur, (size_t)s->context * s->context);
  *total = (size_t)(cur - base);
}

cddp_result_t cddp__gpt_create(const cddp_gpt_spec_t *spec, int max_batch, cddp_gpt_t **out) {
  return cddp__gpt_create_on(&cddp__ops_cpu, spec, max_batch, out);
}

cddp_result_t cddp__gpt_create_on(const cddp_ops_t *ops, const cddp_gpt_spec_t *spec, int max_batch,
                                  cddp_gpt_t **out) {
  if (out) *out = NULL;
  if (!spec || !out) return cddp__fail(CDDP_INVALID_ARG, "gpt create: NULL spec or out");
  CDDP_CHECK(check_spec(spec, max_batch));
  if (ops == &cddp__ops_cpu) cddp__blas_select_core();
  cddp_gpt_t *m = calloc(1, sizeof *m);
  if (!m) return cddp__fail(CDDP_SYSTEM, "gpt create: model struct");
  m->ops = ops, m->spec = *spec, m->max_batch = max_batch;
  m->fused = spec->attention == CDDP_GPT_ATTN_FUSED || (spec->attention == CDDP_GPT_ATTN_AUTO && ops->attn_fused);
  m->info = calloc((size_t)spec->n_layer * 12 + 4, sizeof *m->info);
  size_t rows = (size_t)max_batch * spec->context, total = 0;
  if (!m->info || !(m->own_tok = ops->alloc(rows)) || !(m->own_tgt = ops->alloc(rows))) goto oom;
  for (int i = 0; i < 2; i++)
    if (!(m->slot_tok[i] = ops->alloc(rows)) || !(m->slot_tgt[i] = ops->alloc(rows)) ||
        !(m->copied[i] = ops->event_create()))
      goto oom;
  m->tok = m->own_tok, m->tgt = m->own_tgt;
  plan_params(m);
  plan_acts(m, NULL, &total);
  if (!(m->arena = ops->alloc(total * sizeof(float)))) goto oom; /* zeroed; the CPU's in huge pages */
  plan_acts(m, m->arena, &total);
  m->arena_floats = total;
  *out = m;
  return CDDP_OK;
oom:
  cddp__gpt_destroy(m);
  return cddp__fail(CDDP_SYSTEM, "gpt create: out of %s memory for activations of max_batch = %d x context = %d",
                    ops->name, max_batch, spec->context);
}

static void release(const cddp_gpt_t *m, void *p) {
  if (p) m->ops->release(p);
}

void cddp__gpt_destroy(cddp_gpt_t *m) {
  if (!m) return;
  release(m, m->arena), release(m, m->own_tok), release(m, m->own_tgt);
  for (int i = 0; i < 2; i++) {
    release(m, m->slot_tok[i]), release(m, m->slot_tgt[i]);
    if (m->copied[i]) m->ops->event_destroy(m->copied[i]);
  }
  free(m->info);
  free(m);
}

const cddp_ops_t *cddp__gpt_ops(const cddp_gpt_t *m) { return m->ops; }
int cddp__gpt_attention_fused(const cddp_gpt_t *m) { return m->fused; }

const cddp_gpt_spec_t *cddp__gpt_spec(const cddp_gpt_t *m) { return &m->spec; }
size_t cddp__gpt_param_count(const cddp_gpt_t *m) { return m->param_count; }
int cddp__gpt_n_params(const cddp_gpt_t *m) { return m->n_params; }
const cddp_param_info_t *cddp__gpt_param(const cddp_gpt_t *m, int i) {
  return i >= 0 && i < m->n_params ? &m->info[i] : NULL;
}

size_t cddp__gpt_activation_bytes(const cddp_gpt_t *m) { return m->arena_floats * sizeof(float); }

double cddp__gpt_flops_per_token(const cddp_gpt_t *m) {
  const cddp_gpt_spec_t *s = &m->spec;
  double C = s->d_model, T = s->context;
  double fwd = s->n_layer * (2.0 * 12.0 * C * C + 2.0 * 2.0 * T * C) + 2.0 * C * s->vocab;
  return 3.0 * fwd; /* backward: two GEMMs per forward GEMM */
}

void cddp__gpt_bind(cddp_gpt_t *m, float *params, float *grads) {
  m->params = params, m->grads = grads;
}

static uint64_t splitmix64(uint64_t *x) {
  uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/* N(0, std) by Box-Muller over (0,1] uniforms, one value per pair (simple and deterministic). */
static void fill_normal(float *p, size_t n, float std, uint64_t *state) {
  for (size_t i = 0; i < n; i++) {
    double u1 = ((double)(splitmix64(state) >> 11) + 1.0) * (1.0 / 9007199254740992.0);
    double u2 = (double)(splitmix64(state) >> 11) * (1.0 / 9007199254740992.0);
    p[i] = (float)(std * sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
  }
}

/* Made on the host (a whole copy of the parameters, once), then copied to the device. */
void cddp__gpt_init_params(cddp_gpt_t *m, uint64_t seed) {
  uint64_t st = seed;
  const cddp_gpt_spec_t *s = &m->spec;
  float *P = calloc(m->param_count, sizeof(float)); /* zero: the biases */
  if (!P) { /* no caller can go on without its parameters */
    CDDP_WARN("gpt init: out of memory for %zu parameters", m->param_count);
    abort();
  }
  size_t C = (size_t)s->d_model;
  float proj_std = 0.02f / sqrtf(2.0f * (float)s->n_layer);
  fill_normal(P + m->wte, (size_t)s->vocab * C, 0.02f, &st);
  fill_normal(P + m->wpe, (size_t)s->context * C, 0.02f, &st);
  for (int l = 0; l < s->n_layer; l++) {
    const block_p_t *b = &m->bp[l];
    for (size_t j = 0; j < C; j++) P[b->ln1_w + j] = 1.0f, P[b->ln2_w + j] = 1.0f;
    fill_normal(P + b->attn_w, 3 * C * C, 0.02f, &st);
    fill_normal(P + b->aproj_w, C * C, proj_std, &st);
    fill_normal(P + b->fc_w, 4 * C * C, 0.02f, &st);
    fill_normal(P + b->mproj_w, 4 * C * C, proj_std, &st);
  }
  for (size_t j = 0; j < C; j++) P[m->lnf_w + j] = 1.0f;
  m->ops->to_device(m->params, P, m->param_count * sizeof(float));
  free(P);
}


/* The attention of block a's qkv into a->y, keeping what its backward needs in a->att; under
 * train.precision bf16 the fused one's products take bf16 operands (tensor cores on CUDA). */
static void attention_forward(const cddp_gpt_t *m, const block_a_t *a, int B, int T) {
  int C = m->spec.d_model, H = m->spec.n_head;
  if (m->fused && cddp__gemm_precision() == CDDP_PRECISION_BF16 && m->ops->attn_flash_forward_tc)
    m->ops->attn_flash_forward_tc(a->y, a->att, a->qkv, B, T, C, H);
  else if (m->fused)
    m->ops->attn_flash_forward(a->y, a->att, a->qkv, B, T, C, H);
  else
    m->ops->attn_forward(a->y, a->att, a->qkv, B, T, C, H);
}

/* dqkv from dy through block a's attention; under train.precision bf16 the fused backward's
 * products take bf16 operands (tensor cores on CUDA), as every other product of the step does. */
static void attention_backward(cddp_gpt_t *m, const block_a_t *a, float *dqkv, const float *dy, int B, int T) {
  int C = m->spec.d_model, H = m->spec.n_head;
  if (m->fused && cddp__gemm_precision() == CDDP_PRECISION_BF16 && m->ops->attn_flash_backward_bf16)
    m->ops->attn_flash_backward_bf16(dqkv, dy, a->qkv, a->y, a->att, B, T, C, H);
  else if (m->fused)
    m->ops->attn_flash_backward(dqkv, dy, a->qkv, a->y, a->att, B, T, C, H);
  else
    m->ops->attn_backward(dqkv, dy, a->qkv, a->att, m->scratch, B, T, C, H);
}

/* Block l's forward from its input (x0 or block l - 1's res2) into m->ba[l]; backward calls it
 * again under model.recompute block, with the same inputs, so the same bits. */
static void block_forward(cddp_gpt_t *m, int l, int B, int T) {
  const cddp_gpt_spec_t *s = &m->spec;
  int n = B * T, C = s->d_model;
  const float *P = m->params, *x = l ? m->ba[l - 1].res2 : m->x0;
  const block_p_t *b = &m->bp[l];
  const block_a_t *a = &m->ba[l];
  const cddp_ops_t *ops = m->ops;
  ops->layernorm_forward(a->ln1, a->mean1, a->rstd1, x, P + b->ln1_w, P + b->ln1_b, n, C);
  ops->linear_xwt(a->qkv, a->ln1, P + b->attn_w, P + b->attn_b, NULL, n, C, 3 * C);
  attention_forward(m, a, B, T);
  ops->linear_xwt(a->res1, a->y, P + b->aproj_w, P + b->aproj_b, x, n, C, C);
  ops->layernorm_forward(a->ln2, a->mean2, a->rstd2, a->res1, P + b->ln2_w, P + b->ln2_b, n, C);
  ops->linear_xwt(a->fc, a->ln2, P + b->fc_w, P + b->fc_b, NULL, n, C, 4 * C);
  ops->bias_gelu_forward(a->gelu, a->fc, NULL, n, 4 * C);
  ops->linear_xwt(a->res2, a->gelu, P + b->mproj_w, P + b->mproj_b, a->res1, n, 4 * C, C);
}

/* slot -1: copied in on the compute stream; 0 or 1: on the copy stream into that slot's
 * device buffers, the compute stream waiting on the copy's event (not the host). */
static double forward_in(cddp_gpt_t *m, int slot, const uint8_t *tokens, const uint8_t *targets, int B, int T) {
  const cddp_gpt_spec_t *s = &m->spec;
  m->B = 0, m->T = T, m->have_targets = 0;
  if (B < 0 || B > m->max_batch || T < 1 || T > s->context) {
    CDDP_WARN("gpt forward: B = %d (0..%d) or T = %d (1..%d) out of range", B, m->max_batch, T,
              s->context);
    return NAN;
  }
  int n = B * T, C = s->d_model, V = s->vocab;
  for (int i = 0; i < n; i++)
    if (tokens[i] >= V) {
      CDDP_WARN("gpt forward: token %d at position %d is >= vocab %d", tokens[i], i, V);
      return NAN;
    }
  m->B = B, m->have_targets = targets != NULL;
  if (n == 0) return 0.0;
  const cddp_ops_t *ops = m->ops;
  if (slot < 0) {
    m->tok = m->own_tok, m->tgt = m->own_tgt;
    ops->to_device(m->tok, tokens, (size_t)n);
    if (targets) ops->to_device(m->tgt, targets, (size_t)n);
  } else {
    m->tok = m->slot_tok[slot], m->tgt = m->slot_tgt[slot];
    ops->to_device_async(m->tok, tokens, (size_t)n, m->copied[slot]);
    if (targets) ops->to_device_async(m->tgt, targets, (size_t)n, m->copied[slot]);
    ops->event_wait(m->copied[slot]);
  }
  const float *P = m->params;
  ops->embed_forward(m->x0, m->tok, P + m->wte, P + m->wpe, B, T, C);
  for (int l = 0; l < s->n_layer; l++) block_forward(m, l, B, T);
  const float *x = s->n_layer ? m->ba[s->n_layer - 1].res2 : m->x0;
  ops->layernorm_forward(m->lnf, m->meanf, m->rstdf, x, P + m->lnf_w, P + m->lnf_b, n, C);
  ops->head_forward(m->logits, m->lnf, P + m->wte, n, C, V);
  return targets ? ops->softmax_xent(m->prob, m->logits, m->tgt, n, V) : 0.0;
}

double cddp__gpt_forward(cddp_gpt_t *m, const uint8_t *tokens, const uint8_t *targets, int B, int T) {
  return forward_in(m, -1, tokens, targets, B, T);
}

double cddp__gpt_forward_slot(cddp_gpt_t *m, int slot, const uint8_t *tokens, const uint8_t *targets, int B,
                              int T) {
  if (slot < 0 || slot > 1) {
    CDDP_WARN("gpt forward: input slot %d is not 0 or 1", slot);
    return NAN;
  }
  return forward_in(m, slot, tokens, targets, B, T);
}

const float *cddp__gpt_logits(const cddp_gpt_t *m) { return m->logits; }

/* A linear layer's parameter gradients from dy [n,out] and its input x [n,in]: the bias (it
 * follows the weight in the buffer) then the weight, then the hook. */
static void linear_params(cddp_gpt_t *m, size_t w, size_t bias, const float *dy, const float *x,
                          int n, int in, int out, int acc, cddp_grad_ready_fn ready, void *ctx) {
  const cddp_ops_t *ops = m->ops;
  ops->colsum(m->grads + bias, dy, n, out, acc);
  ops->linear_backward_weight_rows(m->grads + w, dy, x, n, in, out, 0, out, acc);
  if (ready) ready(ctx, w);
}

void cddp__gpt_backward(cddp_gpt_t *m, float grad_scale, int accumulate, cddp_grad_ready_fn ready,
                       void *ready_ctx) {
  const cddp_gpt_spec_t *s = &m->spec;
  int B = m->B, T = m->T, n = B * T, C = s->d_model, V = s->vocab, acc = accumulate;
  float *G = m->grads;
  const float *P = m->params;
  const cddp_ops_t *ops = m->ops;
  if (n == 0 || !m->have_targets) {
    if (n > 0) CDDP_WARN("gpt backward: the last forward had no targets; gradients are zero");
    if (!accumulate) ops->fill_zero(G, m->param_count * sizeof(float));
    if (ready) ready(ready_ctx, 0);
    return;
  }
  /* grad_scale enters once, in dlogits (into the logits buffer: prob stays for a second
   * backward of the same forward) */
  float *dlogits = m->logits;
  ops->xent_backward(dlogits, m->prob, m->tgt, n, V, grad_scale);
  ops->head_backward(m->dsmall, G + m->wte, dlogits, m->lnf, P + m->wte, n, C, V, acc);
  const float *xl = s->n_layer ? m->ba[s->n_layer - 1].res2 : m->x0;
  ops->fill_zero(m->dres, sizeof(float) * (size_t)n * C);
  ops->layernorm_backward(m->dres, G + m->lnf_w, G + m->lnf_b, m->dsmall, xl, P + m->lnf_w,
                           m->meanf, m->rstdf, n, C, acc);
  if (ready) ready(ready_ctx, m->lnf_w);
  for (int l = s->n_layer - 1; l >= 0; l--) {
    const block_p_t *b = &m->bp[l];
    const block_a_t *a = &m->ba[l];
    const float *xin = l ? m->ba[l - 1].res2 : m->x0;
    /* what the shared buffers lost to later blocks (the last block's are still there); the
     * attention's y is rebuilt with its probabilities, the same bits as forward's */
    if (l < s->n_layer - 1 && s->recompute == CDDP_GPT_RECOMPUTE_BLOCK) block_forward(m, l, B, T);
    if (l < s->n_layer - 1 && s->recompute == CDDP_GPT_RECOMPUTE_ATTN)
      attention_forward(m, a, B, T);
    /* mlp: res2 = res1 + c_proj(gelu(c_fc(ln_2(res1)))); dres is d res2 */
    linear_params(m, b->mproj_w, b->mproj_b, m->dres, a->gelu, n, 4 * C, C, acc, ready, ready_ctx);
    ops->linear_backward_input(m->dbig, m->dres, P + b->mproj_w, NULL, n, 4 * C, C, 0);
    ops->gelu_backward(m->dbig, a->fc, (size_t)n * 4 * C);
    linear_params(m, b->fc_w, b->fc_b, m->dbig, a->ln2, n, C, 4 * C, acc, ready, ready_ctx);
    ops->linear_backward_input(m->dsmall, m->dbig, P + b->fc_w, NULL, n, C, 4 * C, 0);
    ops->layernorm_backward(m->dres, G + b->ln2_w, G + b->ln2_b, m->dsmall, a->res1,
                             P + b->ln2_w, a->mean2, a->rstd2, n, C, acc);
    if (ready) ready(ready_ctx, b->ln2_w);
    /* attention: res1 = x + c_proj(attn(c_attn(ln_1(x)))); dres is now d res1 */
    linear_params(m, b->aproj_w, b->aproj_b, m->dres, a->y, n, C, C, acc, ready, ready_ctx);
    ops->linear_backward_input(m->dsmall, m->dres, P + b->aproj_w, NULL, n, C, C, 0);
    attention_backward(m, a, m->dbig, m->dsmall, B, T);
    linear_params(m, b->attn_w, b->attn_b, m->dbig, a->ln1, n, C, 3 * C, acc, ready, ready_ctx);
    ops->linear_backward_input(m->dsmall, m->dbig, P + b->attn_w, NULL, n, C, 3 * C, 0);
    ops->layernorm_backward(m->dres, G + b->ln1_w, G + b->ln1_b, m->dsmall, xin, P + b->ln1_w,
                             a->mean1, a->rstd1, n, C, acc);
    if (ready) ready(ready_ctx, b->ln1_w);
  }
  /* dres is d x0: the embeddings (wte adds to what the head wrote) */
  if (!acc) /* rows T..context of wpe get no gradient from a shorter forward */
    ops->fill_zero(G + m->wpe, sizeof(float) * (size_t)s->context * C);
  ops->embed_backward(G + m->wte, G + m->wpe, m->dres, m->tok, B, T, C, 1);
  if (ready) ready(ready_ctx, m->wpe);
  if (ready) ready(ready_ctx, 0);
}
