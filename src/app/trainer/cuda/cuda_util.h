// cuda_util.h - what the CUDA sources share: the stream, error checks, launch sizes.
// (C++ only: included from .cu files.)
#ifndef CDDP_TRAIN_CUDA_UTIL_H
#define CDDP_TRAIN_CUDA_UTIL_H

#include <cuda_runtime.h>
#include <stdlib.h>

// The stream of this process's device work (created by cddp__cuda_bind).
cudaStream_t cddp__cuda_stream(void);
// A failed CUDA call is a bug or a lost device: say where and abort (the launcher names the rank).
void cddp__cuda_check(cudaError_t e, const char *what, const char *file, int line);
#define CUDA_CHECK(call) cddp__cuda_check((call), #call, __FILE__, __LINE__)
#define CUDA_LAUNCHED() cddp__cuda_check(cudaGetLastError(), "kernel launch", __FILE__, __LINE__)

static inline unsigned cdiv(size_t a, size_t b) { return (unsigned)((a + b - 1) / b); }

#endif
