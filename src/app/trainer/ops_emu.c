/* ops_emu.c - an emulated device: the CPU table's kernels on memory the host cannot read.
 * alloc returns a pointer 2^62 above the real block, a non-canonical address on x86-64 and
 * AArch64 alike: pointer arithmetic on it works as on a device pointer, and any host load or
 * store through it faults at once (SIGSEGV), as a host touching cudaMalloc memory would be
 * wrong. Each entry takes the tag off its pointers and calls the CPU's function, so a run
 * on it must give the CPU table's bits. The trainer takes it for train.device cuda|auto when
 * CDDP_DEVICE_EMULATE=1 and no GPU is there: the device plumbing (staging, pinned batches,
 * checkpoints through to_host / to_device, the optimizer through the table) is tested on
 * machines without a GPU. Host memory (host_alloc) is untagged. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "trainer/ops.h"

#define TAG ((uintptr_t)1 << 62)
#define CPU cddp__ops_cpu

/* Calls queued on the compute stream so far, each counted where it untags a pointer: what an
 * event_record marks, so a comm-stream copy can tell whether work came after its mark. */
static uint64_t emu_work;
static inline void *untag(const void *p) {
  emu_work++;
  return (void *)((uintptr_t)p - TAG);
}
/* the real address of a tagged pointer; NULL stays NULL */
#define R(p) ((p) ? (__typeof__(p))untag(p) : (p))

static void *emu_alloc(size_t bytes) {
  void *p = CPU.alloc(bytes);
  return p ? (void *)((uintptr_t)p + TAG) : NULL;
}
static void emu_release(void *p) {
  if (p) CPU.release(R(p));
}
static void emu_to_device(void *dst, const void *src, size_t bytes) { CPU.to_device(R(dst), src, bytes); }
static void emu_to_host(void *dst, const void *src, size_t bytes) { CPU.to_host(dst, R(src), bytes); }
/* A queued copy waits in its event until the event is waited on, or the stream is synced:
 * as late as a real copy stream may run it, so an ordering bug shows in the bits. The live
 * events are a list, for sync. Single-threaded, as the trainer's device calls are. */
#define EMU_COPIES 4
typedef struct emu_event {
  struct emu_event *next;
  uint64_t mark; /* event_record: emu_work then */
  void *held;    /* to_host_async: the bytes the host sees at event_sync */
  void *held_dst;
  size_t held_bytes;
  int n;
  struct {
    void *dst;
    const void *src;
    size_t bytes;
  } q[EMU_COPIES];
} emu_event_t;
static emu_event_t *emu_events;

static void emu_flush(emu_event_t *e) {
  for (int i = 0; i < e->n; i++) CPU.to_device(e->q[i].dst, e->q[i].src, e->q[i].bytes);
  e->n = 0;
}
static void *emu_event_create(void) {
  emu_event_t *e = calloc(1, sizeof *e);
  if (e) e->next = emu_events, emu_events = e;
  return e;
}
static void emu_event_destroy(void *p) {
  for (emu_event_t **e = &emu_events; *e; e = &(*e)->next)
    if (*e == p) {
      *e = (*e)->next;
      free(((emu_event_t *)p)->held);
      free(p);
      return;
    }
}
static void emu_to_device_async(void *dst, const void *src, size_t bytes, void *done) {
  emu_event_t *e = done;
  if (e->n == EMU_COPIES) emu_flush(e); /* a real stream would have run them by now too */
  e->q[e->n].dst = R(dst), e->q[e->n].src = src, e->q[e->n].bytes = bytes;
  e->n++;
}
static void emu_event_wait(void *e) { emu_flush(e); }
/* The comm stream's copy: the bytes as of `ready` when no compute work came after the mark
 * (the emulator ran it all at once, so it cannot give older bytes), else NaN, what a copy
 * racing that work may read. The host sees them only at event_sync: until then dst is NaN. */
static void emu_event_record(void *p) { ((emu_event_t *)p)->mark = emu_work; }
static void emu_event_sync(void *p) {
  emu_event_t *e = p;
  if (!e->held) return;
  memcpy(e->held_dst, e->held, e->held_bytes);
  free(e->held);
  e->held = NULL;
}
static void emu_to_host_async(void *dst, const void *src, size_t bytes, void *ready, void *done) {
  emu_event_t *r = ready, *e = done;
  emu_event_sync(e); /* a real stream ran the last copy of this event first */
  void *held = malloc(bytes ? bytes : 1);
  if (!held) abort(); /* a test's device: out of memory is not a case to emulate */
  if (r && r->mark == emu_work)
    memcpy(held, (const char *)src - TAG, bytes);
  else
    memset(held, 0xff, bytes); /* NaN floats */
  memset(dst, 0xff, bytes);
  e->held = held, e->held_dst = dst, e->held_bytes = bytes;
}
static void emu_sync(void) {
  for (emu_event_t *e = emu_events; e; e = e->next) emu_flush(e), emu_event_sync(e);
}
static void *emu_host_alloc(size_t bytes) { return CPU.host_alloc(bytes); }
static void emu_host_release(void *p) { CPU.host_release(p); }
static int emu_host_register(void *p, size_t bytes) { return CPU.host_register(p, bytes); }
static void emu_host_unregister(void *p) { CPU.host_unregister(p); }
static void emu_fill_zero(void *p, size_t bytes) { CPU.fill_zero(R(p), bytes); }

