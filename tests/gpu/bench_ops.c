/* bench_ops.c - the device layer's own kernels at a training size: one block of a GPT of
 * GPT-2 small's shape (d_model 768, 12 heads, context 1024, batch 8, byte vocabulary), each
 * operation timed alone (the mean of back-to-back calls after a warm-up), with what it moves
 * or computes per second beside it; then a whole step composed from those times (12 blocks,
 * the head, AdamW) and the model FLOP utilisation it would give against the bf16 GEMM peak
 * measured in the same run. It says where the time of a step on the GPU would go before the
 * models run there. --cpu: the CPU table at a small size, the harness's own check. Exit 77
 * without a GPU. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gpu/gpu_main.h"

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static const cddp_ops_t *d;

/* Random floats in [-1, 1) on the device (and bf16 copies when asked) */
static float *dev_random(size_t n, uint64_t seed) {
  float *h = malloc(n * sizeof *h), *p = d->alloc(n * sizeof *p);
  if (!h || !p) {
    fprintf(stderr, "bench_ops: out of memory for %zu floats\n", n);
    exit(1);
  }
  uint64_t x = 0x9e3779b97f4a7c15ull ^ seed;
  for (size_t i = 0; i < n; i++) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    h[i] = (float)((x >> 40) / (double)(1ull << 24)) * 2.0f - 1.0f;
  }
  d->to_device(p, h, n * sizeof *h);
  free(h);
  return p;
}

static uint16_t *dev_bf16(const float *src, size_t n) {
  uint16_t *p = d->alloc(n * 2);
  if (!p) exit(1);
  d->to_bf16(p, src, n);
  return p;
}

/* one operation: its name, the mean ms of `reps` calls after 2 warm-ups, and its rate */
typedef struct { const char *name; double ms, amount; const char *unit; int per_block; } row_t;
static row_t rows[32];
static int n_rows;

#define TIME(name_, per_block_, amount_, unit_, reps_, ...)                                  \
  do {                                                                                         \
    for (int w_ = 0; w_ < 2; w_++) { __VA_ARGS__; }                                                 \
    d->sync();                                                                                 \
    double t0_ = now_s();                                                                      \
    for (int r_ = 0; r_ < (reps_); r_++) { __VA_ARGS__; }                                           \
    d->sync();                                                                                 \
    rows[n_rows++] = (row_t){(name_), (now_s() - t0_) * 1e3 / (reps_), (amount_), (unit_),     \
                             (per_block_)};                                                    \
  } while (0)

