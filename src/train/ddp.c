/* ddp.c - bucketed gradient all-reduce that starts while backward still runs.
 *
 * Buckets are contiguous slices of the gradient buffer cut from its END, because backward
 * finishes the buffer from the end towards the start: bucket 0 is the last bucket_bytes of
 * the buffer and is the first one started. Each runs as an iallreduce on the comm's progress
 * thread, in place, on shared memory (the zero-copy path). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cddp/ddp.h"
#include "common/check.h"
#include "common/clock.h"
#include "common/log.h"
#include "train/ddp_compress.h"

typedef struct bucket {
  size_t lo, hi; /* [lo, hi) in floats */
  size_t soff;   /* sign compression: its words in sign_send; world times that in sign_recv */
  cddp_request_t *req;
  int started;
} bucket_t;

struct cddp_ddp {
  cddp_comm_t *comm;
  cddp_redop_t op;
  float *grads;
  size_t n;
  bucket_t *b;
  int nb;
  int next;        /* first bucket not yet started */
  int overlap;
  int world;
  cddp_compress_t compress;
  uint16_t *wire;       /* bf16, f16: the buffer that crosses the wire (comm memory) */
  float *residual;      /* sign: error feedback, n floats (sign-Adam: then vloc, mloc) */
  float *vloc, *mloc;   /* sign-Adam: Adam's moments of this rank's own uncompressed gradient */
  uint16_t *vwire;      /* sign-Adam: the bf16 variance that crosses the wire (comm memory) */
  float *vshared;       /* sign-Adam: the optimizer's second moment, the world's mean vloc */
  const int64_t *opt_t; /* sign-Adam: optimizer steps taken, read at finish */
  int vsync_every;
  float beta1, beta2, gscale; /* gscale: a rank's gradient in units of the global mean gradient */
  uint32_t *sign_send;  /* sign: this rank's packs, bucket after bucket (comm memory) */
  uint32_t *sign_recv;  /* sign: every rank's packs, world per bucket (comm memory) */
  cddp_result_t err; /* first failure to start a bucket during backward */
  char err_text[512];
  cddp_ddp_stats_t st;
};

cddp_result_t cddp_ddp_create(cddp_ddp_t **out, cddp_comm_t *comm, size_t n, size_t bucket_bytes,
                              cddp_redop_t op) {
  *out = NULL;
  if (!comm) return cddp__fail(CDDP_INVALID_ARG, "ddp: communicator is NULL");
  if (n == 0) return cddp__fail(CDDP_INVALID_ARG, "ddp: gradient buffer of 0 floats");
  if (op != CDDP_SUM && op != CDDP_AVG)
    return cddp__fail(CDDP_INVALID_ARG, "ddp: reduction must be sum or avg, not %s", cddp_redop_name(op));
  if (bucket_bytes == 0) bucket_bytes = 4u << 20;
  size_t per = CDDP_MAX(bucket_bytes / sizeof(float), (size_t)1024);
  cddp_ddp_t *d = calloc(1, sizeof *d);
  if (!d) return cddp__fail(CDDP_SYSTEM, "ddp: out of memory");
  d->comm = comm, d->op = op, d->n = n, d->overlap = 1, d->world = cddp_comm_world(comm);
  d->nb = (int)((n + per - 1) / per);
  d->b = calloc((size_t)d->nb, sizeof *d->b);
  cddp_result_t r = d->b ? cddp_comm_mem_alloc(comm, n * sizeof(float), (void **)&d->grads)
                         : cddp__fail(CDDP_SYSTEM, "ddp: out of memory");
  if (r != CDDP_OK) {
    free(d->b);
    free(d);
    return r;
  }
  memset(d->grads, 0, n * sizeof(float));
  for (int i = 0; i < d->nb; i++) {
    size_t hi = n - (size_t)i * per;
    d->b[i].hi = hi;
    d->b[i].lo = hi > per ? hi - per : 0;
  }
  d->st.buckets = d->nb;
  CDDP_INFO(CDDP_SUB_DDP, "ddp: %zu floats in %d buckets of <= %zu KiB, %s", n, d->nb,
            per * sizeof(float) >> 10, cddp_redop_name(op));
  *out = d;
  return CDDP_OK;
}

