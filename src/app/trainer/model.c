/* model.c - MLP and CNN over one flat parameter buffer: spec checks, layout and names, init,
 * forward, and a backward that tells DDP when each layer's gradients are final. Every buffer
 * and every layer call goes through one device table (ops.h), so the same code runs on the
 * CPU and the GPU. */
#include "trainer/model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/check.h"
#include "common/log.h"
#include "trainer/layers.h"
#include "trainer/ops.h"

#define MAX_NET (2 * CDDP_MODEL_MAX_LAYERS + 1) /* conv blocks + hidden fc + output fc */
#define MAX_WIDTH (1 << 20)
#define MAX_IMAGE 4096
#define MAX_PARAMS ((size_t)1 << 31)
/* Backward reports a linear layer's weight gradient in panels of about this many floats
 * (1 MiB), last rows first, so that DDP can start on a big layer before all of it is done. */
#define READY_PANEL_FLOATS ((size_t)1 << 18)

typedef struct layer {
  int conv;         /* 1: conv(k)+ReLU+maxpool2 block; 0: linear (+ReLU unless last) */
  int in, out;      /* linear: features; conv: channels */
  int h, w, k;      /* conv: input (= conv output) height, width, kernel */
  int relu;         /* linear: ReLU after it */
  size_t w_off, b_off;
  size_t out_floats;  /* per sample: linear out; conv out*h*w (before the pool) */
  size_t pool_floats; /* conv: per sample out*(h/2)*(w/2) */
  /* in the table's memory */
  float *act;         /* [max_batch, out_floats]: linear output / conv output after ReLU */
  float *pool;        /* conv: pooled output [max_batch, pool_floats] */
  uint8_t *arg;       /* conv: argmax of each pool window */
} layer_t;

struct cddp_model {
  const cddp_ops_t *ops; /* the device: every buffer below is its memory */
  cddp_model_spec_t spec;
  int max_batch;
  int n_layers;
  layer_t layers[MAX_NET];
  int n_params;
  cddp_param_info_t info[2 * MAX_NET];
  size_t param_count;
  double flops;
  float *params, *grads;
  float *prob;    /* [max_batch, n_classes] softmax of the last forward */
  float *dbuf[2]; /* ping-pong gradient buffers, each the largest activation */
  float *col;     /* im2col scratch for one sample */
  float *dconv;   /* one sample's conv output gradient */
  /* the last forward */
  const float *x;
  const uint8_t *y;
  int n;
};

static void *alloc_floats(const cddp_model_t *m, size_t count) { return m->ops->alloc(count * sizeof(float)); }

static cddp_result_t check_range(const char *field, long long v, long long lo, long long hi) {
  if (v < lo || v > hi)
    return cddp__fail(CDDP_INVALID_ARG, "model spec: %s = %lld (must be %lld..%lld)", field, v,
                      lo, hi);
  return CDDP_OK;
}

static cddp_result_t check_spec(const cddp_model_spec_t *s, int max_batch) {
  char field[48];
  if (s->kind != CDDP_MODEL_MLP && s->kind != CDDP_MODEL_CNN)
    return cddp__fail(CDDP_INVALID_ARG, "model spec: kind = %d (must be mlp (0) or cnn (1))",
                      (int)s->kind);
  CDDP_CHECK(check_range("in_c", s->in_c, 1, MAX_IMAGE));
  CDDP_CHECK(check_range("in_h", s->in_h, 1, MAX_IMAGE));
  CDDP_CHECK(check_range("in_w", s->in_w, 1, MAX_IMAGE));
  CDDP_CHECK(check_range("n_classes", s->n_classes, 2, 256)); /* labels are bytes */
  CDDP_CHECK(check_range("n_hidden", s->n_hidden, 0, CDDP_MODEL_MAX_LAYERS));
  for (int i = 0; i < s->n_hidden; i++) {
    snprintf(field, sizeof field, "hidden[%d]", i);
    CDDP_CHECK(check_range(field, s->hidden[i], 1, MAX_WIDTH));
  }
  if (s->kind == CDDP_MODEL_CNN) {
    CDDP_CHECK(check_range("n_conv", s->n_conv, 1, CDDP_MODEL_MAX_LAYERS));
    for (int i = 0; i < s->n_conv; i++) {
      snprintf(field, sizeof field, "conv_channels[%d]", i);
      CDDP_CHECK(check_range(field, s->conv_channels[i], 1, 1 << 16));
    }
    if (s->kernel < 1 || s->kernel > 15 || s->kernel % 2 == 0)
      return cddp__fail(CDDP_INVALID_ARG, "model spec: kernel = %d (must be odd, 1..15)",
                        s->kernel);
    int h = s->in_h, w = s->in_w;
    for (int i = 0; i < s->n_conv; i++) {
      if (h < 2 || w < 2)
        return cddp__fail(CDDP_INVALID_ARG,
                          "model spec: in_h x in_w = %dx%d too small for n_conv = %d blocks "
                          "(block %d would pool a %dx%d image; each 2x2 pool needs >= 2x2)",
                          s->in_h, s->in_w, s->n_conv, i, h, w);
      h /= 2, w /= 2;
    }
  }
  return check_range("max_batch", max_batch, 1, 1 << 20);
}

