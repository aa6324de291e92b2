// cuda_rt.cu - the CUDA runtime under the device layer: the probe train.device reads, the
// device each rank binds, and the one stream every kernel, cuBLAS call and copy runs on.
#include <cuda_runtime.h>
#include <stdio.h>
#include <string.h>

#include "trainer/cuda/cuda_util.h"
#include "trainer/device.h"
#include "trainer/ops.h"

void cddp__cuda_probe(cddp_cuda_probe_t *p) {
  memset(p, 0, sizeof *p);
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e == cudaSuccess && n > 0) {
    p->status = CDDP_CUDA_OK;
    p->count = n;
    return;
  }
  (void)cudaGetLastError(); /* the probe's error is not the next call's */
  if (e == cudaErrorInsufficientDriver || e == cudaErrorStubLibrary) p->status = CDDP_CUDA_NO_DRIVER;
  else if (e == cudaSuccess || e == cudaErrorNoDevice) p->status = CDDP_CUDA_NO_DEVICE;
  else p->status = CDDP_CUDA_ERROR;
  snprintf(p->text, sizeof p->text, "%s", cudaGetErrorString(e));
}

static cudaStream_t g_stream, g_copy, g_comm; // the device work; the batches' copies; the gradients'

int cddp__cuda_bind(int ordinal, char *err, size_t cap) {
  cudaError_t e = cudaSetDevice(ordinal);
  if (e == cudaSuccess && !g_stream) e = cudaStreamCreateWithFlags(&g_stream, cudaStreamNonBlocking);
  if (e == cudaSuccess && !g_copy) e = cudaStreamCreateWithFlags(&g_copy, cudaStreamNonBlocking);
  if (e == cudaSuccess && !g_comm) e = cudaStreamCreateWithFlags(&g_comm, cudaStreamNonBlocking);
  if (e != cudaSuccess) {
    snprintf(err, cap, "CUDA device %d: %s", ordinal, cudaGetErrorString(e));
    return -1;
  }
  return 0;
}

cudaStream_t cddp__cuda_stream(void) { return g_stream; }
cudaStream_t cddp__cuda_copy_stream(void) { return g_copy; }
cudaStream_t cddp__cuda_comm_stream(void) { return g_comm; }

void cddp__cuda_check(cudaError_t e, const char *what, const char *file, int line) {
  if (e == cudaSuccess) return;
  fprintf(stderr, "cddp: CUDA error at %s:%d (%s): %s\n", file, line, what, cudaGetErrorString(e));
  abort();
}
