/* optim.c - SGD (momentum, Nesterov, L2) and AdamW as torch.optim computes them, with global-norm
 * gradient clipping; each update is one vectorised pass over params, grads and state. */
#include "trainer/optim.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/check.h"

/* -O2 in GCC 12 vectorises only loops without a scalar tail: these loops are the whole
 * optimizer step, so ask for O3 here. sqrtf keeps its errno branch even so (the pragma cannot
 * lift -fmath-errno), hence the SSE body of the AdamW loop (docs/optim.md). */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("O3")
#endif
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

static int finite_nonneg(float x) { return isfinite(x) && x >= 0; }

cddp_result_t cddp__optim_check(const cddp_optim_spec_t *s) {
  if (s->kind != CDDP_OPTIM_SGD && s->kind != CDDP_OPTIM_ADAMW)
    return cddp__fail(CDDP_INVALID_ARG, "optimizer: unknown kind %d (sgd or adamw)", (int)s->kind);
  if (!finite_nonneg(s->weight_decay))
    return cddp__fail(CDDP_INVALID_ARG, "optimizer: weight_decay %g must be >= 0", s->weight_decay);
  if (!finite_nonneg(s->grad_clip))
    return cddp__fail(CDDP_INVALID_ARG, "optimizer: grad_clip %g must be >= 0 (0 = off)",
                      s->grad_clip);
  if (s->kind == CDDP_OPTIM_SGD) {
    if (!finite_nonneg(s->momentum))
      return cddp__fail(CDDP_INVALID_ARG, "optimizer: momentum %g must be >= 0", s->momentum);
    if (s->nesterov && s->momentum == 0)
      return cddp__fail(CDDP_INVALID_ARG, "optimizer: nesterov needs a momentum > 0");
  } else {
    if (!(s->beta1 >= 0 && s->beta1 < 1))
      return cddp__fail(CDDP_INVALID_ARG, "optimizer: beta1 %g must be in [0, 1)", s->beta1);
    if (!(s->beta2 >= 0 && s->beta2 < 1))
      return cddp__fail(CDDP_INVALID_ARG, "optimizer: beta2 %g must be in [0, 1)", s->beta2);
    if (!finite_nonneg(s->eps))
      return cddp__fail(CDDP_INVALID_ARG, "optimizer: eps %g must be >= 0", s->eps);
  }
  return CDDP_OK;
}

int cddp__optim_moments(const cddp_optim_spec_t *s) {
  return s->kind == CDDP_OPTIM_ADAMW ? 2 : s->momentum != 0;
}

cddp_result_t cddp__optim_init(cddp_optim_t *o, const cddp_optim_spec_t *spec, size_t n) {
  memset(o, 0, sizeof *o);
  if (n == 0) return cddp__fail(CDDP_INVALID_ARG, "optimizer: no parameters");
  CDDP_CHECK(cddp__optim_check(spec));
  o->spec = *spec;
  o->n = n;
  int moments = cddp__optim_moments(spec);
  if (moments >= 1 && !(o->m = calloc(n, sizeof(float)))) goto oom;
  if (moments >= 2 && !(o->v = calloc(n, sizeof(float)))) goto oom;
  return CDDP_OK;
oom:
  cddp__optim_free(o);
  return cddp__fail(CDDP_SYSTEM, "optimizer: out of memory for %zu parameters", n);
}

void cddp__optim_free(cddp_optim_t *o) {
  if (!o) return;
  free(o->m);
  free(o->v);
  memset(o, 0, sizeof *o);
}

/* Sum of squares in double, 8 independent lanes so the loop vectorises without reordering. */
static double sum_squares(const float *restrict g, size_t n) {
  double acc[8] = {0};
  size_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int l = 0; l < 8; l++) acc[l] += (double)g[i + l] * g[i + l];
  double s = 0;
  for (; i < n; i++) s += (double)g[i] * g[i];
  for (int l = 0; l < 8; l++) s += acc[l];
  return s;
}

/* The same over one short block (<= FUSE_BLOCK) in float lanes, 4x cheaper than converting
 * each element: the block's 16 partial sums hold ~256 terms each, far from float's limits,
 * and the blocks are added in double. Only for the logged norm; clipping uses the exact one. */
