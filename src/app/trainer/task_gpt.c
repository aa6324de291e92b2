/* task_gpt.c - the text task: the King James Bible as bytes (data_text.c) and the byte-level
 * GPT (gpt.c). A sample is one sequence of model.context bytes; its loss is the sum over its
 * T next-byte predictions, so the trainer's means are per token (nats per byte). */
#include <math.h>
#include <stdlib.h>

#include "common/check.h"
#include "trainer/data_text.h"
#include "trainer/gpt.h"
#include "trainer/ops.h"
#include "trainer/task.h"

#define EVAL_BATCH 16

typedef struct gpt_task {
  cddp_task_t base;
  cddp_text_t train, val;
  cddp_gpt_t *model;
  const cddp_ops_t *ops; /* the model's device */
  int T, max_batch;
  uint8_t *tokens[2], *targets[2]; /* input slots [micro, T] (host memory the device copies from fastest) */
  float *logits;                   /* off the CPU: eval's logits, copied to the host */
  uint8_t *eval_tokens, *eval_targets; /* [EVAL_BATCH, T]: eval leaves the slots alone */
} gpt_task_t;

static size_t param_count(cddp_task_t *t) { return cddp__gpt_param_count(((gpt_task_t *)t)->model); }
static int n_params(cddp_task_t *t) { return cddp__gpt_n_params(((gpt_task_t *)t)->model); }
static const cddp_param_info_t *param(cddp_task_t *t, int i) { return cddp__gpt_param(((gpt_task_t *)t)->model, i); }
static void bind(cddp_task_t *t, float *p, float *g) { cddp__gpt_bind(((gpt_task_t *)t)->model, p, g); }
static void init_params(cddp_task_t *t, uint64_t seed) { cddp__gpt_init_params(((gpt_task_t *)t)->model, seed); }

static void gather(cddp_task_t *t, int slot, const uint32_t *idx, int n) {
  gpt_task_t *m = (gpt_task_t *)t;
  cddp__text_gather(&m->train, idx, n, m->tokens[slot], m->targets[slot]);
}

static double forward(cddp_task_t *t, int slot, int n) {
  gpt_task_t *m = (gpt_task_t *)t;
  return cddp__gpt_forward_slot(m->model, slot, m->tokens[slot], m->targets[slot], n, m->T);
}

static void backward(cddp_task_t *t, float scale, int accumulate, cddp_grad_ready_fn ready, void *ctx) {
  cddp__gpt_backward(((gpt_task_t *)t)->model, scale, accumulate, ready, ctx);
}

/* Validation sequences [lo, hi): loss sum, and next-byte hits (argmax of the logits). */
static void eval(cddp_task_t *t, size_t lo, size_t hi, double acc[2]) {
  gpt_task_t *m = (gpt_task_t *)t;
  uint32_t idx[EVAL_BATCH];
  for (size_t i = lo; i < hi; i += EVAL_BATCH) {
    int n = (int)CDDP_MIN((size_t)EVAL_BATCH, hi - i);
    for (int k = 0; k < n; k++) idx[k] = (uint32_t)(i + (size_t)k);
    cddp__text_gather(&m->val, idx, n, m->eval_tokens, m->eval_targets);
    acc[1] += cddp__gpt_forward(m->model, m->eval_tokens, m->eval_targets, n, m->T);
    const float *logits = cddp__gpt_logits(m->model);
    if (m->logits) { /* off the CPU */
      m->ops->to_host(m->logits, logits, (size_t)n * (size_t)m->T * CDDP_GPT_VOCAB * sizeof(float));
      logits = m->logits;
    }
    for (size_t p = 0; p < (size_t)n * (size_t)m->T; p++) {
      const float *row = logits + p * CDDP_GPT_VOCAB;
      int best = 0;
      for (int v = 1; v < CDDP_GPT_VOCAB; v++)
        if (row[v] > row[best]) best = v;
      acc[0] += best == m->eval_targets[p];
    }
  }
}

static void destroy(cddp_task_t *t) {
  gpt_task_t *m = (gpt_task_t *)t;
  cddp__gpt_destroy(m->model);
  cddp__text_free(&m->train);
  cddp__text_free(&m->val);
  for (int s = 0; s < 2 && m->ops; s++) m->ops->host_release(m->tokens[s]), m->ops->host_release(m->targets[s]);
  free(m->eval_tokens), free(m->eval_targets), free(m->logits);
  free(m);
}

static const cddp_task_ops_t gpt_ops = {param_count, n_params, param, bind, init_params,
                                        gather, forward, backward, eval, destroy};

cddp_result_t cddp__task_gpt_create(const cddp_train_config_t *c, int micro, const cddp_ops_t *ops,
                                    cddp_task_t **out) {
  gpt_task_t *m = calloc(1, sizeof *m);
  if (!m) return cddp__fail(CDDP_SYSTEM, "out of memory");
  m->ops = ops;
  m->T = c->gpt.context;
  m->max_batch = CDDP_MAX(micro, EVAL_BATCH);
  m->base = (cddp_task_t){&gpt_ops, "GPT", 0, 0, m->T, "tokens", 1};
  cddp_result_t r = cddp__text_load_kjv(m->T, &m->train, &m->val);
  if (r == CDDP_OK) r = cddp__gpt_create_on(ops, &c->gpt, m->max_batch, &m->model);
  if (r == CDDP_OK && cddp__gpt_attention_fused(m->model)) m->base.name = "GPT (fused attention)"; /* the start line */
  size_t bytes = (size_t)micro * (size_t)m->T, eval_bytes = (size_t)EVAL_BATCH * (size_t)m->T;
  for (int s = 0; s < 2 && r == CDDP_OK; s++)
    if (!(m->tokens[s] = ops->host_alloc(bytes)) || !(m->targets[s] = ops->host_alloc(bytes)))
      r = cddp__fail(CDDP_SYSTEM, "out of memory");
  if (r == CDDP_OK && (!(m->eval_tokens = malloc(eval_bytes)) || !(m->eval_targets = malloc(eval_bytes))))
    r = cddp__fail(CDDP_SYSTEM, "out of memory");
  if (r == CDDP_OK && ops != &cddp__ops_cpu && !(m->logits = malloc(eval_bytes * CDDP_GPT_VOCAB * sizeof(float))))
    r = cddp__fail(CDDP_SYSTEM, "out of memory");
  if (r != CDDP_OK) {
    destroy(&m->base);
    return r;
  }
  m->base.n_train = m->train.n_seq, m->base.n_eval = m->val.n_seq;
  *out = &m->base;
  return CDDP_OK;
}