static void emu_gemm(int ta, int tb, int m, int n, int k, float alpha, const float *A, const float *B, float beta,
                     float *C) {
  CPU.gemm(ta, tb, m, n, k, alpha, R(A), R(B), beta, R(C));
}
static void emu_gemm_bf16(int ta, int tb, int m, int n, int k, float alpha, const uint16_t *A, const uint16_t *B,
                          float beta, float *C) {
  CPU.gemm_bf16(ta, tb, m, n, k, alpha, R(A), R(B), beta, R(C));
}
static void emu_linear_forward(float *y, const float *x, const float *w, const float *b, int n, int in, int out,
                               int relu) {
  CPU.linear_forward(R(y), R(x), R(w), R(b), n, in, out, relu);
}
static void emu_linear_backward_params(float *dw, float *db, const float *dy, const float *x, int n, int in, int out,
                                       int accumulate) {
  CPU.linear_backward_params(R(dw), R(db), R(dy), R(x), n, in, out, accumulate);
}
static void emu_linear_backward_weight_rows(float *dw, const float *dy, const float *x, int n, int in, int out, int r0,
                                            int r1, int accumulate) {
  CPU.linear_backward_weight_rows(R(dw), R(dy), R(x), n, in, out, r0, r1, accumulate);
}
static void emu_bias_rows(float *y, const float *b, const float *res, int n, int c) {
  CPU.bias_rows(R(y), R(b), R(res), n, c);
}
static void emu_linear_backward_input(float *dx, const float *dy, const float *w, const float *x, int n, int in,
                                      int out, int relu_in) {
  CPU.linear_backward_input(R(dx), R(dy), R(w), R(x), n, in, out, relu_in);
}
static double emu_xent_forward(float *prob, const float *logits, const uint8_t *y, int n, int k, int *n_correct) {
  return CPU.xent_forward(R(prob), R(logits), R(y), n, k, n_correct); /* n_correct: the host's */
}
static void emu_xent_backward(float *dlogits, const float *prob, const uint8_t *y, int n, int k, float scale) {
  CPU.xent_backward(R(dlogits), R(prob), R(y), n, k, scale);
}
static void emu_linear_xwt(float *y, const float *x, const float *w, const float *bias, const float *res, int n, int in,
                           int out) {
  CPU.linear_xwt(R(y), R(x), R(w), R(bias), R(res), n, in, out);
}
static void emu_layernorm_forward(float *y, float *mean, float *rstd, const float *x, const float *w, const float *b,
                                  int n, int c) {
  CPU.layernorm_forward(R(y), R(mean), R(rstd), R(x), R(w), R(b), n, c);
}
static void emu_layernorm_backward(float *dx, float *dw, float *db, const float *dy, const float *x, const float *w,
                                   const float *mean, const float *rstd, int n, int c, int accumulate) {
  CPU.layernorm_backward(R(dx), R(dw), R(db), R(dy), R(x), R(w), R(mean), R(rstd), n, c, accumulate);
}
static void emu_colsum(float *acc, const float *x, int n, int c, int accumulate) {
  CPU.colsum(R(acc), R(x), n, c, accumulate);
}
static void emu_bias_gelu_forward(float *y, float *x, const float *b, int n, int c) {
  CPU.bias_gelu_forward(R(y), R(x), R(b), n, c);
}
static void emu_gelu_backward(float *d, const float *x, size_t count) { CPU.gelu_backward(R(d), R(x), count); }
static void emu_attn_forward(float *y, float *att, const float *qkv, int B, int T, int C, int n_head) {
  CPU.attn_forward(R(y), R(att), R(qkv), B, T, C, n_head);
}
static void emu_attn_backward(float *dqkv, const float *dy, const float *qkv, const float *att, float *scratch, int B,
                              int T, int C, int n_head) {
  CPU.attn_backward(R(dqkv), R(dy), R(qkv), R(att), R(scratch), B, T, C, n_head);
}
static void emu_attn_flash_forward(float *y, float *lse, const float *qkv, int B, int T, int C, int n_head) {
  CPU.attn_flash_forward(R(y), R(lse), R(qkv), B, T, C, n_head);
}
static void emu_attn_flash_forward_bf16(float *y, float *lse, const uint16_t *qkv, int B, int T, int C, int n_head) {
  CPU.attn_flash_forward_bf16(R(y), R(lse), R(qkv), B, T, C, n_head);
}
static void emu_attn_flash_backward(float *dqkv, const float *dy, const float *qkv, const float *y,
                                    const float *lse, int B, int T, int C, int n_head) {
  CPU.attn_flash_backward(R(dqkv), R(dy), R(qkv), R(y), R(lse), B, T, C, n_head);
}
static void emu_attn_flash_forward_tc(float *y, float *lse, const float *qkv, int B, int T, int C, int n_head) {
  CPU.attn_flash_forward_tc(R(y), R(lse), R(qkv), B, T, C, n_head);
}
static void emu_attn_flash_backward_bf16(float *dqkv, const float *dy, const float *qkv, const float *y,
                                         const float *lse, int B, int T, int C, int n_head) {
  CPU.attn_flash_backward_bf16(R(dqkv), R(dy), R(qkv), R(y), R(lse), B, T, C, n_head);
}
static void emu_embed_forward(float *x, const uint8_t *tok, const float *wte, const float *wpe, int B, int T, int C) {
  CPU.embed_forward(R(x), R(tok), R(wte), R(wpe), B, T, C);
}
static void emu_embed_backward(float *dwte, float *dwpe, const float *dx, const uint8_t *tok, int B, int T, int C,
                               int accumulate) {
  CPU.embed_backward(R(dwte), R(dwpe), R(dx), R(tok), B, T, C, accumulate);
}
static void emu_head_forward(float *logits, const float *h, const float *wte, int n, int C, int V) {
  CPU.head_forward(R(logits), R(h), R(wte), n, C, V);
}
static void emu_head_backward(float *dh, float *dwte, const float *dlogits, const float *h, const float *wte, int n,
                              int C, int V, int accumulate) {
  CPU.head_backward(R(dh), R(dwte), R(dlogits), R(h), R(wte), n, C, V, accumulate);
}
static double emu_softmax_xent(float *prob, const float *z, const uint8_t *y, int n, int V) {
  return CPU.softmax_xent(R(prob), R(z), R(y), n, V);
}
/* the moments are device memory too: the CPU step runs on an untagged copy of the state */
static double emu_optim_step(cddp_optim_t *o, float *params, float *grads, float lr) {
  cddp_optim_t real = *o;
  real.m = R(o->m), real.v = R(o->v);
  double norm = CPU.optim_step(&real, R(params), R(grads), lr);
  o->t = real.t;
  return norm;
}
static double emu_sumsq(const float *x, size_t n) { return CPU.sumsq(R(x), n); }
static void emu_add_into(float *dst, const float *src, size_t n) { CPU.add_into(R(dst), R(src), n); }
static void emu_scale(float *x, float a, size_t n) { CPU.scale(R(x), a, n); }
static void emu_to_bf16(uint16_t *dst, const float *src, size_t n) { CPU.to_bf16(R(dst), R(src), n); }
static void emu_from_bf16(float *dst, const uint16_t *src, size_t n) { CPU.from_bf16(R(dst), R(src), n); }

