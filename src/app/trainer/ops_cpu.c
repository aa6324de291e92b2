/* ops_cpu.c - the device layer's CPU table: today's layer, optimizer and cast functions
 * themselves (no wrapper on their path, so no slower), plus host memory and sgemm. Also the
 * table lookup and the optimizer state in a table's memory. */
#include "trainer/ops.h"

#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/reduce.h"
#include "common/check.h"
#include "common/hugepages.h"
#include "trainer/layers.h"
#include "trainer/layers_gpt.h"
#include "trainer/linear_form.h"

/* From 2 MiB on, huge pages (madvise): GEMM packs activations in strides of a row, 1-4 KiB
 * apart, and on 4 KiB pages a strip of rows costs a TLB miss per row (2-3 % of a GPT step).
 * Both kinds are free()d. */
static void *cpu_alloc(size_t bytes) {
  size_t rounded = (bytes + 63) / 64 * 64;
  void *p = rounded >= ((size_t)2 << 20) ? cddp__huge_alloc(rounded, NULL) : aligned_alloc(64, rounded ? rounded : 64);
  if (p) memset(p, 0, rounded ? rounded : 64);
  return p;
}
static void cpu_copy(void *dst, const void *src, size_t bytes) { memcpy(dst, src, bytes); }
static void cpu_sync(void) {}
static int cpu_host_register(void *p, size_t bytes) { return (void)p, (void)bytes, 0; }
static void cpu_host_unregister(void *p) { (void)p; }
/* The CPU has one stream: an async copy is done when it returns, its event is only a token. */
static void *cpu_event_create(void) {
  static char token;
  return &token;
}
static void cpu_event_destroy(void *e) { (void)e; }
static void cpu_copy_async(void *dst, const void *src, size_t bytes, void *done) {
  (void)done;
  memcpy(dst, src, bytes);
}
static void cpu_event_wait(void *e) { (void)e; }
static void cpu_event_record(void *e) { (void)e; }
static void cpu_to_host_async(void *dst, const void *src, size_t bytes, void *ready, void *done) {
  (void)ready, (void)done;
  memcpy(dst, src, bytes);
}
static void cpu_event_sync(void *e) { (void)e; }
static void cpu_fill_zero(void *p, size_t bytes) { memset(p, 0, bytes); }

static void cpu_bias_rows(float *y, const float *b, const float *res, int n, int c) {
  for (int r = 0; r < n; r++) {
    float *yr = y + (size_t)r * c;
    const float *rr = res ? res + (size_t)r * c : NULL;
    for (int j = 0; j < c; j++) yr[j] = b[j] + (rr ? rr[j] : 0.0f);
  }
}

static void cpu_linear_xwt(float *y, const float *x, const float *w, const float *bias, const float *res, int n,
                           int in, int out) {
  cddp__linear_xwt(y, x, w, bias, res, n, in, out, 0);
}

static void cpu_gemm(int ta, int tb, int m, int n, int k, float alpha, const float *A, const float *B,
                     float beta, float *C) {
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, m, n, k,
              alpha, A, ta ? m : k, B, tb ? k : n, beta, C, n);
}

/* The reference for the CUDA bf16 GEMM: widen both operands, then sgemm (float32 sums). */
static void cpu_gemm_bf16(int ta, int tb, int m, int n, int k, float alpha, const uint16_t *A,
                          const uint16_t *B, float beta, float *C) {
  float *a = malloc((size_t)m * k * sizeof(float)), *b = malloc((size_t)k * n * sizeof(float));
  if (!a || !b) { /* a reference for tests: out of memory there is the end */
    fprintf(stderr, "cddp: gemm_bf16: out of memory for %d x %d x %d\n", m, n, k);
    abort();
  }
  cddp__bf16_to_f32_n(a, A, (size_t)m * k);
  cddp__bf16_to_f32_n(b, B, (size_t)k * n);
  cpu_gemm(ta, tb, m, n, k, alpha, a, b, beta, C);
  free(a);
  free(b);
}

static void cpu_add_into(float *restrict dst, const float *restrict src, size_t n) {
  for (size_t i = 0; i < n; i++) dst[i] += src[i];
}

static void cpu_scale(float *x, float a, size_t n) {
  for (size_t i = 0; i < n; i++) x[i] *= a;
}

static double cpu_sumsq(const float *x, size_t n) {
  double s[8] = {0};
  size_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int l = 0; l < 8; l++) s[l] += (double)x[i + l] * x[i + l];
  for (; i < n; i++) s[0] += (double)x[i] * x[i];
  return ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
}

