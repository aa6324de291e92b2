#!/usr/bin/env bash
# tests/gpu/run.sh - the device tests, one command that runs unchanged on a GPU machine:
# every CUDA kernel of the device layer against the CPU table (test_kernels: float32 within
# 1e-4 relative, bf16 within its tolerance), the nccl backend on device buffers (test_nccl: a
# world of one; two ranks on two GPUs when there are two), then cuBLAS's bf16 GEMM peak
# (bench_gemm) and our kernels at GPT-2 small's block, with the step they compose (bench_ops).
# Builds what is missing (make gpu-tests). tests/run.sh does not run it: CI has no GPU.
# Exit: 0 all passed; 1 a test failed; 2 this cddp is built without CUDA (nvcc not found or
# NO_CUDA=1); 77 no GPU here (the driver or a device is missing): nothing was run.
set -uo pipefail
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-build}
make -s -j"$(nproc)" WERROR=1 BUILD="$BUILD" gpu-tests >/dev/null || { echo "tests/gpu/run.sh: the build failed"; exit 1; }
if [ ! -x "$BUILD/tests/gpu/test_kernels" ]; then
  echo "tests/gpu/run.sh: this cddp is built without CUDA (nvcc not found, or NO_CUDA=1): nothing to run"
  exit 2
fi
"$BUILD/tests/gpu/test_kernels"; rc=$?
if [ $rc = 77 ]; then
  echo "tests/gpu/run.sh: no GPU here: the device tests were not run"
  exit 77
fi
"$BUILD/tests/gpu/test_nccl" || rc=1
"$BUILD/tests/gpu/bench_gemm" || rc=1
"$BUILD/tests/gpu/bench_ops" || rc=1
[ $rc = 0 ] && echo "tests/gpu/run.sh: all device tests passed" || echo "tests/gpu/run.sh: FAILED"
exit $rc
