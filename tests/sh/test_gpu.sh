#!/usr/bin/env bash
# test_gpu.sh - the GPU path where there is no GPU (CI, this machine): cddp starts without the
# NVIDIA driver or any CUDA library, train.device cuda is refused in one line naming the key,
# and tests/gpu/run.sh (the device tests) says 'no GPU' with its own exit code. The device
# tests themselves run only on a GPU machine: tests/gpu/run.sh; its trainer checks also run here
# at toy sizes on the emulated device (run.sh --emulate).
cd "$(dirname "$0")/../.." && source tests/sh/lib.sh
tmp=$(mktemp -d /tmp/cddp-gpu.XXXXXX); trap 'rm -rf "$tmp"' EXIT

# no CUDA library is needed to start: the runtime is static, cuBLAS/NCCL/NVML are dlopened
# (cddp-full, which runs train, holds the device layer: build/cddp links none of it)
needed=$(ldd "$CDDP" build/libexec/cddp/cddp-full | grep -oE 'lib(cuda|cudart|cublas|cublasLt|nccl|nvidia-ml)\.so[.0-9]*' | tr '\n' ' ')
[ -z "$needed" ] && ok "build/cddp and cddp-full need no CUDA, NCCL or NVML library to start" || fail "build/cddp needs" "$needed"
"$CDDP" --version >"$tmp/v" 2>&1 && grep -q '^cuda: ' "$tmp/v" && ok "cddp --version runs here: $(grep '^cuda: ' "$tmp/v" | cut -c1-40)... ($(ldconfig -p | grep -q 'libcuda\.so\.1 ' && echo driver present || echo no driver))" ||
  fail "cddp --version" "$(head -c 200 "$tmp/v")"

# train.device cuda with no usable GPU: exit 2, one line naming the key (before any rendezvous)
"$CDDP" train --config configs/fmnist_mlp.yaml --set train.device=cuda >"$tmp/out" 2>"$tmp/err"; rc=$?
lines=$(wc -l <"$tmp/err")
[ $rc = 2 ] && [ "$lines" = 1 ] && grep -q '^cddp train: train.device: cuda' "$tmp/err" &&
  ok "train.device cuda without a GPU: exit 2, one line: $(cut -c1-110 "$tmp/err")" ||
  fail "train.device cuda refusal" "rc $rc, $lines lines: $(head -c 300 "$tmp/err")"
"$CDDP" train --config configs/fmnist_mlp.yaml --set train.device=gpu >"$tmp/out" 2>"$tmp/err"; rc=$?
[ $rc = 2 ] && grep -q 'train.device' "$tmp/err" && ok "train.device gpu (not a choice) is refused naming the key" ||
  fail "train.device gpu" "rc $rc: $(head -c 300 "$tmp/err")"

# backend nccl with no GPU (or no NCCL): exit 2, one line saying what is missing
CDDP_BACKEND=nccl "$CDDP" train --config configs/fmnist_mlp.yaml >"$tmp/out" 2>"$tmp/err"; rc=$?
[ $rc = 2 ] && [ "$(wc -l <"$tmp/err")" = 1 ] && grep -q "backend 'nccl' " "$tmp/err" &&
  ok "backend nccl here: exit 2, one line: $(cut -c1-100 "$tmp/err")" || fail "backend nccl refusal" "rc $rc: $(head -c 300 "$tmp/err")"
"$CDDP" bench allreduce --backend nccl >"$tmp/out" 2>"$tmp/err"; rc=$?
[ $rc = 2 ] && head -1 "$tmp/err" | grep -q "^cddp bench: --backend nccl runs on GPU buffers: add --device cuda" &&
  ok "cddp bench --backend nccl without --device cuda: exit 2, says to add it" || fail "cddp bench --backend nccl" "rc $rc: $(head -1 "$tmp/err")"
# with --device cuda: no GPU here (one line, exit 2), and the emulated device is no GPU for NCCL
for emu in 0 1; do
  CDDP_DEVICE_EMULATE=$emu "$CDDP" bench allreduce --device cuda --backend nccl >"$tmp/out" 2>"$tmp/err"; rc=$?
  [ $rc = 2 ] && [ "$(wc -l <"$tmp/err")" = 1 ] && grep -q "^cddp bench: --.*: no NVIDIA driver\|^cddp bench: --backend nccl needs a GPU: this is the emulated device" "$tmp/err" &&
    ok "cddp bench --device cuda --backend nccl, CDDP_DEVICE_EMULATE=$emu: exit 2, one line: $(cut -c1-90 "$tmp/err")" ||
    fail "cddp bench --device cuda --backend nccl (emulate $emu)" "rc $rc: $(head -2 "$tmp/err" | tr '\n' ' ')"
done