const cddp_ops_t cddp__ops_cpu = {
    .name = "cpu",
    .attn_fused = 0, /* layer_attn.c's GEMM form is the faster here */
    .alloc = cpu_alloc,
    .release = free,
    .to_device = cpu_copy,
    .to_host = cpu_copy,
    .fill_zero = cpu_fill_zero,
    .sync = cpu_sync,
    .host_alloc = cpu_alloc,
    .host_release = free,
    .host_register = cpu_host_register,
    .host_unregister = cpu_host_unregister,
    .event_create = cpu_event_create,
    .event_destroy = cpu_event_destroy,
    .to_device_async = cpu_copy_async,
    .event_wait = cpu_event_wait,
    .event_record = cpu_event_record,
    .to_host_async = cpu_to_host_async,
    .event_sync = cpu_event_sync,
    .gemm = cpu_gemm,
    .gemm_bf16 = cpu_gemm_bf16,
    .linear_forward = cddp__linear_forward,
    .linear_backward_params = cddp__linear_backward_params,
    .linear_backward_weight_rows = cddp__linear_backward_weight_rows,
    .bias_rows = cpu_bias_rows,
    .linear_backward_input = cddp__linear_backward_input,
    .xent_forward = cddp__xent_forward,
    .xent_backward = cddp__xent_backward,
    .conv2d_forward = cddp__conv2d_forward,
    .conv2d_backward = cddp__conv2d_backward,
    .maxpool2_forward = cddp__maxpool2_forward,
    .maxpool2_backward = cddp__maxpool2_backward,
    .linear_xwt = cpu_linear_xwt,
    .layernorm_forward = cddp__layernorm_forward,
    .layernorm_backward = cddp__layernorm_backward,
    .colsum = cddp__colsum,
    .bias_gelu_forward = cddp__bias_gelu_forward,
    .gelu_backward = cddp__gelu_backward,
    .attn_forward = cddp__attn_forward,
    .attn_backward = cddp__attn_backward,
    .attn_flash_forward = cddp__attn_flash_forward,
    .attn_flash_forward_bf16 = cddp__attn_flash_forward_bf16,
    .attn_flash_backward = cddp__attn_flash_backward,
    .attn_flash_forward_tc = cddp__attn_flash_forward_tc,
    .attn_flash_backward_bf16 = cddp__attn_flash_backward_bf16,
    .embed_forward = cddp__embed_forward,
    .embed_backward = cddp__embed_backward,
    .head_forward = cddp__head_forward,
    .head_backward = cddp__head_backward,
    .softmax_xent = cddp__softmax_xent,
    .optim_step = cddp__optim_step,
    .sumsq = cpu_sumsq,
    .add_into = cpu_add_into,
    .scale = cpu_scale,
    .to_bf16 = cddp__f32_to_bf16_n,
    .from_bf16 = cddp__bf16_to_f32_n,
};

const cddp_ops_t *cddp__ops_for(cddp_device_kind_t kind) {
#if CDDP_HAVE_CUDA
  if (kind == CDDP_DEVICE_CUDA) return &cddp__ops_cuda;
#endif
  return kind == CDDP_DEVICE_CPU ? &cddp__ops_cpu : NULL;
}

#if !CDDP_HAVE_CUDA
int cddp__cuda_bind(int ordinal, char *err, size_t cap) {
  snprintf(err, cap, "GPU %d: this cddp was built without CUDA (nvcc not found, or NO_CUDA=1)", ordinal);
  return -1;
}
#endif

/* The moments move to the table's memory (zeroed there, as cddp__optim_init zeroes them). */
static cddp_result_t move_state(const cddp_ops_t *ops, float **buf, size_t n) {
  if (!*buf) return CDDP_OK;
  free(*buf);
  *buf = ops->alloc(n * sizeof(float));
  return *buf ? CDDP_OK : cddp__fail(CDDP_SYSTEM, "optimizer: out of %s memory for %zu parameters", ops->name, n);
}

cddp_result_t cddp__ops_optim_init(const cddp_ops_t *ops, cddp_optim_t *o, const cddp_optim_spec_t *spec,
                                   size_t n) {
  CDDP_CHECK(cddp__optim_init(o, spec, n));
  if (ops == &cddp__ops_cpu) return CDDP_OK;
  cddp_result_t r = move_state(ops, &o->m, n);
  if (r == CDDP_OK) r = move_state(ops, &o->v, n);
  if (r != CDDP_OK) cddp__ops_optim_free(ops, o);
  return r;
}

void cddp__ops_optim_free(const cddp_ops_t *ops, cddp_optim_t *o) {
  if (ops == &cddp__ops_cpu) {
    cddp__optim_free(o);
    return;
  }
  if (o->m) ops->release(o->m);
  if (o->v) ops->release(o->v);
  memset(o, 0, sizeof *o);
}
