// k_optim.cu - SGD (momentum, Nesterov, L2) and AdamW on the device, with the global-norm
// clipping of torch.nn.utils.clip_grad_norm_: the norm first (one reduction, read back), then
// one pass that scales the gradient by cs and updates. The formulas are optim.c's.
#include <math.h>

#include "trainer/cuda/cuda_ops.h"
#include "trainer/cuda/cuda_util.h"

#define THREADS 256

// grads are scaled by cs, and written back only when clipping happened (write_g)
__global__ void k_sgd(float *p, float *g, float *m, size_t n, float lr, float wd, float mom, int nesterov, float cs,
                      int write_g) {
  size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (i >= n) return;
  float gi = g[i] * cs;
  if (write_g) g[i] = gi;
  gi += wd * p[i];
  if (!m) {
    p[i] -= lr * gi;
    return;
  }
  float b = m[i] * mom + gi; // torch: buf = momentum buf + g (buf starts at 0)
  m[i] = b;
  p[i] -= lr * (nesterov ? gi + mom * b : b);
}

// p = p decay - step_size m / (sqrt(v) inv_bc2_sqrt + eps), after the moments' updates
__global__ void k_adamw(float *p, float *g, float *m, float *v, size_t n, float decay, float b1, float b2,
                        float step_size, float inv_bc2_sqrt, float eps, float cs, int write_g) {
  size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (i >= n) return;
  float gi = g[i] * cs;
  if (write_g) g[i] = gi;
  float mi = m[i] * b1 + gi * (1.0f - b1);
  float vi = v[i] * b2 + gi * gi * (1.0f - b2);
  m[i] = mi;
  v[i] = vi;
  p[i] = p[i] * decay - step_size * (mi / (sqrtf(vi) * inv_bc2_sqrt + eps));
}

double cu_optim_step(cddp_optim_t *o, float *params, float *grads, float lr) {
  const cddp_optim_spec_t *s = &o->spec;
  const size_t n = o->n;
  o->t++;
  double norm = sqrt(cu_sumsq(grads, n));
  float cs = 1.0f;
  int clipped = 0;
  if (s->grad_clip > 0) {
    float coef = s->grad_clip / ((float)norm + 1e-6f);
    if (!(coef >= 1.0f)) cs = coef, clipped = 1;
  }
  cudaStream_t st = cddp__cuda_stream();
  if (s->kind == CDDP_OPTIM_SGD) {
    k_sgd<<<cdiv(n, THREADS), THREADS, 0, st>>>(params, grads, s->momentum != 0 ? o->m : NULL, n, lr,
                                                 s->weight_decay, s->momentum, s->nesterov, cs, clipped);
  } else {
    double bc1 = 1.0 - pow((double)s->beta1, (double)o->t), bc2 = 1.0 - pow((double)s->beta2, (double)o->t);
    k_adamw<<<cdiv(n, THREADS), THREADS, 0, st>>>(
        params, grads, o->m, o->v, n, (float)(1.0 - (double)lr * s->weight_decay), o->m_external ? 0.0f : s->beta1,
        o->v_external ? 1.0f : s->beta2, (float)((double)lr / bc1), o->v_external ? 1.0f : (float)(1.0 / sqrt(bc2)),
        s->eps, cs, clipped);
  }
  CUDA_LAUNCHED();
  return norm;
}
