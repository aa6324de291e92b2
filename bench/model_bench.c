/* model_bench.c - training-step speed of the model on one core: forward + backward + an SGD
 * axpy over the parameters at micro-batch B, beside this process's own sgemm peak.
 * Build: make lib && make -C bench model   (or: make -C bench build/bench/model_bench)
 * Run:   build/bench/model_bench [-b 128] [-w 1024,1024] [-n 40] [-r 5] [-t 1] [-p 2048] [-g]
 *        [-c 16,32 (a CNN with these conv channels; -w are then its fc widths)] [-k 3]
 * -g also times each orientation of the three GEMMs of every linear layer.
 * -z: the SGD pass also zeroes the gradients and backward accumulates (beta=1), instead of
 *     backward overwriting them (beta=0: OpenBLAS zeroes them in a pass of its own). */
#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cddp/cddp.h"
#include "trainer/layers.h"
#include "trainer/model.h"

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* this thread's CPU time: what the step cost when other programs share the cores */
static double cpu_now(void) {
  struct timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static float *rnd(size_t n, uint64_t *s) {
  float *p = aligned_alloc(64, (n * sizeof(float) + 63) & ~(size_t)63);
  for (size_t i = 0; i < n; i++) {
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    p[i] = (float)(*s >> 40) / 16777216.0f - 0.5f;
  }
  return p;
}

static int parse_list(const char *arg, int *out, int max) {
  int n = 0;
  char *copy = strdup(arg), *save = NULL;
  for (char *t = strtok_r(copy, ",", &save); t && n < max; t = strtok_r(NULL, ",", &save))
    out[n++] = atoi(t);
  free(copy);
  return n;
}

/* With one BLAS thread the GEMM timings use this thread's CPU time: robust to other programs
 * on the cores. */
static int cpu_clock;
static double gemm_clock(void) { return cpu_clock ? cpu_now() : now(); }

/* Best time of reps runs of iters calls of C[M,N] = op(A) op(B) (RowMajor). */
static double time_gemm(int ta, int tb, int M, int N, int K, float beta, int iters, int reps) {
  uint64_t s = 7;
  float *A = rnd((size_t)M * K, &s), *B = rnd((size_t)K * N, &s), *C = rnd((size_t)M * N, &s);
  int lda = ta ? M : K, ldb = tb ? K : N;
  double best = 1e30;
  for (int r = 0; r < reps; r++) {
    double t0 = gemm_clock();
    for (int i = 0; i < iters; i++)
      cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
                  M, N, K, 1.0f, A, lda, B, ldb, beta, C, N);
    double t = (gemm_clock() - t0) / iters;
    if (t < best) best = t;
  }
  free(A), free(B), free(C);
  return best;
}

static void gemm_line(const char *what, int ta, int tb, int M, int N, int K, float beta) {
  double t = time_gemm(ta, tb, M, N, K, beta, 20, 5);
  printf("  %-34s %c%c M=%5d N=%5d K=%5d beta=%g %8.1f us %6.1f GFLOP/s\n", what, ta ? 'T' : 'N',
         tb ? 'T' : 'N', M, N, K, beta, t * 1e6, 2.0 * M * N * K / t * 1e-9);
}

/* The orientations a linear layer [n,in] -> [n,out] could use (RowMajor storage). */
static void gemm_variants(int n, int in, int out) {
  printf("linear %d -> %d at batch %d:\n", in, out, n);
  gemm_line("fwd  y[n,out] = x W^T       (used)", 0, 1, n, out, in, 0);
  gemm_line("fwd  yT[out,n] = W xT  (feat-major)", 0, 0, out, n, in, 0);
  gemm_line("dW[out,in] = dy^T x         (used)", 1, 0, out, in, n, 0);
  gemm_line("dW[out,in] = dy^T x  accumulate", 1, 0, out, in, n, 1);
  gemm_line("dW[out,in] = dyT xT^T (feat-major)", 0, 1, out, in, n, 0);
  gemm_line("dx[n,in] = dy W             (used)", 0, 0, n, in, out, 0);
  gemm_line("dxT[in,n] = W^T dyT  (feat-major)", 1, 0, in, n, out, 0);
}

