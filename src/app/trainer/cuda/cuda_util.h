// cuda_util.h - what the CUDA sources share: the stream, error checks, launch sizes.
// (C++ only: included from .cu files.)
#ifndef CDDP_TRAINER_CUDA_UTIL_H
#define CDDP_TRAINER_CUDA_UTIL_H

#include <cuda_runtime.h>
#include <math.h>
#include <stdlib.h>

// The stream of this process's device work (created by cddp__cuda_bind).
cudaStream_t cddp__cuda_stream(void);
// The stream the batches' host->device copies run on, beside the device work (ops.h).
cudaStream_t cddp__cuda_copy_stream(void);
// The stream the gradients' buckets cross to the host on, each after its compute mark (ops.h).
cudaStream_t cddp__cuda_comm_stream(void);
// A failed CUDA call is a bug or a lost device: say where and abort (the launcher names the rank).
void cddp__cuda_check(cudaError_t e, const char *what, const char *file, int line);
#define CUDA_CHECK(call) cddp__cuda_check((call), #call, __FILE__, __LINE__)
#define CUDA_LAUNCHED() cddp__cuda_check(cudaGetLastError(), "kernel launch", __FILE__, __LINE__)

static inline unsigned cdiv(size_t a, size_t b) { return (unsigned)((a + b - 1) / b); }

// Reductions over a warp and over a block (blockDim.x a multiple of 32, at most 1024); sh
// holds 32 values. Every thread of the block gets the result.
template <typename T> __device__ inline T warp_sum(T v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ inline float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
template <typename T> __device__ inline T block_sum(T v, T *sh) {
  v = warp_sum(v);
  __syncthreads(); // sh may still be read by a previous call
  if ((threadIdx.x & 31) == 0) sh[threadIdx.x >> 5] = v;
  __syncthreads();
  v = (threadIdx.x & 31) < (blockDim.x >> 5) ? sh[threadIdx.x & 31] : (T)0;
  return warp_sum(v);
}
__device__ inline float block_max(float v, float *sh) {
  v = warp_max(v);
  __syncthreads();
  if ((threadIdx.x & 31) == 0) sh[threadIdx.x >> 5] = v;
  __syncthreads();
  v = (threadIdx.x & 31) < (blockDim.x >> 5) ? sh[threadIdx.x & 31] : -INFINITY;
  return warp_max(v);
}

#endif