void cddp_ddp_destroy(cddp_ddp_t *d) {
  if (!d) return;
  for (int i = 0; i < d->nb; i++)
    if (d->b[i].req) cddp_wait(d->b[i].req);
  cddp_comm_mem_free(d->comm, d->grads);
  cddp_comm_mem_free(d->comm, d->wire);
  cddp_comm_mem_free(d->comm, d->sign_send);
  cddp_comm_mem_free(d->comm, d->sign_recv);
  cddp_comm_mem_free(d->comm, d->vwire);
  free(d->residual);
  free(d->b);
  free(d);
}

float *cddp_ddp_grads(cddp_ddp_t *d) { return d->grads; }
size_t cddp_ddp_count(const cddp_ddp_t *d) { return d->n; }
int cddp_ddp_bucket_count(const cddp_ddp_t *d) { return d->nb; }
void cddp_ddp_set_overlap(cddp_ddp_t *d, int overlap) { d->overlap = overlap; }

cddp_result_t cddp_ddp_broadcast(cddp_ddp_t *d, float *buf, int root) {
  return cddp_broadcast(d->comm, buf, d->n, CDDP_F32, root);
}

void cddp_ddp_begin(cddp_ddp_t *d) {
  d->next = 0;
  d->err = CDDP_OK;
  for (int i = 0; i < d->nb; i++) d->b[i].started = 0, d->b[i].req = NULL;
}

static void start(cddp_ddp_t *d, bucket_t *b) {
  b->started = 1;
  if (d->err != CDDP_OK) return;
  size_t len = b->hi - b->lo;
  float *p = d->grads + b->lo;
  cddp_result_t r;
  switch (d->compress) {
  case CDDP_COMPRESS_BF16:
    cddp__to_bf16(d->wire + b->lo, p, len);
    r = cddp_iallreduce(d->comm, d->wire + b->lo, d->wire + b->lo, len, CDDP_BF16, d->op, &b->req);
    break;
  case CDDP_COMPRESS_F16: /* divide first, then sum (as PyTorch's fp16 hook): sums stay in range */
    cddp__to_f16(d->wire + b->lo, p, len, d->op == CDDP_AVG ? 1.0f / (float)d->world : 1.0f);
    r = cddp_iallreduce(d->comm, d->wire + b->lo, d->wire + b->lo, len, CDDP_F16, CDDP_SUM, &b->req);
    break;
  case CDDP_COMPRESS_SIGN: {
    size_t words = cddp__sign_words(len);
    if (d->mloc) { /* sign-Adam: the signs of this rank's own momentum */
      cddp__adam_moments(d->mloc + b->lo, d->vloc + b->lo, p, len, d->beta1, d->beta2, d->gscale);
      p = d->mloc + b->lo;
    }
    cddp__sign_pack(d->sign_send + b->soff, p, d->residual + b->lo, len);
    r = cddp_iallgather(d->comm, d->sign_send + b->soff, d->sign_recv + b->soff * (size_t)d->world, words,
                        CDDP_I32, &b->req);
    break;
  }
  default:
    r = cddp_iallreduce(d->comm, p, p, len, CDDP_F32, d->op, &b->req);
  }
  if (r != CDDP_OK) {
    d->err = r;
    snprintf(d->err_text, sizeof d->err_text, "%s", cddp_last_error());
  }
}