static double sum_squares_block(const float *restrict g, size_t n) {
  float acc[16] = {0};
  size_t i = 0;
  for (; i + 16 <= n; i += 16)
    for (int l = 0; l < 16; l++) acc[l] += g[i + l] * g[i + l];
  double s = 0;
  for (; i < n; i++) s += (double)g[i] * g[i];
  for (int l = 0; l < 16; l++) s += acc[l];
  return s;
}

/* The kernels take the clip scale cs (1 when not clipping) and write the scaled gradient back
 * only when clipping happened, so clipping costs no extra pass. */

static void sgd_plain(float *restrict p, float *restrict g, size_t n, float lr, float wd, float cs,
                      int write_g) {
  for (size_t i = 0; i < n; i++) {
    float gi = g[i] * cs;
    if (write_g) g[i] = gi;
    gi = gi + wd * p[i];
    p[i] = p[i] - lr * gi;
  }
}

/* torch: buf = momentum * buf + g (buf starts at 0, so the first step gives buf = g exactly);
 * Nesterov steps along g + momentum * buf, plain momentum along buf. */
static void sgd_momentum(float *restrict p, float *restrict g, float *restrict m, size_t n,
                         float lr, float wd, float mom, int nesterov, float cs, int write_g) {
  if (nesterov) {
    for (size_t i = 0; i < n; i++) {
      float gi = g[i] * cs;
      if (write_g) g[i] = gi;
      gi = gi + wd * p[i];
      float b = m[i] * mom + gi;
      m[i] = b;
      p[i] = p[i] - lr * (gi + mom * b);
    }
  } else {
    for (size_t i = 0; i < n; i++) {
      float gi = g[i] * cs;
      if (write_g) g[i] = gi;
      gi = gi + wd * p[i];
      float b = m[i] * mom + gi;
      m[i] = b;
      p[i] = p[i] - lr * b;
    }
  }
}

/* torch.optim.AdamW: p *= 1 - lr*wd; m = b1*m + (1-b1) g; v = b2*v + (1-b2) g^2;
 * p -= (lr / bc1) * m / (sqrt(v) / sqrt(bc2) + eps). */
static void adamw(float *restrict p, float *restrict g, float *restrict m, float *restrict v,
                  size_t n, float decay, float b1, float b2, float step_size, float inv_bc2_sqrt,
                  float eps, float cs, int write_g) {
  const float c1 = 1.0f - b1, c2 = 1.0f - b2;
  size_t i = 0;
#if defined(__SSE2__)
  /* The same operations as the scalar loop below, four lanes at a time. */
  const __m128 vcs = _mm_set1_ps(cs), vb1 = _mm_set1_ps(b1), vc1 = _mm_set1_ps(c1),
               vb2 = _mm_set1_ps(b2), vc2 = _mm_set1_ps(c2), vdec = _mm_set1_ps(decay),
               vss = _mm_set1_ps(step_size), vib = _mm_set1_ps(inv_bc2_sqrt),
               veps = _mm_set1_ps(eps);
  for (; i + 4 <= n; i += 4) {
    __m128 gi = _mm_mul_ps(_mm_loadu_ps(g + i), vcs);
    if (write_g) _mm_storeu_ps(g + i, gi);
    __m128 mi = _mm_add_ps(_mm_mul_ps(_mm_loadu_ps(m + i), vb1), _mm_mul_ps(gi, vc1));
    __m128 vi = _mm_add_ps(_mm_mul_ps(_mm_loadu_ps(v + i), vb2),
                           _mm_mul_ps(_mm_mul_ps(gi, gi), vc2));
    _mm_storeu_ps(m + i, mi);
    _mm_storeu_ps(v + i, vi);
    __m128 denom = _mm_add_ps(_mm_mul_ps(_mm_sqrt_ps(vi), vib), veps);
    __m128 pi = _mm_sub_ps(_mm_mul_ps(_mm_loadu_ps(p + i), vdec),
                           _mm_mul_ps(vss, _mm_div_ps(mi, denom)));
    _mm_storeu_ps(p + i, pi);
  }
#endif
  for (; i < n; i++) {
    float gi = g[i] * cs;
    if (write_g) g[i] = gi;
    float mi = m[i] * b1 + gi * c1;
    float vi = v[i] * b2 + gi * gi * c2;
    m[i] = mi;
    v[i] = vi;
    float denom = sqrtf(vi) * inv_bc2_sqrt + eps;
    p[i] = p[i] * decay - step_size * (mi / denom);
  }
}

