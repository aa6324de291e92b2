/* gpt_bench.c - training-step speed of the byte-level GPT on one core: forward + backward +
 * an SGD axpy over the parameters at B sequences of T tokens, in tokens/s (wall clock and this
 * thread's CPU time) and as a share of this process's own sgemm peak.
 * Build: make lib && make -C bench gpt
 * Run:   build/bench/gpt_bench [-b 16] [-T 128] [-l 4] [-H 4] [-d 256] [-n 5] [-r 5] [-t 1]
 *        [-p 2048] [-P fp32|bf16] (bf16: the model's products in gemm_bf16.c; the peak stays sgemm's) */
#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cddp/cddp.h"
#include "trainer/gemm.h"
#include "trainer/gpt.h"

static double clock_of(clockid_t id) {
  struct timespec t;
  clock_gettime(id, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}
static double now(void) { return clock_of(CLOCK_MONOTONIC); }
/* this thread's CPU time: what the step cost when other programs share the cores */
static double cpu_now(void) { return clock_of(CLOCK_THREAD_CPUTIME_ID); }

static float *rnd(size_t n, uint64_t *s) {
  float *p = aligned_alloc(64, (n * sizeof(float) + 63) & ~(size_t)63);
  for (size_t i = 0; i < n; i++) {
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    p[i] = (float)(*s >> 40) / 16777216.0f - 0.5f;
  }
  return p;
}

int main(int argc, char **argv) {
  int B = 16, iters = 5, reps = 5, threads = 1, peak_n = 2048, bf16 = 0, opt;
  cddp_gpt_spec_t spec = {.n_layer = 4, .n_head = 4, .d_model = 256, .context = 128,
                          .vocab = CDDP_GPT_VOCAB};
  while ((opt = getopt(argc, argv, "b:T:l:H:d:n:r:t:p:P:h")) != -1) {
    switch (opt) {
      case 'b': B = atoi(optarg); break;
      case 'T': spec.context = atoi(optarg); break;
      case 'l': spec.n_layer = atoi(optarg); break;
      case 'H': spec.n_head = atoi(optarg); break;
      case 'd': spec.d_model = atoi(optarg); break;
      case 'n': iters = atoi(optarg); break;
      case 'r': reps = atoi(optarg); break;
      case 't': threads = atoi(optarg); break;
      case 'p': peak_n = atoi(optarg); break;
      case 'P': bf16 = strcmp(optarg, "bf16") == 0; break;
      default:
        fprintf(stderr, "usage: %s [-b batch] [-T context] [-l layers] [-H heads] [-d d_model] "
                        "[-n iters] [-r reps] [-t blas_threads] [-p peak_size] [-P fp32|bf16]\n", argv[0]);
        return 2;
    }
  }
  if (cddp__gemm_set_precision(bf16 ? CDDP_PRECISION_BF16 : CDDP_PRECISION_FP32) != CDDP_OK) {
    fprintf(stderr, "gpt_bench: %s\n", cddp_last_error());
    return 2;
  }
  cddp_gpt_t *m;
  if (cddp__gpt_create(&spec, B, &m) != CDDP_OK) {
    fprintf(stderr, "gpt_bench: %s\n", cddp_last_error());
    return 1;
  }
  openblas_set_num_threads(threads);
  if (bf16) cddp__gemm_bf16_set_threads(threads);
  printf("# OpenBLAS %s, core %s, %d thread(s); model products in %s\n", openblas_get_config(),
         openblas_get_corename(), threads, bf16 ? "bf16 (gemm_bf16.c, the same threads)" : "fp32");
  uint64_t s = 7;
  {
    float *A = rnd((size_t)peak_n * peak_n, &s), *Bm = rnd((size_t)peak_n * peak_n, &s),
          *Cm = rnd((size_t)peak_n * peak_n, &s);
    double best = 1e30;
    for (int r = 0; r < 3; r++) {
      double t0 = threads == 1 ? cpu_now() : now();
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, peak_n, peak_n, peak_n, 1.0f, A,
                  peak_n, Bm, peak_n, 0.0f, Cm, peak_n);
      double t = (threads == 1 ? cpu_now() : now()) - t0;
      if (t < best) best = t;
    }
    free(A), free(Bm), free(Cm);
    s = 2.0 * peak_n * peak_n * (double)peak_n / best * 1e-9 * 1000; /* MFLOP/s, kept in s */
  }
  double peak = (double)s / 1000.0;
  printf("# sgemm peak %d^3: %.1f GFLOP/s%s\n", peak_n, peak, threads == 1 ? " (thread CPU time)" : "");

  size_t np = cddp__gpt_param_count(m), ntok = (size_t)B * spec.context;
  float *params = aligned_alloc(64, np * sizeof(float)), *grads = aligned_alloc(64, np * sizeof(float));
  uint8_t *tok = malloc(ntok + 1);
  for (size_t i = 0; i <= ntok; i++) tok[i] = (uint8_t)("In the beginning God created "[i % 29]);
  cddp__gpt_bind(m, params, grads);
  cddp__gpt_init_params(m, 42);
  const float lr = 1e-4f;
  double loss = 0, best = 1e30, cpu_best = 1e30, sum = 0, tf = 0, tb = 0;
  for (int w = 0; w < 2; w++) { /* warm-up */
    cddp__gpt_forward(m, tok, tok + 1, B, spec.context);
    cddp__gpt_backward(m, 1.0f / ntok, 0, NULL, NULL);
  }
  for (int r = 0; r < reps; r++) {
    double t0 = now(), c0 = cpu_now(), f = 0, b = 0;
    for (int i = 0; i < iters; i++) {
      double a = now();
      loss = cddp__gpt_forward(m, tok, tok + 1, B, spec.context);
      double c = now();
      cddp__gpt_backward(m, 1.0f / ntok, 0, NULL, NULL);
      f += c - a, b += now() - c;
      for (size_t j = 0; j < np; j++) params[j] -= lr * grads[j];
    }
    double t = (now() - t0) / iters, ct = (cpu_now() - c0) / iters;
    sum += t;
    if (ct < cpu_best) cpu_best = ct;
    if (t < best) best = t, tf = f / iters, tb = b / iters;
  }
  double flops = cddp__gpt_flops_per_token(m) * ntok;
  double gf = flops / (threads == 1 ? cpu_best : best) * 1e-9;
  printf("# gpt %d layers, %d heads, d_model %d, context %d: %zu params, %.2f MFLOP/token "
         "(fwd+bwd GEMMs), batch %d x %d = %zu tokens, loss %.4f\n",
         spec.n_layer, spec.n_head, spec.d_model, spec.context, np,
         cddp__gpt_flops_per_token(m) * 1e-6, B, spec.context, ntok, loss / ntok);
  printf("step  best %7.1f ms (fwd %.1f  bwd %.1f)  mean %7.1f ms\n", best * 1e3, tf * 1e3,
         tb * 1e3, sum / reps * 1e3);
  printf("tokens/s %.0f (best)  %.0f (mean)", ntok / best, ntok / (sum / reps));
  if (threads == 1) printf("  %.0f (CPU time, best)", ntok / cpu_best);
  printf("   %.1f GFLOP/s = %.0f%% of sgemm peak\n", gf, 100.0 * gf / peak);
  free(params), free(grads), free(tok);
  cddp__gpt_destroy(m);
  return 0;
}
