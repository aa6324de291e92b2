/* recompute_bench.c - model.recompute none | attn | block on the byte-level GPT, in one run:
 * each mode trains in a process of its own (forked, so each peak RSS is its own), the modes
 * taking turns round after round. Per mode: the activation buffers' bytes, the process's peak
 * RSS, the median step (forward + backward + SGD; wall clock, and this thread's CPU time, which
 * other programs' load does not inflate) against none's, and whether the gradients are bitwise
 * none's (an FNV-1a hash of the last step's).
 * Build: make lib && make -C bench recompute
 * Run:   build/bench/recompute_bench [-b 16] [-T 128] [-l 4] [-H 4] [-d 256] [-n 6] [-r 3]
 *        [-t 1] [-P fp32|bf16] */
#include <cblas.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cddp/cddp.h"
#include "trainer/gemm.h"
#include "trainer/gpt.h"

#define MAX_STEPS 64
#define MAX_ROUNDS 32

typedef struct {
  double step_ms;    /* median of the timed steps, wall clock */
  double cpu_ms;     /* median of their thread CPU time: what a step costs under others' load */
  size_t act_bytes;  /* cddp__gpt_activation_bytes */
  long peak_rss_kb;  /* getrusage ru_maxrss */
  uint64_t grad_hash;
  double loss;
  int ok;
} result_t;

static double clock_of(clockid_t id) {
  struct timespec t;
  clock_gettime(id, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}
static double now(void) { return clock_of(CLOCK_MONOTONIC); }

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static uint64_t fnv1a(const void *p, size_t n) {
  const unsigned char *c = p;
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; i++) h = (h ^ c[i]) * 1099511628211ull;
  return h;
}

/* One mode's run, in the child: 1 warm-up step, then steps timed one by one. */
static result_t run_mode(cddp_gpt_spec_t spec, int B, int steps) {
  result_t r = {0};
  cddp_gpt_t *m;
  if (cddp__gpt_create(&spec, B, &m) != CDDP_OK) {
    fprintf(stderr, "recompute_bench: %s\n", cddp_last_error());
    return r;
  }
  size_t np = cddp__gpt_param_count(m), ntok = (size_t)B * spec.context;
  float *params = aligned_alloc(64, np * sizeof(float)), *grads = aligned_alloc(64, np * sizeof(float));
  uint8_t *tok = malloc(ntok + 1);
  for (size_t i = 0; i <= ntok; i++) tok[i] = (uint8_t)("In the beginning God created "[i % 29]);
  cddp__gpt_bind(m, params, grads);
  cddp__gpt_init_params(m, 42);
  double ms[MAX_STEPS], cpu[MAX_STEPS];
  for (int i = -1; i < steps; i++) {
    double t0 = now(), c0 = clock_of(CLOCK_THREAD_CPUTIME_ID);
    r.loss = cddp__gpt_forward(m, tok, tok + 1, B, spec.context) / (double)ntok;
    cddp__gpt_backward(m, 1.0f / (float)ntok, 0, NULL, NULL);
    if (i == steps - 1) r.grad_hash = fnv1a(grads, np * sizeof(float));
    for (size_t j = 0; j < np; j++) params[j] -= 1e-3f * grads[j];
    if (i >= 0) ms[i] = (now() - t0) * 1e3, cpu[i] = (clock_of(CLOCK_THREAD_CPUTIME_ID) - c0) * 1e3;
  }
  qsort(ms, (size_t)steps, sizeof ms[0], cmp_double);
  qsort(cpu, (size_t)steps, sizeof cpu[0], cmp_double);
  r.step_ms = ms[steps / 2], r.cpu_ms = cpu[steps / 2];
  r.act_bytes = cddp__gpt_activation_bytes(m);
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  r.peak_rss_kb = ru.ru_maxrss;
  r.ok = 1;
  free(params), free(grads), free(tok);
  cddp__gpt_destroy(m);
  return r;
}

static result_t run_child(cddp_gpt_spec_t spec, int B, int steps) {
  result_t r = {0};
  int fd[2];
  if (pipe(fd) != 0) return r;
  pid_t pid = fork();
  if (pid == 0) {
    close(fd[0]);
    result_t c = run_mode(spec, B, steps);
    _exit(write(fd[1], &c, sizeof c) == (ssize_t)sizeof c ? 0 : 1);
  }
  close(fd[1]);
  if (pid < 0 || read(fd[0], &r, sizeof r) != (ssize_t)sizeof r) r.ok = 0;
  close(fd[0]);
  if (pid > 0) waitpid(pid, NULL, 0);
  return r;
}

