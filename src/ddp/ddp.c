/* ddp.c - bucketed gradient all-reduce that starts while backward still runs.
 *
 * Buckets are contiguous slices of the gradient buffer cut from its END, because backward
 * finishes the buffer from the end towards the start: bucket 0 is the last bucket_bytes of
 * the buffer and is the first one started. Each runs as an iallreduce on the comm's progress
 * thread, in place, on shared memory (the zero-copy path). With PowerSGD, buckets hold whole
 * tensors: a bucket's P's (and raw 1-D values) leave during backward, its Q's in finish. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cddp/ddp.h"
#include "common/check.h"
#include "common/clock.h"
#include "common/log.h"
#include "ddp/ddp_compress.h"
#include "ddp/ddp_powersgd.h"

typedef struct bucket {
  size_t lo, hi; /* [lo, hi) in floats */
  size_t soff;   /* sign compression: its words in sign_send; world times that in sign_recv */
  int t0, t1;    /* powersgd: its tensors mats[t0..t1), their P's (and raw values) at floats
                    [p0, p1) of the P wire and their Q's at [q0, q1) of the Q wire */
  size_t p0, p1, q0, q1;
  cddp_request_t *req, *qreq; /* qreq: powersgd's Q all-reduce */
  int started;
} bucket_t;

struct cddp_ddp {
  cddp_comm_t *comm;
  cddp_redop_t op;
  float *grads;
  int grads_mine;  /* create allocated them (comm memory); create_over's belong to the caller */
  size_t n;
  bucket_t *b;
  int nb;
  size_t per;      /* floats per bucket (create's bucket_bytes) */
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
  cddp__psgd_mat_t *mats; /* powersgd: the tensors, in buffer order */
  int nmats, prank;
  size_t pn, qn;        /* powersgd: floats of the P wire (with the raw tensors) and of the Q's */
  float *pwire, *qwire; /* powersgd: what crosses the wire (comm memory) */
  float *qstate;        /* powersgd: the warm-start Q's, after the residual (residual + n) */
  cddp_result_t err; /* first failure to start a bucket during backward */
  char err_text[512];
  cddp_ddp_stats_t st;
};

cddp_result_t cddp_ddp_create(cddp_ddp_t **out, cddp_comm_t *comm, size_t n, size_t bucket_bytes,
                              cddp_redop_t op) {
  return cddp_ddp_create_over(out, comm, NULL, n, bucket_bytes, op);
}