/* Updates [i0, i0+len) of every buffer. */
static void update_range(cddp_optim_t *o, float *params, float *grads, size_t i0, size_t len,
                         float lr, float cs, int clipped, const float adam[4]) {
  const cddp_optim_spec_t *s = &o->spec;
  float *p = params + i0, *g = grads + i0;
  if (s->kind == CDDP_OPTIM_SGD) {
    if (s->momentum == 0)
      sgd_plain(p, g, len, lr, s->weight_decay, cs, clipped);
    else
      sgd_momentum(p, g, o->m + i0, len, lr, s->weight_decay, s->momentum, s->nesterov, cs,
                   clipped);
  } else {
    /* v_external: beta2 1 keeps v as it is (v * 1 + g^2 * 0), adam[2] is then 1 */
    adamw(p, g, o->m + i0, o->v + i0, len, adam[0], o->m_external ? 0.0f : s->beta1, o->v_external ? 1.0f : s->beta2, adam[1], adam[2],
          s->eps, cs, clipped);
  }
}

/* Elements per block when the norm is taken in the same pass as the update: the block's
 * gradients are still in L1 when the update reads them (16 KiB of each buffer). */
#define FUSE_BLOCK 4096

/* Counts the step and returns AdamW's per-step scalars (decay factor, step size, 1/sqrt(bc2)). */
static void begin_step(cddp_optim_t *o, float lr, float adam[4]) {
  const cddp_optim_spec_t *s = &o->spec;
  o->t++;
  if (s->kind != CDDP_OPTIM_ADAMW) return;
  double bc1 = 1.0 - pow((double)s->beta1, (double)o->t);
  double bc2 = 1.0 - pow((double)s->beta2, (double)o->t);
  adam[0] = (float)(1.0 - (double)lr * s->weight_decay); /* decoupled decay factor */
  adam[1] = (float)((double)lr / bc1);                    /* step size */
  adam[2] = o->v_external ? 1.0f : (float)(1.0 / sqrt(bc2)); /* 1 / sqrt(bias correction 2) */
}

double cddp__optim_sumsq(const float *grads, size_t n) { return sum_squares(grads, n); }

/* torch.nn.utils.clip_grad_norm_, in float32 as torch computes it: the update scales (and
 * stores) the gradients in its pass. A non-finite norm gives a NaN scale there too, so the
 * caller must check the norm. */
static void clipped_update(cddp_optim_t *o, float *params, float *grads, float lr, double norm,
                           const float adam[4]) {
  float coef = o->spec.grad_clip / ((float)norm + 1e-6f), cs = 1.0f;
  int clipped = 0;
  if (!(coef >= 1.0f)) cs = coef, clipped = 1;
  update_range(o, params, grads, 0, o->n, lr, cs, clipped, adam);
}

void cddp__optim_step_shard(cddp_optim_t *o, float *params, float *grads, float lr, double norm) {
  float adam[4] = {0};
  begin_step(o, lr, adam);
  if (o->spec.grad_clip <= 0) update_range(o, params, grads, 0, o->n, lr, 1.0f, 0, adam);
  else clipped_update(o, params, grads, lr, norm, adam);
}

double cddp__optim_step(cddp_optim_t *o, float *params, float *grads, float lr) {
  const size_t n = o->n;
  float adam[4] = {0};
  begin_step(o, lr, adam);
  if (o->spec.grad_clip <= 0) {
    /* No clipping: the norm (for the caller's log) rides along with the update, one pass. */
    double ss = 0;
    for (size_t i = 0; i < n; i += FUSE_BLOCK) {
      size_t len = CDDP_MIN((size_t)FUSE_BLOCK, n - i);
      ss += sum_squares_block(grads + i, len);
      update_range(o, params, grads, i, len, lr, 1.0f, 0, adam);
    }
    return sqrt(ss);
  }
  double norm = sqrt(sum_squares(grads, n)); /* the whole norm first, then the update */
  clipped_update(o, params, grads, lr, norm, adam);
  return norm;
}