static void add_param(cddp_model_t *m, const char *layer, const char *what, int ndim,
                      const int64_t *shape) {
  cddp_param_info_t *p = &m->info[m->n_params++];
  snprintf(p->name, sizeof p->name, "%s.%s", layer, what);
  p->ndim = ndim;
  p->count = 1;
  for (int d = 0; d < ndim; d++) p->shape[d] = shape[d], p->count *= (size_t)shape[d];
  p->offset = m->param_count;
  m->param_count += p->count;
}

/* Lays out the layers and their parameters in forward order; sums FLOPs. */
static void plan(cddp_model_t *m) {
  const cddp_model_spec_t *s = &m->spec;
  char name[16];
  int c = s->in_c, h = s->in_h, w = s->in_w;
  if (s->kind == CDDP_MODEL_CNN) {
    for (int i = 0; i < s->n_conv; i++) {
      layer_t *l = &m->layers[m->n_layers++];
      l->conv = 1, l->in = c, l->out = s->conv_channels[i], l->h = h, l->w = w, l->k = s->kernel;
      l->relu = 1;
      snprintf(name, sizeof name, "conv%d", i);
      int64_t ws[4] = {l->out, l->in, l->k, l->k}, bs[1] = {l->out};
      l->w_off = m->param_count;
      add_param(m, name, "weight", 4, ws);
      l->b_off = m->param_count;
      add_param(m, name, "bias", 1, bs);
      l->out_floats = (size_t)l->out * h * w;
      l->pool_floats = (size_t)l->out * (h / 2) * (w / 2);
      double gemm = 2.0 * l->out * h * w * l->in * l->k * l->k;
      m->flops += gemm * (i == 0 ? 2 : 3); /* forward, dW, and dX except for the first */
      c = l->out, h /= 2, w /= 2;
    }
  }
  int in = c * h * w;
  for (int i = 0; i <= s->n_hidden; i++) {
    layer_t *l = &m->layers[m->n_layers++];
    l->in = in, l->out = i < s->n_hidden ? s->hidden[i] : s->n_classes;
    l->relu = i < s->n_hidden;
    snprintf(name, sizeof name, "fc%d", i);
    int64_t ws[2] = {l->out, l->in}, bs[1] = {l->out};
    l->w_off = m->param_count;
    add_param(m, name, "weight", 2, ws);
    l->b_off = m->param_count;
    add_param(m, name, "bias", 1, bs);
    l->out_floats = (size_t)l->out;
    m->flops += 2.0 * l->in * l->out * (m->n_layers == 1 ? 2 : 3);
    in = l->out;
  }
}

cddp_result_t cddp__model_create(const cddp_model_spec_t *spec, int max_batch, cddp_model_t **out) {
  return cddp__model_create_on(&cddp__ops_cpu, spec, max_batch, out);
}