/* A finished bucket's wire form back into float gradients. */
static void decode(cddp_ddp_t *d, const bucket_t *b) {
  size_t len = b->hi - b->lo;
  if (d->compress == CDDP_COMPRESS_BF16)
    cddp__from_bf16(d->grads + b->lo, d->wire + b->lo, len);
  else if (d->compress == CDDP_COMPRESS_F16)
    cddp__from_f16(d->grads + b->lo, d->wire + b->lo, len);
  else if (d->compress == CDDP_COMPRESS_SIGN)
    cddp__sign_unpack_sum(d->grads + b->lo, d->sign_recv + b->soff * (size_t)d->world, d->world, len,
                          d->op == CDDP_AVG || d->mloc ? 1.0f / (float)d->world : 1.0f); /* mloc: mean units */
}

void cddp_ddp_grad_ready(void *ctx, size_t offset) {
  cddp_ddp_t *d = ctx;
  if (!d->overlap) return;
  while (d->next < d->nb && d->b[d->next].lo >= offset) start(d, &d->b[d->next++]);
}

/* Bytes one rank puts on the wire for the whole buffer (ring estimates). */
static void count_bytes(cddp_ddp_t *d) {
  int w = d->world;
  if (d->compress == CDDP_COMPRESS_SIGN) {
    uint64_t pack = 0;
    for (int i = 0; i < d->nb; i++) pack += cddp__sign_words(d->b[i].hi - d->b[i].lo) * 4;
    d->st.bytes += pack;
    d->st.wire_bytes += pack * (uint64_t)(w - 1); /* allgather: every other rank gets it */
    return;
  }
  int half = d->compress == CDDP_COMPRESS_BF16 || d->compress == CDDP_COMPRESS_F16;
  uint64_t payload = d->n * (half ? 2 : sizeof(float));
  d->st.bytes += payload;
  d->st.wire_bytes += w > 1 ? (uint64_t)((double)payload * 2.0 * (w - 1) / w) : 0;
}

/* Sign-Adam: on the first step and every vsync_every-th after it, the optimizer's second moment
 * becomes the mean over the ranks of their bias-corrected vloc (bf16 on the wire), so the
 * variance never sees the sign compression's noise; the ranks' updates stay identical. */
static cddp_result_t vsync(cddp_ddp_t *d) {
  int64_t t = *d->opt_t; /* steps before this one: this is step t + 1 */
  if (t % d->vsync_every != 0) return CDDP_OK;
  float inv_bc2 = (float)(1.0 / (1.0 - pow((double)d->beta2, (double)(t + 1))));
  cddp__to_bf16_scaled(d->vwire, d->vloc, d->n, inv_bc2);
  cddp_result_t r = cddp_allreduce(d->comm, d->vwire, d->vwire, d->n, CDDP_BF16, CDDP_AVG);
  if (r != CDDP_OK) return r;
  cddp__from_bf16(d->vshared, d->vwire, d->n);
  uint64_t payload = d->n * 2;
  d->st.bytes += payload;
  d->st.wire_bytes += d->world > 1 ? (uint64_t)((double)payload * 2.0 * (d->world - 1) / d->world) : 0;
  return CDDP_OK;
}

cddp_result_t cddp_ddp_finish(cddp_ddp_t *d) {
  uint64_t t0 = cddp__now_ns();
  cddp_result_t ret = CDDP_OK;
  if (!d->overlap && d->compress == CDDP_COMPRESS_NONE) {
    /* one blocking call over the whole buffer: fewest synchronisations */
    ret = cddp_allreduce(d->comm, d->grads, d->grads, d->n, CDDP_F32, d->op);
    d->next = d->nb;
  } else {
    while (d->next < d->nb) start(d, &d->b[d->next++]);
    for (int i = 0; i < d->nb; i++) {
      if (!d->b[i].req) continue;
      cddp_result_t r = cddp_wait(d->b[i].req);
      d->b[i].req = NULL;
      if (r != CDDP_OK && ret == CDDP_OK) ret = r;
      if (r == CDDP_OK) decode(d, &d->b[i]);
    }
    if (d->err != CDDP_OK) {
      ret = d->err;
      cddp__set_error_text(d->err_text);
    }
    if (ret == CDDP_OK && d->vloc) ret = vsync(d);
  }
  d->st.wait_ns += cddp__now_ns() - t0;
  count_bytes(d);
  return ret;
}

