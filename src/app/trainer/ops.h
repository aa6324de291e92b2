/* ops.h - the device layer: one table of the operations the models are made of (memory,
 * GEMM, the layer kernels, the optimizer, reductions, bf16 casts), with a CPU implementation
 * (ops_cpu.c: today's functions, unchanged) and a CUDA one (cuda/ops_cuda.cu, when built).
 *
 * Every layer entry has the arguments and the meaning of its CPU function in layers.h,
 * layers_gpt.h and optim.h; on the CUDA table every pointer is device memory from alloc
 * (labels and tokens too), and the entries that return a number (losses, norms) wait for the
 * device. model.c and gpt.c call this table (docs/gpu.md). */
#ifndef CDDP_TRAINER_OPS_H
#define CDDP_TRAINER_OPS_H

#include <stddef.h>
#include <stdint.h>

#include "trainer/device.h"
#include "trainer/optim.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct cddp_ops {
  const char *name; /* "cpu" or "cuda" */
  /* 1: the GPT's attention is the fused one unless model.attention says otherwise (gpt.h) */
  int attn_fused;

  /* ---- memory. alloc returns zeroed device memory (the CPU: 64-byte aligned), NULL when out
   * of memory; the copies and sync order after everything queued before them. */
  void *(*alloc)(size_t bytes);
  void (*release)(void *p);
  void (*to_device)(void *dst, const void *host_src, size_t bytes);
  void (*to_host)(void *host_dst, const void *src, size_t bytes);
  void (*fill_zero)(void *p, size_t bytes);
  void (*sync)(void);
  /* host memory the device copies from fastest (CUDA: pinned), zeroed; host_release frees it.
   * The host reads and writes it; the batches are staged in it. */
  void *(*host_alloc)(size_t bytes);
  void (*host_release)(void *p);
  /* Pins host memory allocated elsewhere (DDP's gradient buffer, the staging of several ranks
   * on one GPU) so copies to and from it run at the link's speed; 0 when pinned, -1 when it
   * stays pageable (still correct, slower). unregister before the memory is freed. */
  int (*host_register)(void *p, size_t bytes);
  void (*host_unregister)(void *p);
  /* ---- copies overlapped with compute. to_device_async queues a host->device copy on the
   * copy stream (CUDA: its own stream; src should be host_alloc memory) and records event
   * `done` after it; event_wait makes the compute stream's later work wait for `done`, without
   * the host waiting. The host must not write src, nor the compute stream touch dst, until a
   * wait on `done` orders them. The emulated device performs a queued copy only at the wait
   * on its event (or at sync), so a missing wait changes the bits. event_create returns NULL
   * when out of resources. */
  void *(*event_create)(void);
  void (*event_destroy)(void *event);
  void (*to_device_async)(void *dst, const void *host_src, size_t bytes, void *done);
  void (*event_wait)(void *event);
  /* ---- gradients to the host on the comm stream, bucket by bucket (DDP over the native
   * transports). event_record marks the compute stream's work so far; to_host_async makes the
   * comm stream wait for `ready` (a mark recorded just before: the comm stream waits for
   * nothing later than the bucket needs), queues a device->host copy there and records
   * `done`; event_sync makes the host wait for `done` before it reads host_dst. The emulated
   * device takes the copy's bytes as of `ready` only when no compute work was queued between
   * the mark and the copy (else, as when `ready` is NULL, they are NaN: the copy may have run
   * before that work), and shows them to the host only at event_sync. */
  void (*event_record)(void *event);
  void (*to_host_async)(void *host_dst, const void *src, size_t bytes, void *ready, void *done);
  void (*event_sync)(void *event);
  /* ---- the all-reduce on the device buffers themselves (NCCL, one GPU per rank). comm_stream
   * is the stream the collectives queue on (CUDA: the comm stream above); comm_wait makes its
   * later work (the next bucket's all-reduce) wait for `event`, a mark of the compute stream,
   * and nothing later; comm_record records `event` after its work so far, for the compute
   * stream's event_wait (the optimizer). NULL on the tables with no device collectives (the
   * CPU's; the emulated device's: the trainer stages its gradients there). */
  void *(*comm_stream)(void);
  void (*comm_wait)(void *event);
  void (*comm_record)(void *event);

  /* ---- GEMM, row-major: C[m,n] = alpha op(A) op(B) + beta C, op(A) [m,k], op(B) [k,n];
   * ta / tb: A / B is stored transposed. Leading dimensions are the stored rows' lengths. */
  void (*gemm)(int ta, int tb, int m, int n, int k, float alpha, const float *A, const float *B,
               float beta, float *C);
  /* The same with bf16 A and B (uint16_t bits), float32 accumulation and C: mixed precision. */
  void (*gemm_bf16)(int ta, int tb, int m, int n, int k, float alpha, const uint16_t *A,
                    const uint16_t *B, float beta, float *C);

  /* ---- the MLP's layers (layers.h) */
  void (*linear_forward)(float *y, const float *x, const float *w, const float *b, int n, int in,
                         int out, int relu);
  void (*linear_backward_params)(float *dw, float *db, const float *dy, const float *x, int n, int in,
                                 int out, int accumulate);
  /* rows [r0, r1) of dw only (the model hands DDP its gradients in panels) */
  void (*linear_backward_weight_rows)(float *dw, const float *dy, const float *x, int n, int in, int out,
                                      int r0, int r1, int accumulate);
  /* y[r, :] = b (+ res[r, :] when res is not NULL) for n rows of c: what a GEMM with beta 1
   * then adds to (gpt.c's linear_into: bias and residual in the pass that writes y) */
  void (*bias_rows)(float *y, const float *b, const float *res, int n, int c);
  void (*linear_backward_input)(float *dx, const float *dy, const float *w, const float *x, int n,
                                int in, int out, int relu_in);
  double (*xent_forward)(float *prob, const float *logits, const uint8_t *y, int n, int k,
                         int *n_correct);
  void (*xent_backward)(float *dlogits, const float *prob, const uint8_t *y, int n, int k, float scale);
  /* the CNN's conv2d and 2x2 max pool (layers.h); NULL where the table has none (CUDA: the
   * CNN is refused there by name). col is conv scratch in the table's memory. */
  void (*conv2d_forward)(float *y, const float *x, const float *wt, const float *b, float *col, int n,
                         int c_in, int h, int w, int c_out, int k, int relu);
  void (*conv2d_backward)(float *dx, float *dw, float *db, const float *dy, const float *x,
                          const float *wt, float *col, int n, int c_in, int h, int w, int c_out, int k,
                          int accumulate);
  void (*maxpool2_forward)(float *y, uint8_t *arg, const float *x, int n, int c, int h, int w);
  void (*maxpool2_backward)(float *dx, const float *dy, const uint8_t *arg, const float *y, int n, int c,
                            int h, int w, int relu_y);

  /* ---- the GPT's layers (layers_gpt.h) */
  /* y[n,out] = (res +) bias + x W^T, W [out,in] as torch, res (may be NULL) not overlapping y:
   * gpt.c's linear, bias and residual in the pass that writes y (CPU: linear_form.c's faster
   * form for the shape; CUDA: bias_rows, then a GEMM with beta 1) */
  void (*linear_xwt)(float *y, const float *x, const float *w, const float *bias, const float *res, int n, int in,
                     int out);
  void (*layernorm_forward)(float *y, float *mean, float *rstd, const float *x, const float *w,
                            const float *b, int n, int c);
  void (*layernorm_backward)(float *dx, float *dw, float *db, const float *dy, const float *x,
                             const float *w, const float *mean, const float *rstd, int n, int c,
                             int accumulate);
  void (*colsum)(float *acc, const float *x, int n, int c, int accumulate);
  void (*bias_gelu_forward)(float *y, float *x, const float *b, int n, int c);
  void (*gelu_backward)(float *d, const float *x, size_t count);
  void (*attn_forward)(float *y, float *att, const float *qkv, int B, int T, int C, int n_head);
  void (*attn_backward)(float *dqkv, const float *dy, const float *qkv, const float *att,
                        float *scratch, int B, int T, int C, int n_head);
  /* the fused causal attention (layers_gpt.h: cddp__attn_flash_forward): y and each row's
   * log-sum-exp lse [B, n_head, T], no T x T scores; _bf16 reads qkv as bf16, sums in fp32.
   * The backward (cddp__attn_flash_backward) recomputes the probabilities from y and lse.
   * The GPT's attention where attn_fused (or model.attention fused) says so. */
  void (*attn_flash_forward)(float *y, float *lse, const float *qkv, int B, int T, int C, int n_head);
  void (*attn_flash_forward_bf16)(float *y, float *lse, const uint16_t *qkv, int B, int T, int C, int n_head);
  void (*attn_flash_backward)(float *dqkv, const float *dy, const float *qkv, const float *y, const float *lse,
                              int B, int T, int C, int n_head);
  /* the forward and the backward with their products' operands in bf16 (layers_gpt.h:
   * cddp__attn_flash_forward_tc, cddp__attn_flash_backward_bf16;
   * CUDA: tensor cores, cuda/k_flash_tc.cu): the GPT's fused attention under train.precision bf16 */
  void (*attn_flash_forward_tc)(float *y, float *lse, const float *qkv, int B, int T, int C, int n_head);
  void (*attn_flash_backward_bf16)(float *dqkv, const float *dy, const float *qkv, const float *y, const float *lse,
                                   int B, int T, int C, int n_head);
  void (*embed_forward)(float *x, const uint8_t *tok, const float *wte, const float *wpe, int B, int T,
                        int C);
  void (*embed_backward)(float *dwte, float *dwpe, const float *dx, const uint8_t *tok, int B, int T,
                         int C, int accumulate);
  void (*head_forward)(float *logits, const float *h, const float *wte, int n, int C, int V);
  void (*head_backward)(float *dh, float *dwte, const float *dlogits, const float *h, const float *wte,
                        int n, int C, int V, int accumulate);
  double (*softmax_xent)(float *prob, const float *z, const uint8_t *y, int n, int V);

  /* ---- the optimizer (optim.h: torch's SGD and AdamW, global-norm clipping). On the CUDA
   * table o->m and o->v are device buffers (cddp__ops_optim_init); returns the norm. */
  double (*optim_step)(cddp_optim_t *o, float *params, float *grads, float lr);

  /* ---- reductions and casts */
  double (*sumsq)(const float *x, size_t n); /* sum of squares (the gradient norm's square) */
  /* dst[i] += src[i]: a later micro-step's gradient added into the first's, each element
   * rounded once, as the all-reduce of the same micro-batches on more ranks rounds it */
  void (*add_into)(float *dst, const float *src, size_t n);
  /* x[i] *= a: fp16's loss scale taken off the gradients (a = 1/S, a power of two) */
  void (*scale)(float *x, float a, size_t n);
  void (*to_bf16)(uint16_t *dst, const float *src, size_t n);   /* round to nearest even */
  void (*from_bf16)(float *dst, const uint16_t *src, size_t n);
} cddp_ops_t;