int main(int argc, char **argv) {
  int batch = 128, iters = 40, reps = 5, threads = 1, peak_n = 2048, variants = 0, kernel = 3;
  int zero_in_sgd = 0;
  int widths[CDDP_MODEL_MAX_LAYERS] = {1024, 1024}, n_widths = 2;
  int convs[CDDP_MODEL_MAX_LAYERS] = {0}, n_convs = 0;
  int opt;
  while ((opt = getopt(argc, argv, "b:w:n:r:t:p:gc:k:zh")) != -1) {
    switch (opt) {
      case 'b': batch = atoi(optarg); break;
      case 'w': n_widths = parse_list(optarg, widths, CDDP_MODEL_MAX_LAYERS); break;
      case 'n': iters = atoi(optarg); break;
      case 'r': reps = atoi(optarg); break;
      case 't': threads = atoi(optarg); break;
      case 'p': peak_n = atoi(optarg); break;
      case 'g': variants = 1; break;
      case 'c': n_convs = parse_list(optarg, convs, CDDP_MODEL_MAX_LAYERS); break;
      case 'k': kernel = atoi(optarg); break;
      case 'z': zero_in_sgd = 1; break;
      default:
        fprintf(stderr, "usage: %s [-b batch] [-w w0,w1,..] [-c c0,c1,..] [-k kernel] [-n iters] "
                        "[-r reps] [-t blas_threads] [-p peak_size] [-g] [-z]\n", argv[0]);
        return 2;
    }
  }
  cddp_model_spec_t spec = {.kind = n_convs ? CDDP_MODEL_CNN : CDDP_MODEL_MLP,
                            .in_c = 1, .in_h = 28, .in_w = 28, .n_classes = 10,
                            .n_hidden = n_widths, .n_conv = n_convs, .kernel = kernel};
  memcpy(spec.hidden, widths, sizeof widths);
  memcpy(spec.conv_channels, convs, sizeof convs);
  cddp_model_t *m;
  if (cddp__model_create(&spec, batch, &m) != CDDP_OK) {
    fprintf(stderr, "model_bench: %s\n", cddp_last_error());
    return 1;
  }
  openblas_set_num_threads(threads);
  cpu_clock = threads == 1;
  printf("# OpenBLAS %s, core %s, %d thread(s)\n", openblas_get_config(), openblas_get_corename(),
         threads);

  double tp = time_gemm(0, 0, peak_n, peak_n, peak_n, 0, 2, 3);
  double peak = 2.0 * peak_n * peak_n * (double)peak_n / tp * 1e-9;
  printf("# sgemm peak %dx%dx%d: %.1f GFLOP/s%s\n", peak_n, peak_n, peak_n, peak,
         cpu_clock ? " (thread CPU time)" : "");
  if (variants) {
    int in = spec.in_c * spec.in_h * spec.in_w;
    for (int i = 0; i <= n_widths && !n_convs; i++) {
      int out = i < n_widths ? widths[i] : spec.n_classes;
      gemm_variants(batch, in, out);
      in = out;
    }
  }

  size_t np = cddp__model_param_count(m), in_floats = (size_t)spec.in_c * spec.in_h * spec.in_w;
  uint64_t s = 1;
  float *params = aligned_alloc(64, np * sizeof(float)), *grads = aligned_alloc(64, np * sizeof(float));
  float *x = rnd((size_t)batch * in_floats, &s);
  uint8_t *y = malloc((size_t)batch);
  for (int i = 0; i < batch; i++) y[i] = (uint8_t)(i % 10);
  cddp__model_bind(m, params, grads);
  cddp__model_init_params(m, 42);
  double flops = cddp__model_flops_per_sample(m);
  const float lr = 1e-3f;

  double best = 1e30, sum = 0, tf = 0, tb = 0, ts = 0, loss = 0, cpu_best = 1e30;
  memset(grads, 0, np * sizeof(float));
  for (int w = 0; w < 3; w++) { /* warm-up */
    cddp__model_forward(m, x, y, batch, NULL);
    cddp__model_backward(m, 1.0f / batch, 0, NULL, NULL);
  }
  memset(grads, 0, np * sizeof(float));
  for (int r = 0; r < reps; r++) {
    double t0 = now(), c0 = cpu_now(), f = 0, b = 0, g = 0;
    for (int i = 0; i < iters; i++) {
      double a = now();
      loss = cddp__model_forward(m, x, y, batch, NULL);
      double c = now();
      cddp__model_backward(m, 1.0f / batch, zero_in_sgd, NULL, NULL);
      double d = now();
      if (zero_in_sgd) {
        for (size_t j = 0; j < np; j++) params[j] -= lr * grads[j], grads[j] = 0.0f;
      } else {
        for (size_t j = 0; j < np; j++) params[j] -= lr * grads[j];
      }
      double e = now();
      f += c - a, b += d - c, g += e - d;
    }
    double t = (now() - t0) / iters, ct = (cpu_now() - c0) / iters;
    sum += t;
    if (ct < cpu_best) cpu_best = ct;
    if (t < best) best = t, tf = f / iters, tb = b / iters, ts = g / iters;
  }
  /* against the peak: the CPU-time figure with one thread (the peak is timed the same way) */
  double gf = flops * batch / (cpu_clock ? cpu_best : best) * 1e-9;
  printf("# model %s, %zu params, %.3f MFLOP/sample (fwd+bwd GEMMs), batch %d, loss %.4f\n",
         n_convs ? "cnn" : "mlp", np, flops * 1e-6, batch, loss / batch);
  printf("step  best %7.3f ms (fwd %.3f  bwd %.3f  sgd %.3f)  mean %7.3f ms\n", best * 1e3,
         tf * 1e3, tb * 1e3, ts * 1e3, sum / reps * 1e3);
  /* CPU time of this thread says what a step costs when other programs share the cores; with
   * more BLAS threads it misses theirs, so it is shown for one thread only */
  printf("samples/s %.0f (best)  %.0f (mean)", batch / best, batch / (sum / reps));
  if (threads == 1) printf("  %.0f (CPU time, best)", batch / cpu_best);
  printf("   %.1f GFLOP/s = %.0f%% of sgemm peak\n", gf, 100.0 * gf / peak);
  free(params), free(grads), free(x), free(y);
  cddp__model_destroy(m);
  return 0;
}