cddp_result_t cddp__model_create_on(const cddp_ops_t *ops, const cddp_model_spec_t *spec, int max_batch,
                                    cddp_model_t **out) {
  cddp_result_t ret = CDDP_OK;
  *out = NULL;
  if (!spec) return cddp__fail(CDDP_INVALID_ARG, "model spec: NULL");
  CDDP_CHECK(check_spec(spec, max_batch));
  if (spec->kind == CDDP_MODEL_CNN && !ops->conv2d_forward)
    return cddp__fail(CDDP_INVALID_ARG, "model.type: cnn does not run on the %s device yet (no conv2d in its "
                      "table; docs/gpu.md): use model.type mlp or train.device cpu", ops->name);
  if (ops == &cddp__ops_cpu) cddp__blas_select_core();
  cddp_model_t *m = calloc(1, sizeof *m);
  if (!m) return cddp__fail(CDDP_SYSTEM, "model: out of memory");
  m->ops = ops;
  m->spec = *spec;
  m->max_batch = max_batch;
  plan(m);
  if (m->param_count > MAX_PARAMS) {
    ret = cddp__fail(CDDP_INVALID_ARG, "model spec: %zu parameters (at most %zu)",
                     m->param_count, MAX_PARAMS);
    goto fail;
  }
  size_t B = (size_t)max_batch, big = (size_t)spec->in_c * spec->in_h * spec->in_w, col = 0,
         conv_out = 0;
  for (int i = 0; i < m->n_layers; i++) {
    layer_t *l = &m->layers[i];
    big = CDDP_MAX(big, l->out_floats);
    if (!(l->act = alloc_floats(m, B * l->out_floats))) goto oom;
    if (l->conv) {
      col = CDDP_MAX(col, cddp__conv2d_col_floats(l->in, l->h, l->w, l->k));
      conv_out = CDDP_MAX(conv_out, l->out_floats);
      if (!(l->pool = alloc_floats(m, B * l->pool_floats))) goto oom;
      if (!(l->arg = ops->alloc(B * l->pool_floats))) goto oom;
    }
  }
  if (!(m->prob = alloc_floats(m, B * spec->n_classes))) goto oom;
  for (int i = 0; i < 2; i++)
    if (!(m->dbuf[i] = alloc_floats(m, B * big))) goto oom;
  if (col && !(m->col = alloc_floats(m, col))) goto oom;
  if (conv_out && !(m->dconv = alloc_floats(m, conv_out))) goto oom;
  CDDP_INFO(CDDP_SUB_TRAIN, "model: %s on %s, %d layers, %zu parameters, %.3g FLOP/sample fwd+bwd",
            spec->kind == CDDP_MODEL_MLP ? "mlp" : "cnn", ops->name, m->n_layers, m->param_count, m->flops);
  *out = m;
  return CDDP_OK;
oom:
  ret = cddp__fail(CDDP_SYSTEM, "model: out of %s memory for activations of batch %d", ops->name, max_batch);
fail:
  cddp__model_destroy(m);
  return ret;
}

static void release(const cddp_model_t *m, void *p) {
  if (p) m->ops->release(p);
}

void cddp__model_destroy(cddp_model_t *m) {
  if (!m) return;
  for (int i = 0; i < m->n_layers; i++) {
    release(m, m->layers[i].act);
    release(m, m->layers[i].pool);
    release(m, m->layers[i].arg);
  }
  release(m, m->prob);
  release(m, m->dbuf[0]);
  release(m, m->dbuf[1]);
  release(m, m->col);
  release(m, m->dconv);
  free(m);
}

const cddp_ops_t *cddp__model_ops(const cddp_model_t *m) { return m->ops; }

size_t cddp__model_param_count(const cddp_model_t *m) { return m->param_count; }
int cddp__model_n_params(const cddp_model_t *m) { return m->n_params; }
const cddp_param_info_t *cddp__model_param(const cddp_model_t *m, int i) {
  return i >= 0 && i < m->n_params ? &m->info[i] : NULL;
}
double cddp__model_flops_per_sample(const cddp_model_t *m) { return m->flops; }

void cddp__model_bind(cddp_model_t *m, float *params, float *grads) {
  m->params = params;
  m->grads = grads;
}

