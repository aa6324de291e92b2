// ops_cuda.cu - the device layer's CUDA table (trainer/ops.h): device memory and copies on
// the one stream, cuBLAS GEMMs, and the kernels of k_layers.cu, k_attn.cu and k_optim.cu.
#include <stdio.h>
#include <string.h>

#include "trainer/cuda/cuda_ops.h"
#include "trainer/cuda/cuda_util.h"
#include "trainer/ops.h"

static void *cu_alloc(size_t bytes) {
  void *p = NULL;
  if (cudaMalloc(&p, bytes ? bytes : 1) != cudaSuccess) {
    (void)cudaGetLastError();
    return NULL;
  }
  CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, cddp__cuda_stream()));
  return p;
}

static void cu_release(void *p) {
  CUDA_CHECK(cudaStreamSynchronize(cddp__cuda_stream()));
  CUDA_CHECK(cudaFree(p));
}

// The host side may reuse its buffer as soon as a copy returns: both wait for the stream.
static void cu_to_device(void *dst, const void *src, size_t bytes) {
  CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, cddp__cuda_stream()));
  CUDA_CHECK(cudaStreamSynchronize(cddp__cuda_stream()));
}
static void cu_to_host(void *dst, const void *src, size_t bytes) {
  CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, cddp__cuda_stream()));
  CUDA_CHECK(cudaStreamSynchronize(cddp__cuda_stream()));
}
static void cu_fill_zero(void *p, size_t bytes) { CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, cddp__cuda_stream())); }
static void cu_sync(void) {
  CUDA_CHECK(cudaStreamSynchronize(cddp__cuda_copy_stream()));
  CUDA_CHECK(cudaStreamSynchronize(cddp__cuda_comm_stream()));
  CUDA_CHECK(cudaStreamSynchronize(cddp__cuda_stream()));
}

// A batch's copy on the copy stream, so it runs while the device still trains on the last one.
static void *cu_event_create(void) {
  cudaEvent_t e = NULL;
  if (cudaEventCreateWithFlags(&e, cudaEventDisableTiming) != cudaSuccess) {
    (void)cudaGetLastError();
    return NULL;
  }
  return (void *)e;
}
static void cu_event_destroy(void *e) {
  if (e) CUDA_CHECK(cudaEventDestroy((cudaEvent_t)e));
}
static void cu_to_device_async(void *dst, const void *src, size_t bytes, void *done) {
  CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, cddp__cuda_copy_stream()));
  CUDA_CHECK(cudaEventRecord((cudaEvent_t)done, cddp__cuda_copy_stream()));
}
static void cu_event_wait(void *e) { CUDA_CHECK(cudaStreamWaitEvent(cddp__cuda_stream(), (cudaEvent_t)e, 0)); }
// A bucket's gradients to the host on the comm stream, after the compute stream's mark only.
static void cu_event_record(void *e) { CUDA_CHECK(cudaEventRecord((cudaEvent_t)e, cddp__cuda_stream())); }
static void cu_to_host_async(void *dst, const void *src, size_t bytes, void *ready, void *done) {
  cudaStream_t comm = cddp__cuda_comm_stream();
  if (ready) CUDA_CHECK(cudaStreamWaitEvent(comm, (cudaEvent_t)ready, 0));
  CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, comm));
  CUDA_CHECK(cudaEventRecord((cudaEvent_t)done, comm));
}
static void cu_event_sync(void *e) { CUDA_CHECK(cudaEventSynchronize((cudaEvent_t)e)); }
// NCCL on the device's gradients: its collectives queue on the comm stream, each bucket's
// after the compute stream's mark; the optimizer waits for the comm stream's event.
static void *cu_comm_stream(void) { return (void *)cddp__cuda_comm_stream(); }
static void cu_comm_wait(void *e) { CUDA_CHECK(cudaStreamWaitEvent(cddp__cuda_comm_stream(), (cudaEvent_t)e, 0)); }
static void cu_comm_record(void *e) { CUDA_CHECK(cudaEventRecord((cudaEvent_t)e, cddp__cuda_comm_stream())); }