extern const cddp_ops_t cddp__ops_cpu;
#if CDDP_HAVE_CUDA
extern const cddp_ops_t cddp__ops_cuda;
#endif
/* The emulated device (ops_emu.c): the CPU's kernels on memory the host cannot dereference,
 * so the trainer's device plumbing is tested where there is no GPU (CDDP_DEVICE_EMULATE=1). */
extern const cddp_ops_t cddp__ops_emu;

/* The table of a device (CPU or CUDA), NULL for CUDA in a build without it. */
const cddp_ops_t *cddp__ops_for(cddp_device_kind_t kind);

/* cddp__optim_init with the moments in the table's memory (zeroed); free with
 * cddp__ops_optim_free. */
cddp_result_t cddp__ops_optim_init(const cddp_ops_t *ops, cddp_optim_t *o, const cddp_optim_spec_t *spec,
                                   size_t n);
void cddp__ops_optim_free(const cddp_ops_t *ops, cddp_optim_t *o);

/* Binds this process to GPU ordinal (cudaSetDevice, and the one stream of the CUDA table).
 * -1 with a line in err when it cannot; always -1 in a build without CUDA. */
int cddp__cuda_bind(int ordinal, char *err, size_t cap);

#ifdef __cplusplus
}
#endif

#endif /* CDDP_TRAINER_OPS_H */