int main(int argc, char **argv) {
  int B = 16, steps = 6, rounds = 3, threads = 1, opt;
  const char *precision = "fp32";
  cddp_gpt_spec_t spec = {.n_layer = 4, .n_head = 4, .d_model = 256, .context = 128,
                          .vocab = CDDP_GPT_VOCAB};
  while ((opt = getopt(argc, argv, "b:T:l:H:d:n:r:t:P:h")) != -1) {
    switch (opt) {
      case 'b': B = atoi(optarg); break;
      case 'T': spec.context = atoi(optarg); break;
      case 'l': spec.n_layer = atoi(optarg); break;
      case 'H': spec.n_head = atoi(optarg); break;
      case 'd': spec.d_model = atoi(optarg); break;
      case 'n': steps = atoi(optarg); break;
      case 'r': rounds = atoi(optarg); break;
      case 't': threads = atoi(optarg); break;
      case 'P': precision = optarg; break;
      default:
        fprintf(stderr, "usage: %s [-b batch] [-T context] [-l layers] [-H heads] [-d d_model] "
                        "[-n steps] [-r rounds] [-t blas_threads] [-P fp32|bf16]\n", argv[0]);
        return 2;
    }
  }
  if (steps < 1 || steps > MAX_STEPS || rounds < 1 || rounds > MAX_ROUNDS) {
    fprintf(stderr, "recompute_bench: -n must be 1..%d and -r 1..%d\n", MAX_STEPS, MAX_ROUNDS);
    return 2;
  }
  int bf16 = strcmp(precision, "bf16") == 0;
  if ((!bf16 && strcmp(precision, "fp32") != 0) ||
      cddp__gemm_set_precision(bf16 ? CDDP_PRECISION_BF16 : CDDP_PRECISION_FP32) != CDDP_OK) {
    fprintf(stderr, "recompute_bench: -P %s: %s\n", precision,
            bf16 ? cddp_last_error() : "fp32 or bf16");
    return 2;
  }
  openblas_set_num_threads(threads);
  printf("# gpt %d layers, %d heads, d_model %d, context %d, batch %d; %s, %d BLAS thread(s); "
         "%d timed steps a round, %d rounds, modes in turn\n",
         spec.n_layer, spec.n_head, spec.d_model, spec.context, B, precision, threads, steps,
         rounds);
  static const char *names[] = {"none", "attn", "block"};
  result_t res[3][MAX_ROUNDS];
  for (int r = 0; r < rounds; r++)
    for (int k = 0; k < 3; k++) {
      spec.recompute = k;
      res[k][r] = run_child(spec, B, steps);
      if (!res[k][r].ok) {
        fprintf(stderr, "recompute_bench: %s failed\n", names[k]);
        return 1;
      }
    }
  double base_ms = 0, base_cpu = 0;
  size_t base_act = res[0][0].act_bytes;
  long base_rss = 0;
  int all_equal = 1;
  printf("%-6s %9s %8s %13s %8s %9s %8s %9s %8s %-16s\n", "mode", "act MiB", "vs none",
         "peak RSS MiB", "vs none", "step ms", "vs none", "CPU ms", "vs none", "grads");
  for (int k = 0; k < 3; k++) {
    double ms[MAX_ROUNDS], cpu[MAX_ROUNDS];
    long rss = 0;
    for (int r = 0; r < rounds; r++) {
      ms[r] = res[k][r].step_ms, cpu[r] = res[k][r].cpu_ms;
      if (res[k][r].peak_rss_kb > rss) rss = res[k][r].peak_rss_kb;
    }
    qsort(ms, (size_t)rounds, sizeof ms[0], cmp_double);
    qsort(cpu, (size_t)rounds, sizeof cpu[0], cmp_double);
    double med = ms[rounds / 2], cmed = cpu[rounds / 2];
    if (k == 0) base_ms = med, base_cpu = cmed, base_rss = rss;
    int equal = res[k][0].grad_hash == res[0][0].grad_hash && res[k][0].loss == res[0][0].loss;
    all_equal &= equal;
    printf("%-6s %9.1f %+7.0f%% %13.1f %+7.0f%% %9.1f %+7.0f%% %9.1f %+7.0f%% %-16s\n", names[k],
           res[k][0].act_bytes / 1048576.0, 100.0 * ((double)res[k][0].act_bytes / base_act - 1),
           rss / 1024.0, 100.0 * ((double)rss / base_rss - 1), med, 100.0 * (med / base_ms - 1),
           cmed, 100.0 * (cmed / base_cpu - 1), equal ? "bitwise none's" : "DIFFER");
  }
  printf("goal: block cuts activation memory >= 50%% at <= 35%% more step time; gradients "
         "bitwise equal: %s\n", all_equal ? "yes" : "NO");
  return all_equal ? 0 : 1;
}