// Pinned: the copies of batches and of the staged gradients run at the link's speed.
static void *cu_host_alloc(size_t bytes) {
  void *p = NULL;
  if (cudaHostAlloc(&p, bytes ? bytes : 1, cudaHostAllocDefault) != cudaSuccess) {
    (void)cudaGetLastError();
    return NULL;
  }
  memset(p, 0, bytes);
  return p;
}
static void cu_host_release(void *p) { CUDA_CHECK(cudaFreeHost(p)); }
// Memory the host allocated (shared memory too): pinned in place, or left pageable on failure.
static int cu_host_register(void *p, size_t bytes) {
  if (cudaHostRegister(p, bytes, cudaHostRegisterPortable) == cudaSuccess) return 0;
  (void)cudaGetLastError();
  return -1;
}
static void cu_host_unregister(void *p) {
  if (cudaHostUnregister(p) != cudaSuccess) (void)cudaGetLastError(); // it was never pinned
}

static struct {
  void *p;
  size_t bytes;
} scratch[CU_SCRATCH_COUNT];

void *cddp__cu_scratch(int slot, size_t bytes) {
  if (scratch[slot].bytes < bytes) {
    if (scratch[slot].p) cu_release(scratch[slot].p);
    scratch[slot].p = cu_alloc(bytes);
    scratch[slot].bytes = scratch[slot].p ? bytes : 0;
    if (!scratch[slot].p) {
      fprintf(stderr, "cddp: out of GPU memory for %zu bytes of scratch\n", bytes);
      abort();
    }
  }
  return scratch[slot].p;
}

const cddp_ops_t cddp__ops_cuda = {
    .name = "cuda",
    .attn_fused = 1, /* no T x T probabilities in device memory */
    .alloc = cu_alloc,
    .release = cu_release,
    .to_device = cu_to_device,
    .to_host = cu_to_host,
    .fill_zero = cu_fill_zero,
    .sync = cu_sync,
    .host_alloc = cu_host_alloc,
    .host_release = cu_host_release,
    .host_register = cu_host_register,
    .host_unregister = cu_host_unregister,
    .event_create = cu_event_create,
    .event_destroy = cu_event_destroy,
    .to_device_async = cu_to_device_async,
    .event_wait = cu_event_wait,
    .event_record = cu_event_record,
    .to_host_async = cu_to_host_async,
    .event_sync = cu_event_sync,
    .comm_stream = cu_comm_stream,
    .comm_wait = cu_comm_wait,
    .comm_record = cu_comm_record,
    .gemm = cddp__cublas_gemm,
    .gemm_bf16 = cddp__cublas_gemm_bf16,
    .linear_forward = cu_linear_forward,
    .linear_backward_params = cu_linear_backward_params,
    .linear_backward_weight_rows = cu_linear_backward_weight_rows,
    .bias_rows = cu_bias_rows,
    .linear_backward_input = cu_linear_backward_input,
    .xent_forward = cu_xent_forward,
    .xent_backward = cu_xent_backward,
    .conv2d_forward = NULL, // the CNN stays on the CPU for now (model.c refuses it here by name)
    .conv2d_backward = NULL,
    .maxpool2_forward = NULL,
    .maxpool2_backward = NULL,
    .linear_xwt = cu_linear_xwt,
    .layernorm_forward = cu_layernorm_forward,
    .layernorm_backward = cu_layernorm_backward,
    .colsum = cu_colsum,
    .bias_gelu_forward = cu_bias_gelu_forward,
    .gelu_backward = cu_gelu_backward,
    .attn_forward = cu_attn_forward,
    .attn_backward = cu_attn_backward,
    .attn_flash_forward = cu_attn_flash_forward,
    .attn_flash_forward_bf16 = cu_attn_flash_forward_bf16,
    .attn_flash_backward = cu_attn_flash_backward,
    .attn_flash_forward_tc = cu_attn_flash_forward_tc,
    .attn_flash_backward_bf16 = cu_attn_flash_backward_bf16,
    .embed_forward = cu_embed_forward,
    .embed_backward = cu_embed_backward,
    .head_forward = cu_head_forward,
    .head_backward = cu_head_backward,
    .softmax_xent = cu_softmax_xent,
    .optim_step = cu_optim_step,
    .sumsq = cu_sumsq,
    .add_into = cu_add_into,
    .scale = cu_scale,
    .to_bf16 = cu_to_bf16,
    .from_bf16 = cu_from_bf16,
};