# cddp doctor reports the GPUs through NVML, and plainly when there is no driver
timeout 60 "$CDDP" run --standalone --nproc-per-node 1 "$CDDP" doctor >"$tmp/doc" 2>&1; rc=$?
if ldconfig -p | grep -q 'libnvidia-ml\.so\.1 '; then want='gpus: [0-9]'; else want='gpus: none: no NVIDIA driver'; fi
[ $rc = 0 ] && grep -q "$want" "$tmp/doc" && ok "cddp doctor: $(grep -o 'gpus: .*' "$tmp/doc" | head -1 | cut -c1-90)" ||
  fail "cddp doctor gpus line" "rc $rc, want '$want': $(grep -m2 'gpus\|problem' "$tmp/doc")"

# the device tests: here they say 'no GPU' (77) or 'built without CUDA' (2), and run nothing
bash tests/gpu/run.sh >"$tmp/gpu" 2>&1; rc=$?
if [ -x build/tests/gpu/test_kernels ]; then
  if ldconfig -p | grep -q 'libcuda\.so\.1 '; then want=0; else want=77; fi
  [ $rc = $want ] && { [ $want = 0 ] || grep -q 'no GPU here' "$tmp/gpu"; } &&
    ok "tests/gpu/run.sh exits $want here: $(tail -1 "$tmp/gpu")" || fail "tests/gpu/run.sh" "rc $rc, want $want: $(tail -3 "$tmp/gpu")"
  # the harness itself, CPU table against CPU table: every comparison runs and passes
  build/tests/gpu/test_kernels --self >"$tmp/self" 2>&1; rc=$?
  n=$(grep -c '^ok ' "$tmp/self")
  [ $rc = 0 ] && [ "$n" -ge 40 ] && ! grep -q '^not ok' "$tmp/self" && ok "test_kernels --self: $n comparisons pass" ||
    fail "test_kernels --self" "rc $rc, $n ok: $(grep -m3 '^not ok' "$tmp/self")"
  build/tests/gpu/bench_gemm --cpu >"$tmp/bench" 2>&1; rc=$?
  [ $rc = 0 ] && grep -q '^bf16 GEMM peak (measured, cpu): [0-9.]* TFLOP/s' "$tmp/bench" &&
    ok "bench_gemm --cpu: $(tail -1 "$tmp/bench")" || fail "bench_gemm --cpu" "rc $rc: $(tail -2 "$tmp/bench")"
  build/tests/gpu/bench_ops --cpu >"$tmp/ops" 2>&1; rc=$?
  [ $rc = 0 ] && [ "$(grep -c ' [0-9.]* \(GB\|TFLOP\)/s$' "$tmp/ops")" = 18 ] &&
    grep -q '^composed step, bf16 products: [0-9.]* ms' "$tmp/ops" && grep -q '^composed step, bf16 products and attention: [0-9.]* ms' "$tmp/ops" &&
    ok "bench_ops --cpu: 18 operations timed, $(grep -m1 '^composed step, bf16 products:' "$tmp/ops")" ||
    fail "bench_ops --cpu" "rc $rc: $(tail -3 "$tmp/ops")"
else
  [ $rc = 2 ] && grep -q 'built without CUDA' "$tmp/gpu" && ok "tests/gpu/run.sh: built without CUDA, exit 2" ||
    fail "tests/gpu/run.sh without CUDA" "rc $rc: $(tail -2 "$tmp/gpu")"
  for c in "test_kernels --self" "bench_gemm --cpu" "bench_ops --cpu"; do
    ok "$c # SKIP [nvcc] built without CUDA: the device tests' CPU modes are not compiled"
  done
fi

# run.sh's trainer checks (loss against the CPU, 2 ranks on 1 GPU, MFU) at toy sizes on the
# emulated device: every figure line written, every check passed
FIGURES=$tmp/fig bash tests/gpu/run.sh --emulate >"$tmp/emu" 2>&1; rc=$?
n=$(grep -c '^\(loss_fp32\|loss_bf16\|loss_fp16\|two_ranks_one_gpu\|auto\|mfu_bf16\|mfu_fp32\): ' "$tmp/fig" 2>/dev/null)
[ $rc = 0 ] && [ "$n" = 7 ] && grep -q '^result: all device checks passed' "$tmp/fig" && ! grep -q FAILED "$tmp/fig" &&
  ok "tests/gpu/run.sh --emulate: 7 figure lines, all passed: $(grep '^two_ranks' "$tmp/fig" | cut -c1-80)" ||
  fail "tests/gpu/run.sh --emulate" "rc $rc, $n figures: $(grep -m3 'FAILED' "$tmp/fig" "$tmp/emu" | tr '\n' ' ' | cut -c1-300)"
finish