cddp_result_t cddp_ddp_create_over(cddp_ddp_t **out, cddp_comm_t *comm, float *grads, size_t n,
                                   size_t bucket_bytes, cddp_redop_t op) {
  *out = NULL;
  if (!comm) return cddp__fail(CDDP_INVALID_ARG, "ddp: communicator is NULL");
  if (n == 0) return cddp__fail(CDDP_INVALID_ARG, "ddp: gradient buffer of 0 floats");
  if (op != CDDP_SUM && op != CDDP_AVG)
    return cddp__fail(CDDP_INVALID_ARG, "ddp: reduction must be sum or avg, not %s", cddp_redop_name(op));
  if (bucket_bytes == 0) bucket_bytes = 4u << 20;
  size_t per = CDDP_MAX(bucket_bytes / sizeof(float), (size_t)1024);
  cddp_ddp_t *d = calloc(1, sizeof *d);
  if (!d) return cddp__fail(CDDP_SYSTEM, "ddp: out of memory");
  d->comm = comm, d->op = op, d->n = n, d->per = per, d->overlap = 1, d->world = cddp_comm_world(comm);
  d->nb = (int)((n + per - 1) / per);
  d->b = calloc((size_t)d->nb, sizeof *d->b);
  d->grads = grads, d->grads_mine = grads == NULL;
  cddp_result_t r = !d->b ? cddp__fail(CDDP_SYSTEM, "ddp: out of memory")
                    : d->grads_mine ? cddp_comm_mem_alloc(comm, n * sizeof(float), (void **)&d->grads)
                                    : CDDP_OK;
  if (r != CDDP_OK) {
    free(d->b);
    free(d);
    return r;
  }
  if (d->grads_mine) memset(d->grads, 0, n * sizeof(float));
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
  for (int i = 0; i < d->nb; i++)
    if (d->b[i].qreq) cddp_wait(d->b[i].qreq);
  if (d->grads_mine) cddp_comm_mem_free(d->comm, d->grads);
  cddp_comm_mem_free(d->comm, d->wire);
  cddp_comm_mem_free(d->comm, d->sign_send);
  cddp_comm_mem_free(d->comm, d->sign_recv);
  cddp_comm_mem_free(d->comm, d->vwire);
  cddp_comm_mem_free(d->comm, d->pwire);
  cddp_comm_mem_free(d->comm, d->qwire);
  free(d->mats);
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
  for (int i = 0; i < d->nb; i++) d->b[i].started = 0, d->b[i].req = d->b[i].qreq = NULL;
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
  case CDDP_COMPRESS_POWERSGD: { /* the bucket's P's and raw tensors, summed */
    cddp__psgd_compress(d->mats + b->t0, b->t1 - b->t0, d->prank, d->grads, d->residual, d->qstate, d->pwire);
    r = cddp_iallreduce(d->comm, d->pwire + b->p0, d->pwire + b->p0, b->p1 - b->p0, CDDP_F32, CDDP_SUM, &b->req);
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

/* PowerSGD, a bucket's P's summed: orthonormalise them, Q = M^T P, start the Q's all-reduce. */
static cddp_result_t psgd_project(cddp_ddp_t *d, bucket_t *b) {
  cddp__psgd_project(d->mats + b->t0, b->t1 - b->t0, d->prank, d->grads, d->pwire, d->qwire);
  if (b->q1 == b->q0) return CDDP_OK;
  return cddp_iallreduce(d->comm, d->qwire + b->q0, d->qwire + b->q0, b->q1 - b->q0, CDDP_F32, CDDP_SUM, &b->qreq);
}

/* PowerSGD, every bucket's P's done: wait for each bucket's Q's and decode it. */
static cddp_result_t psgd_finish(cddp_ddp_t *d, cddp_result_t ret) {
  float up = d->op == CDDP_SUM ? (float)d->world : 1.0f, raw = d->op == CDDP_AVG ? 1.0f / (float)d->world : 1.0f;
  for (int i = 0; i < d->nb; i++) {
    bucket_t *b = &d->b[i];
    cddp_result_t r = b->qreq ? cddp_wait(b->qreq) : CDDP_OK;
    b->qreq = NULL;
    if (r != CDDP_OK && ret == CDDP_OK) ret = r;
    if (ret == CDDP_OK) /* the rest is still waited for after a failure */
      cddp__psgd_decode(d->mats + b->t0, b->t1 - b->t0, d->prank, d->grads, d->residual, d->qstate, d->pwire,
                        d->qwire, d->world, up, raw);
  }
  return ret;
}

/* A finished bucket's wire form back into float gradients (PowerSGD: on to the Q's). */
static void decode(cddp_ddp_t *d, bucket_t *b) {
  if (d->compress == CDDP_COMPRESS_POWERSGD) {
    cddp_result_t r = d->err == CDDP_OK ? psgd_project(d, b) : CDDP_OK;
    if (r != CDDP_OK && d->err == CDDP_OK) {
      d->err = r;
      snprintf(d->err_text, sizeof d->err_text, "%s", cddp_last_error());
    }
    return;
  }
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
  if (d->compress == CDDP_COMPRESS_POWERSGD) { /* two all-reduces: P's with the raw tensors, Q's */
    uint64_t payload = (d->pn + d->qn) * sizeof(float);
    d->st.bytes += payload;
    d->st.wire_bytes += w > 1 ? (uint64_t)((double)payload * 2.0 * (w - 1) / w) : 0;
    return;
  }
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
    if (d->compress == CDDP_COMPRESS_POWERSGD) ret = psgd_finish(d, ret == CDDP_OK ? d->err : ret);
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
  if (c != CDDP_COMPRESS_NONE && c != CDDP_COMPRESS_BF16 && c != CDDP_COMPRESS_SIGN && c != CDDP_COMPRESS_F16 &&
      c != CDDP_COMPRESS_POWERSGD)
    return cddp__fail(CDDP_INVALID_ARG, "ddp: unknown compression %d", (int)c);
  if (d->compress != CDDP_COMPRESS_NONE)
    return cddp__fail(CDDP_INVALID_USAGE, "ddp: compression is chosen once, after create");
  if (c == CDDP_COMPRESS_POWERSGD)
    return cddp__fail(CDDP_INVALID_USAGE, "ddp: powersgd needs the tensor shapes: choose it with cddp_ddp_set_powersgd");
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

/* PowerSGD's buckets: whole tensors from the end of the buffer, about per floats each, with
 * their ranges on the two wires (cddp__psgd_layout's order: tensor after tensor). */
static cddp_result_t psgd_buckets(cddp_ddp_t *d, size_t per) {
  int nb = 0;
  bucket_t *b = calloc((size_t)d->nmats, sizeof *b);
  if (!b) return cddp__fail(CDDP_SYSTEM, "ddp: out of memory");
  for (int hi = d->nmats; hi > 0; nb++) {
    int lo = hi - 1;
    size_t len = d->mats[lo].rows * d->mats[lo].cols;
    while (lo > 0 && len + d->mats[lo - 1].rows * d->mats[lo - 1].cols <= per) lo--, len += d->mats[lo].rows * d->mats[lo].cols;
    const cddp__psgd_mat_t *e = &d->mats[hi - 1];
    size_t p1 = e->woff + (e->lowrank ? e->rows * (size_t)d->prank : e->rows * e->cols), q1 = d->mats[lo].qoff;
    for (int i = lo; i < hi; i++)
      if (d->mats[i].lowrank) q1 = d->mats[i].qoff + d->mats[i].cols * (size_t)d->prank;
    b[nb] = (bucket_t){.lo = d->mats[lo].off, .hi = e->off + e->rows * e->cols, .t0 = lo, .t1 = hi,
                       .p0 = d->mats[lo].woff, .p1 = p1, .q0 = d->mats[lo].qoff, .q1 = q1};
    hi = lo;
  }
  free(d->b);
  d->b = b, d->nb = nb, d->st.buckets = nb;
  return CDDP_OK;
}

cddp_result_t cddp_ddp_set_powersgd(cddp_ddp_t *d, int rank, const cddp_ddp_tensor_t *t, int count) {
  if (d->compress != CDDP_COMPRESS_NONE)
    return cddp__fail(CDDP_INVALID_USAGE, "ddp: compression is chosen once, after create");
  if (rank < 1 || rank > 256) return cddp__fail(CDDP_INVALID_ARG, "ddp: powersgd rank %d is not in [1, 256]", rank);
  if (!t || count < 1) return cddp__fail(CDDP_INVALID_ARG, "ddp: powersgd needs the tensor table");
  size_t at = 0;
  for (int i = 0; i < count; i++) {
    if (t[i].offset != at || t[i].rows == 0 || t[i].cols == 0 || t[i].rows * t[i].cols > d->n - at)
      return cddp__fail(CDDP_INVALID_ARG, "ddp: tensor %d (offset %zu, %zu x %zu) does not follow at float %zu of %zu", i,
                        t[i].offset, t[i].rows, t[i].cols, at, d->n);
    at += t[i].rows * t[i].cols;
  }
  if (at != d->n) return cddp__fail(CDDP_INVALID_ARG, "ddp: the tensors cover %zu of the %zu floats", at, d->n);
  if (!(d->mats = calloc((size_t)count, sizeof *d->mats))) return cddp__fail(CDDP_SYSTEM, "ddp: out of memory");
  for (int i = 0; i < count; i++) d->mats[i] = (cddp__psgd_mat_t){.off = t[i].offset, .rows = t[i].rows, .cols = t[i].cols};
  d->nmats = count, d->prank = rank;
  d->pn = cddp__psgd_layout(d->mats, count, rank, &d->qn);
  CDDP_CHECK(psgd_buckets(d, d->per));
  if (!(d->residual = calloc(d->n + d->qn, sizeof(float)))) return cddp__fail(CDDP_SYSTEM, "ddp: out of memory");
  d->qstate = d->residual + d->n; /* zeros: each Q starts from its seed at the first step */
  CDDP_CHECK(cddp_comm_mem_alloc(d->comm, CDDP_MAX(d->pn, (size_t)1) * sizeof(float), (void **)&d->pwire));
  CDDP_CHECK(cddp_comm_mem_alloc(d->comm, CDDP_MAX(d->qn, (size_t)1) * sizeof(float), (void **)&d->qwire));
  d->compress = CDDP_COMPRESS_POWERSGD;
  CDDP_INFO(CDDP_SUB_DDP, "ddp: powersgd rank %d: %d tensors in %d buckets, %zu + %zu floats on the wire of %zu", rank,
            count, d->nb, d->pn, d->qn, d->n);
  return CDDP_OK;
}

float *cddp_ddp_residual(cddp_ddp_t *d) { return d->residual; }

/* sign: n; sign-Adam: 3n (residual, vloc, mloc); powersgd: n + its Q's */
size_t cddp__ddp_residual_len(const cddp_ddp_t *d) {
  return d->residual ? (d->mloc ? 3 * d->n : d->n + d->qn) : 0;
}

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