/* The CNN is left out, as on CUDA: model.c refuses it by name on a table without conv2d. */
const cddp_ops_t cddp__ops_emu = {
    .name = "emulated",
    .attn_fused = 1, /* as the CUDA table: the device path's attention */
    .alloc = emu_alloc,
    .release = emu_release,
    .to_device = emu_to_device,
    .to_host = emu_to_host,
    .fill_zero = emu_fill_zero,
    .sync = emu_sync,
    .host_alloc = emu_host_alloc,
    .host_release = emu_host_release,
    .host_register = emu_host_register,
    .host_unregister = emu_host_unregister,
    .event_create = emu_event_create,
    .event_destroy = emu_event_destroy,
    .to_device_async = emu_to_device_async,
    .event_wait = emu_event_wait,
    .event_record = emu_event_record,
    .to_host_async = emu_to_host_async,
    .event_sync = emu_event_sync,
    .gemm = emu_gemm,
    .gemm_bf16 = emu_gemm_bf16,
    .linear_forward = emu_linear_forward,
    .linear_backward_params = emu_linear_backward_params,
    .linear_backward_weight_rows = emu_linear_backward_weight_rows,
    .bias_rows = emu_bias_rows,
    .linear_backward_input = emu_linear_backward_input,
    .xent_forward = emu_xent_forward,
    .xent_backward = emu_xent_backward,
    .linear_xwt = emu_linear_xwt,
    .layernorm_forward = emu_layernorm_forward,
    .layernorm_backward = emu_layernorm_backward,
    .colsum = emu_colsum,
    .bias_gelu_forward = emu_bias_gelu_forward,
    .gelu_backward = emu_gelu_backward,
    .attn_forward = emu_attn_forward,
    .attn_backward = emu_attn_backward,
    .attn_flash_forward = emu_attn_flash_forward,
    .attn_flash_forward_bf16 = emu_attn_flash_forward_bf16,
    .attn_flash_backward = emu_attn_flash_backward,
    .attn_flash_forward_tc = emu_attn_flash_forward_tc,
    .attn_flash_backward_bf16 = emu_attn_flash_backward_bf16,
    .embed_forward = emu_embed_forward,
    .embed_backward = emu_embed_backward,
    .head_forward = emu_head_forward,
    .head_backward = emu_head_backward,
    .softmax_xent = emu_softmax_xent,
    .optim_step = emu_optim_step,
    .sumsq = emu_sumsq,
    .add_into = emu_add_into,
    .scale = emu_scale,
    .to_bf16 = emu_to_bf16,
    .from_bf16 = emu_from_bf16,
};