/* splitmix64: one 64-bit state, passes BigCrush; 24 high bits give a float in [0, 1). */
static uint64_t splitmix64(uint64_t *state) {
  uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

void cddp__model_init_params(cddp_model_t *m, uint64_t seed) {
  uint64_t state = seed;
  float chunk[4096]; /* made on the host, copied to the device a chunk at a time */
  for (int i = 0; i < m->n_layers; i++) {
    const layer_t *l = &m->layers[i];
    int fan_in = l->conv ? l->in * l->k * l->k : l->in;
    float bound = (float)(1.0 / sqrt((double)fan_in));
    /* weight then bias, contiguous: one pass over [w_off, b_off + out) */
    size_t end = l->b_off + (size_t)l->out;
    for (size_t j0 = l->w_off; j0 < end; j0 += 4096) {
      size_t len = CDDP_MIN((size_t)4096, end - j0);
      for (size_t j = 0; j < len; j++) {
        float u = (float)(splitmix64(&state) >> 40) * (1.0f / 16777216.0f);
        chunk[j] = (2.0f * u - 1.0f) * bound;
      }
      m->ops->to_device(m->params + j0, chunk, len * sizeof(float));
    }
  }
}

static const float *layer_input(const cddp_model_t *m, int i) {
  if (i == 0) return m->x;
  const layer_t *p = &m->layers[i - 1];
  return p->conv ? p->pool : p->act;
}

double cddp__model_forward(cddp_model_t *m, const float *x, const uint8_t *y, int n, int *n_correct) {
  if (n_correct) *n_correct = 0;
  if (n < 0 || n > m->max_batch) {
    CDDP_WARN("model forward: n = %d outside 0..%d (max_batch)", n, m->max_batch);
    m->n = 0;
    return NAN;
  }
  m->x = x, m->y = y, m->n = n;
  if (n == 0) return 0.0;
  const float *P = m->params;
  const cddp_ops_t *ops = m->ops;
  for (int i = 0; i < m->n_layers; i++) {
    layer_t *l = &m->layers[i];
    const float *in = layer_input(m, i);
    if (l->conv) {
      /* one sample at a time: the pool reads the conv output while it is still in cache */
      size_t in_floats = (size_t)l->in * l->h * l->w;
      for (int s = 0; s < n; s++) {
        float *act = l->act + s * l->out_floats;
        ops->conv2d_forward(act, in + s * in_floats, P + l->w_off, P + l->b_off, m->col, 1, l->in,
                            l->h, l->w, l->out, l->k, 1);
        ops->maxpool2_forward(l->pool + s * l->pool_floats, l->arg + s * l->pool_floats, act, 1,
                              l->out, l->h, l->w);
      }
    } else {
      ops->linear_forward(l->act, in, P + l->w_off, P + l->b_off, n, l->in, l->out, l->relu);
    }
  }
  const layer_t *last = &m->layers[m->n_layers - 1];
  return ops->xent_forward(m->prob, last->act, y, n, m->spec.n_classes, n_correct);
}

/* Rows per ready panel: the weight split into ceil(size / READY_PANEL_FLOATS) panels of equal
 * rows (a multiple of 16, so the GEMM keeps whole register tiles); the panel at row 0 takes
 * what is left. */
static int panel_rows(const layer_t *l) {
  size_t size = (size_t)l->out * l->in;
  size_t panels = (size + READY_PANEL_FLOATS - 1) / READY_PANEL_FLOATS;
  if (panels <= 1) return l->out;
  size_t rows = ((size_t)l->out + panels - 1) / panels;
  rows = (rows + 15) & ~(size_t)15;
  return rows >= (size_t)l->out ? l->out : (int)rows;
}

void cddp__model_backward(cddp_model_t *m, float grad_scale, int accumulate,
                         cddp_grad_ready_fn ready, void *ready_ctx) {
  int n = m->n, cur = 0;
  float *G = m->grads;
  const float *P = m->params;
  const cddp_ops_t *ops = m->ops;
  /* grad_scale enters once, in dlogits: every gradient below is linear in it. */
  ops->xent_backward(m->dbuf[cur], m->prob, m->y, n, m->spec.n_classes, grad_scale);
  for (int i = m->n_layers - 1; i >= 0; i--) {
    layer_t *l = &m->layers[i];
    const float *in = layer_input(m, i);
    float *d = m->dbuf[cur], *other = m->dbuf[cur ^ 1];
    if (l->conv) {
      /* d: gradient of the pooled output; through the argmax and the ReLU to the conv output
       * (one sample's worth of scratch, so it stays in cache), then the conv's backward; the
       * input gradient goes to the other buffer */
      size_t in_floats = (size_t)l->in * l->h * l->w;
      for (int s = 0; s < n; s++) {
        ops->maxpool2_backward(m->dconv, d + s * l->pool_floats, l->arg + s * l->pool_floats,
                               l->pool + s * l->pool_floats, 1, l->out, l->h, l->w, 1);
        ops->conv2d_backward(i > 0 ? other + s * in_floats : NULL, G + l->w_off, G + l->b_off, m->dconv,
                             in + s * in_floats, P + l->w_off, m->col, 1, l->in, l->h, l->w, l->out, l->k,
                             accumulate || s > 0);
      }
      if (n == 0 && !accumulate) /* nothing above zeroed them */
        ops->conv2d_backward(NULL, G + l->w_off, G + l->b_off, m->dconv, in, P + l->w_off, m->col, 0,
                             l->in, l->h, l->w, l->out, l->k, 0);
      if (ready) ready(ready_ctx, l->w_off);
      cur ^= 1;
    } else {
      /* bias first (it follows the weight in the buffer), then weight panels from the end */
      ops->colsum(G + l->b_off, d, n, l->out, accumulate);
      int rows = panel_rows(l);
      for (int r1 = l->out; r1 > 0; r1 -= rows) {
        int r0 = r1 - rows > 0 ? r1 - rows : 0;
        ops->linear_backward_weight_rows(G + l->w_off, d, in, n, l->in, l->out, r0, r1, accumulate);
        if (ready) ready(ready_ctx, l->w_off + (size_t)r0 * l->in);
      }
      /* every input but the model's own is a ReLU output (or a pool of one) */
      if (i > 0) {
        ops->linear_backward_input(other, d, P + l->w_off, in, n, l->in, l->out, 1);
        cur ^= 1;
      }
    }
  }
}