int main(int argc, char **argv) {
  int on_cpu = argc > 1 && !strcmp(argv[1], "--cpu");
  d = on_cpu ? &cddp__ops_cpu : gpu_or_exit();
  /* GPT-2 small's block; the CPU check runs a shape 64x smaller in rows and 4x in width */
  int B = on_cpu ? 2 : 8, T = on_cpu ? 64 : 1024, C = on_cpu ? 192 : 768, H = on_cpu ? 3 : 12;
  int L = 12, V = 256, reps = on_cpu ? 2 : 20;
  int n = B * T;
  size_t NC = (size_t)n * C;
  printf("# %s table: one block of a GPT, B %d x T %d, d_model %d, %d heads; ms are the mean of %d "
         "back-to-back calls\n", d->name, B, T, C, H, reps);

  float *x = dev_random(NC, 1), *y = dev_random(NC, 2), *dy = dev_random(NC, 3), *dx = d->alloc(NC * 4);
  float *w = dev_random((size_t)C, 4), *b = dev_random((size_t)C, 5), *dw = d->alloc(C * 4), *db = d->alloc(C * 4);
  float *mean = d->alloc((size_t)n * 4), *rstd = d->alloc((size_t)n * 4);
  float *qkv = dev_random(3 * NC, 6), *dqkv = d->alloc(3 * NC * 4);
  float *att = d->alloc((size_t)B * H * T * T * 4), *scratch = d->alloc((size_t)T * T * 4);
  float *lse = d->alloc((size_t)B * H * T * 4); /* the fused attention's log-sum-exp per row */
  float *fc = dev_random(4 * NC, 7), *fcx = dev_random(4 * NC, 8), *b4 = dev_random(4 * (size_t)C, 9);
  float *W = dev_random((size_t)4 * C * C, 10), *Wg = d->alloc((size_t)4 * C * C * 4);
  uint16_t *x16 = dev_bf16(x, NC), *W16 = dev_bf16(W, (size_t)4 * C * C), *fc16 = dev_bf16(fc, 4 * NC);
  uint16_t *qkv16 = dev_bf16(qkv, 3 * NC);
  float *out4 = d->alloc(4 * NC * 4);
  float *wte = dev_random((size_t)V * C, 11), *dwte = d->alloc((size_t)V * C * 4);
  float *logits = d->alloc((size_t)n * V * 4), *prob = d->alloc((size_t)n * V * 4);
  uint8_t *tok_h = malloc((size_t)n), *tok = d->alloc((size_t)n);
  if (!dx || !dw || !db || !mean || !rstd || !dqkv || !att || !scratch || !lse || !Wg || !out4 || !dwte ||
      !logits || !prob || !tok_h || !tok) {
    fprintf(stderr, "bench_ops: out of memory\n");
    return 1;
  }
  for (int i = 0; i < n; i++) tok_h[i] = (uint8_t)(i * 7919 % V);
  d->to_device(tok, tok_h, (size_t)n);
  double f4 = 4.0; /* bytes per float */

  /* ---- the products of one block, forward and backward: 3 per linear (y, dx, dW) */
  double gf = 2.0 * n * (double)C * C; /* one C x C linear over n rows */
  TIME("GEMM fp32: the block's 12 products (qkv, proj, fc, fc proj; fwd, dx, dW)", 1,
       3 * 12 * gf / 1e12, "TFLOP/s", reps, {
         d->gemm(0, 1, n, 3 * C, C, 1.0f, x, W, 0.0f, out4);      /* qkv */
         d->gemm(0, 1, n, C, C, 1.0f, x, W, 0.0f, y);             /* proj */
         d->gemm(0, 1, n, 4 * C, C, 1.0f, x, W, 0.0f, out4);      /* fc */
         d->gemm(0, 1, n, C, 4 * C, 1.0f, fc, W, 0.0f, y);        /* fc proj */
         d->gemm(0, 0, n, C, 3 * C, 1.0f, qkv, W, 0.0f, dx);      /* dx of qkv */
         d->gemm(0, 0, n, C, C, 1.0f, dy, W, 0.0f, dx);           /* dx of proj */
         d->gemm(0, 0, n, C, 4 * C, 1.0f, fc, W, 0.0f, dx);       /* dx of fc */
         d->gemm(0, 0, n, 4 * C, C, 1.0f, dy, W, 0.0f, out4);     /* dx of fc proj */
         d->gemm(1, 0, 3 * C, C, n, 1.0f, qkv, x, 0.0f, Wg);      /* dW of qkv */
         d->gemm(1, 0, C, C, n, 1.0f, dy, x, 0.0f, Wg);           /* dW of proj */
         d->gemm(1, 0, 4 * C, C, n, 1.0f, fc, x, 0.0f, Wg);       /* dW of fc */
         d->gemm(1, 0, C, 4 * C, n, 1.0f, dy, fc, 0.0f, Wg);      /* dW of fc proj */
       });
  TIME("GEMM bf16: the same 12 products, bf16 operands", 0, 3 * 12 * gf / 1e12, "TFLOP/s", reps, {
    d->gemm_bf16(0, 1, n, 3 * C, C, 1.0f, x16, W16, 0.0f, out4);
    d->gemm_bf16(0, 1, n, C, C, 1.0f, x16, W16, 0.0f, y);
    d->gemm_bf16(0, 1, n, 4 * C, C, 1.0f, x16, W16, 0.0f, out4);
    d->gemm_bf16(0, 1, n, C, 4 * C, 1.0f, fc16, W16, 0.0f, y);
    d->gemm_bf16(0, 0, n, C, 3 * C, 1.0f, fc16, W16, 0.0f, dx);
    d->gemm_bf16(0, 0, n, C, C, 1.0f, x16, W16, 0.0f, dx);
    d->gemm_bf16(0, 0, n, C, 4 * C, 1.0f, fc16, W16, 0.0f, dx);
    d->gemm_bf16(0, 0, n, 4 * C, C, 1.0f, x16, W16, 0.0f, out4);
    d->gemm_bf16(1, 0, 3 * C, C, n, 1.0f, fc16, x16, 0.0f, Wg);
    d->gemm_bf16(1, 0, C, C, n, 1.0f, x16, x16, 0.0f, Wg);
    d->gemm_bf16(1, 0, 4 * C, C, n, 1.0f, fc16, x16, 0.0f, Wg);
    d->gemm_bf16(1, 0, C, 4 * C, n, 1.0f, x16, fc16, 0.0f, Wg);
  });
  /* ---- our kernels; bytes are what each must read and write at least */
  TIME("layernorm forward (x2 per block)", 2, (2.0 * NC * f4 + 2.0 * n * f4) / 1e9, "GB/s", reps,
       d->layernorm_forward(y, mean, rstd, x, w, b, n, C));
  TIME("layernorm backward (x2 per block)", 2, (3.0 * NC * f4) / 1e9, "GB/s", reps,
       d->layernorm_backward(dx, dw, db, dy, x, w, mean, rstd, n, C, 0));
  TIME("bias + GELU forward", 1, (2.0 * 4 * NC * f4) / 1e9, "GB/s", reps,
       d->bias_gelu_forward(out4, fcx, b4, n, 4 * C));
  TIME("GELU backward", 1, (3.0 * 4 * NC * f4) / 1e9, "GB/s", reps, d->gelu_backward(fc, fcx, 4 * NC));
  TIME("column sums (bias gradients, x4 per block)", 4, (NC * f4) / 1e9, "GB/s", reps,
       d->colsum(db, dy, n, C, 0));
  double attn_flop = 4.0 * B * (double)T * T * C / 2; /* QK^T and AV, causal half */
  /* the materialised form (the CPU's), timed beside the fused one a device's step uses */
  TIME("causal attention forward, materialised (not in a device's step)", 0, attn_flop / 1e12, "TFLOP/s", reps,
       d->attn_forward(y, att, qkv, B, T, C, H));
  TIME("causal attention backward, materialised (not in a device's step)", 0, 2 * attn_flop / 1e12, "TFLOP/s", reps,
       d->attn_backward(dqkv, dy, qkv, att, scratch, B, T, C, H));
  TIME("causal attention forward, fused (flash; fp32)", 1, attn_flop / 1e12, "TFLOP/s", reps,
       d->attn_flash_forward(y, lse, qkv, B, T, C, H));
  TIME("causal attention backward, fused (flash; fp32)", 1, 2 * attn_flop / 1e12, "TFLOP/s", reps,
       d->attn_flash_backward(dqkv, dy, qkv, y, lse, B, T, C, H));
  const int bwd32 = n_rows - 1;
  TIME("causal attention backward, fused (flash; bf16 tensor cores: train.precision bf16's)", 0, 2 * attn_flop / 1e12,
       "TFLOP/s", reps, d->attn_flash_backward_bf16(dqkv, dy, qkv, y, lse, B, T, C, H));
  const int bwd16 = n_rows - 1;
  TIME("causal attention forward, fused (flash; bf16 q, k, v; not in the step yet)", 0, attn_flop / 1e12, "TFLOP/s",
       reps, d->attn_flash_forward_bf16(y, lse, qkv16, B, T, C, H));
  const int fwd32 = bwd32 - 1; /* the fp32 forward's row, just before its backward's */
  TIME("causal attention forward, fused (flash; bf16 tensor cores: train.precision bf16's)", 0, attn_flop / 1e12,
       "TFLOP/s", reps, d->attn_flash_forward_tc(y, lse, qkv, B, T, C, H));
  const int fwd16 = n_rows - 1;
  TIME("head forward (tied, V 256)", 0, 2.0 * n * (double)C * V / 1e12, "TFLOP/s", reps,
       d->head_forward(logits, x, wte, n, C, V));
  TIME("softmax cross-entropy", 0, (2.0 * n * V * f4) / 1e9, "GB/s", reps,
       d->softmax_xent(prob, logits, tok, n, V));
  TIME("head backward", 0, 4.0 * n * (double)C * V / 1e12, "TFLOP/s", reps,
       d->head_backward(dx, dwte, prob, x, wte, n, C, V, 0));

  /* ---- AdamW over the whole model's parameters: 12 blocks + embeddings */
  size_t P = (size_t)L * (12 * (size_t)C * C + 13 * (size_t)C) + (size_t)(V + T) * C;
  if (on_cpu) P = (size_t)1 << 20;
  float *params = dev_random(P, 12), *grads = dev_random(P, 13);
  cddp_optim_t opt;
  cddp_optim_spec_t spec = {0};
  spec.kind = CDDP_OPTIM_ADAMW, spec.beta1 = 0.9f, spec.beta2 = 0.95f, spec.eps = 1e-8f;
  spec.weight_decay = 0.1f, spec.grad_clip = 1.0f;
  if (cddp__ops_optim_init(d, &opt, &spec, P) != CDDP_OK) {
    fprintf(stderr, "bench_ops: optimizer: %s\n", cddp_last_error());
    return 1;
  }
  TIME("AdamW + clipping, every parameter", 0, (7.0 * P * f4) / 1e9, "GB/s", reps,
       d->optim_step(&opt, params, grads, 1e-4f));

  /* ---- the step composed: fp32 or bf16 products, our kernels as measured */
  printf("%-74s %10s %12s\n", "operation", "ms", "rate");
  double block = 0, rest = 0, gemm32 = 0, gemm16 = 0;
  for (int i = 0; i < n_rows; i++) {
    row_t *r = &rows[i];
    printf("%-74s %10.3f %8.2f %s\n", r->name, r->ms, r->amount / (r->ms / 1e3), r->unit);
    if (i == 0) gemm32 = r->ms;
    else if (i == 1) gemm16 = r->ms;
    else if (r->per_block) block += r->per_block * r->ms;
    else rest += r->ms;
  }
  double flop = 6.0 * (double)P * n + 12.0 * L * (double)T * C * n / 2; /* the model FLOPs, causal */
  for (int bf = 0; bf < 2; bf++) {
    double step = L * (block + (bf ? gemm16 : gemm32)) + rest;
    printf("composed step, %s products: %.2f ms, %.0f tokens/s, %.2f model TFLOP/s\n",
           bf ? "bf16" : "fp32", step, n / (step / 1e3), flop / (step / 1e3) / 1e12);
  }
  { /* train.precision bf16's step: the attention on tensor cores in place of fp32's */
    double step = L * (block + gemm16 - rows[fwd32].ms - rows[bwd32].ms + rows[fwd16].ms + rows[bwd16].ms) + rest;
    printf("composed step, bf16 products and attention: %.2f ms, %.0f tokens/s, %.2f model TFLOP/s\n", step,
           n / (step / 1e3), flop / (step / 1e3) / 1e12);
  }
  printf("# MFU: model TFLOP/s over bench_gemm's bf16 peak from the same machine; our kernels' "
         "share of the bf16 step: %.0f%%\n",
         100.0 * (L * block + rest) / (L * (block + gemm16) + rest));
  return 0;
}