cddp_result_t cddp_ddp_set_compress(cddp_ddp_t *d, cddp_compress_t c) {
  if (c == d->compress) return CDDP_OK;
  if (c != CDDP_COMPRESS_NONE && c != CDDP_COMPRESS_BF16 && c != CDDP_COMPRESS_SIGN && c != CDDP_COMPRESS_F16)
    return cddp__fail(CDDP_INVALID_ARG, "ddp: unknown compression %d", (int)c);
  if (d->compress != CDDP_COMPRESS_NONE)
    return cddp__fail(CDDP_INVALID_USAGE, "ddp: compression is chosen once, after create");
  cddp_result_t r = CDDP_OK;
  if (c == CDDP_COMPRESS_BF16 || c == CDDP_COMPRESS_F16) {
    r = cddp_comm_mem_alloc(d->comm, d->n * sizeof(uint16_t), (void **)&d->wire);
  } else {
    size_t words = 0;
    for (int i = 0; i < d->nb; i++) d->b[i].soff = words, words += cddp__sign_words(d->b[i].hi - d->b[i].lo);
    d->residual = calloc(d->n, sizeof(float));
    if (!d->residual) return cddp__fail(CDDP_SYSTEM, "ddp: out of memory");
    r = cddp_comm_mem_alloc(d->comm, words * 4, (void **)&d->sign_send);
    if (r == CDDP_OK) r = cddp_comm_mem_alloc(d->comm, words * 4 * (size_t)d->world, (void **)&d->sign_recv);
  }
  if (r == CDDP_OK) d->compress = c;
  return r;
}

float *cddp_ddp_residual(cddp_ddp_t *d) { return d->residual; }

size_t cddp__ddp_residual_len(const cddp_ddp_t *d) { return d->residual ? (d->mloc ? 3 * d->n : d->n) : 0; }

cddp_result_t cddp__ddp_set_sign_adam(cddp_ddp_t *d, int every, float beta1, float beta2, float *v_shared,
                                      const int64_t *opt_t) {
  if (d->compress != CDDP_COMPRESS_SIGN || every <= 0) return CDDP_OK;
  if (d->vloc) return cddp__fail(CDDP_INVALID_USAGE, "ddp: sign-Adam is set once");
  if (!v_shared || !opt_t || !(beta1 >= 0 && beta1 < 1) || !(beta2 > 0 && beta2 < 1))
    return cddp__fail(CDDP_INVALID_ARG, "ddp: sign-Adam needs Adam's v, its step count, beta1 in [0, 1), beta2 in (0, 1)");
  float *all = realloc(d->residual, 3 * d->n * sizeof(float));
  if (!all) return cddp__fail(CDDP_SYSTEM, "ddp: out of memory");
  memset(all + d->n, 0, 2 * d->n * sizeof(float));
  d->residual = all, d->vloc = all + d->n, d->mloc = all + 2 * d->n;
  cddp_result_t r = cddp_comm_mem_alloc(d->comm, d->n * sizeof(uint16_t), (void **)&d->vwire);
  if (r != CDDP_OK) return r;
  d->vsync_every = every, d->beta1 = beta1, d->beta2 = beta2, d->vshared = v_shared, d->opt_t = opt_t;
  d->gscale = d->op == CDDP_SUM ? (float)d->world : 1.0f;
  return CDDP_OK;
}

void cddp_ddp_stats(cddp_ddp_t *d, cddp_ddp_stats_t *s, int reset) {
  *s = d->st;
  if (reset) d->st = (cddp_ddp_stats_t){.buckets = d->nb};
}
