#!/usr/bin/env bash
# tests/gpu/run.sh - every device check in one command, to run unchanged on a GPU machine
# (within 8 minutes on one H100), every figure written to one file (FIGURES, default
# build/gpu-figures.txt), one "name: value" line each:
#  1. test_kernels: every CUDA entry of the device layer against the CPU table (float32 within
#     1e-4 relative, bf16 within its tolerance); test_nccl: the nccl backend on device buffers;
#  2. bench_gemm: cuBLAS's bf16 GEMM peak, measured (beside the MFU); bench_ops: our kernels at
#     GPT-2 small's block, and the step they compose; the attention's bf16 tensor-core forward
#     and backward beside its fp32 kernels (attn_fwd_bf16, attn_bwd_bf16);
#  3. the trainer on the GPU (train.device cuda): a small GPT's loss after 200 steps against the
#     CPU's on the same data (tests/gpu/ref/gpt_200_cpu.txt, made by tests/gpu/make_ref.sh):
#     fp32 within 1%, bf16 and fp16 (with its loss scaling) within 2%;
#  4. 2 ranks sharing 1 GPU (the gradients to host memory bucket by bucket during backward, on
#     the comm stream) against 1 rank with 2 accumulation steps: every loss within 1e-6 relative;
#  5. GPT-2 small's shape (12 layers, d 768, 12 heads, context 1024) trained on the GPU: tokens/s
#     and MFU, 6N flops per token plus attention's 12 L d T (PaLM's count), over the H100's bf16
#     dense peak of 989 TFLOP/s (MFU_PEAK), the measured cuBLAS peak beside it; the step runs
#     the fused attention (its start line says so, or the check fails);
#  5b. cddp bench allreduce --device cuda: 2 ranks sharing the GPU, the data in device memory
#     staged through pinned host memory, every element checked, its bus bandwidth;
#  5c. the same with --backend nccl on the device buffers, one rank per GPU (up to 2 ranks);
#  5d. the trainer with NCCL on its device gradients (ddp.backend nccl; one rank per GPU, up to
#     2) against 1 rank x 2 accumulation steps: bit for bit alone, within 1e-6 on 2 GPUs;
#  6. train.device auto takes the GPU (its INFO line); what is not built yet is named as
#     FAILED, so the run cannot pass without it.
# --emulate runs 3.-5. at toy sizes on the emulated device (CDDP_DEVICE_EMULATE=1, the CPU's
# kernels; any build, CUDA or not) against a CPU run made on the spot: what tests/sh/test_gpu.sh
# runs on machines without a GPU, so the script's own logic is tested there.
# Exit: 0 all passed; 1 a check failed (the figures file says which); 2 this cddp is built
# without CUDA (nvcc not found or NO_CUDA=1); 77 no GPU here: nothing was run.
set -uo pipefail
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-build}
FIGURES=${FIGURES:-$BUILD/gpu-figures.txt}
EMU=0
[ "${1:-}" = --emulate ] && EMU=1
CDDP=$PWD/$BUILD/cddp
make -s -j"$(nproc)" WERROR=1 BUILD="$BUILD" all gpu-tests >/dev/null || { echo "tests/gpu/run.sh: the build failed"; exit 1; }
if [ $EMU = 0 ] && [ ! -x "$BUILD/tests/gpu/test_kernels" ]; then
  echo "tests/gpu/run.sh: this cddp is built without CUDA (nvcc not found, or NO_CUDA=1): nothing to run"
  exit 2
fi
T=$(mktemp -d /tmp/cddp-gpu-run.XXXXXX)
trap 'rm -rf "$T"' EXIT
rc=0
fig() { echo "$*" | tee -a "$FIGURES"; }
bad() { fig "FAILED: $*"; rc=1; }

if [ $EMU = 0 ]; then
  "$BUILD/tests/gpu/test_kernels" >"$T/kernels" 2>&1; krc=$?
  cat "$T/kernels"
  if [ $krc = 77 ]; then
    echo "tests/gpu/run.sh: no GPU here: the device tests were not run"
    exit 77
  fi
fi
: >"$FIGURES"
fig "run: $(date -u '+%Y-%m-%d %H:%M UTC'), cddp $(git rev-parse --short HEAD 2>/dev/null || echo '?')$([ $EMU = 1 ] && echo ', EMULATED device (toy sizes)')"
[ $EMU = 0 ] && command -v nvidia-smi >/dev/null &&
  fig "gpu: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | head -1)"

PEAK=989 # TFLOP/s: the H100's bf16 dense peak (SXM), what the issue's MFU is counted against
if [ $EMU = 0 ]; then
  ok_k=$(grep -c '^ok' "$T/kernels"); bad_k=$(grep -c '^not ok' "$T/kernels")
  fig "kernels: $ok_k comparisons ok, $bad_k failed"
  [ $krc = 0 ] || bad "test_kernels exit $krc"
  "$BUILD/tests/gpu/test_nccl" >"$T/nccl" 2>&1 || bad "test_nccl: $(grep '^not ok' "$T/nccl" | head -2 | tr '\n' ' ')"
  cat "$T/nccl"
  fig "nccl: $(grep -c '^ok' "$T/nccl") ok, $(grep -c '^not ok' "$T/nccl") failed"
  "$BUILD/tests/gpu/bench_gemm" >"$T/gemm" 2>&1 || bad "bench_gemm: $(tail -1 "$T/gemm")"
  cat "$T/gemm"
  fig "cublas_bf16_peak: $(sed -n 's/^bf16 GEMM peak (measured, [a-z]*): //p' "$T/gemm")"
  "$BUILD/tests/gpu/bench_ops" >"$T/ops" 2>&1 || bad "bench_ops: $(tail -1 "$T/ops")"
  cat "$T/ops"
  grep '^composed step' "$T/ops" | while read -r l; do fig "bench_ops: $l"; done
  # the fused attention on tensor cores (bf16) beside the fp32 kernels, GPT-2 small's block
  at() { grep "^causal attention $1, fused (flash; $2" "$T/ops" | awk '{ printf "%s ms (%s %s)", $(NF-2), $(NF-1), $NF }'; }
  fig "attn_fwd_bf16: $(at forward 'bf16 tensor') on tensor cores, against $(at forward fp32) in fp32 (bench_ops)"
  fig "attn_bwd_bf16: $(at backward 'bf16 tensor') on tensor cores, against $(at backward fp32) in fp32 (bench_ops; test_kernels checks both against their references and fp32's)"
fi

# train NAME NPROC ARGS...: cddp train on the device (NPROC 2: two ranks on GPU 0); 0 or its exit
train() {
  local name=$1 np=$2; shift 2
  local env=(CDDP_DEVICE_EMULATE=$EMU CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-0})
  if [ "$np" = 1 ]; then
    env "${env[@]}" timeout 300 "$CDDP" train --work-dir "$T" --name "$name" --set train.device=cuda "$@" >"$T/$name.out" 2>&1
  else
    env "${env[@]}" timeout 300 "$CDDP" run --standalone --nproc-per-node "$np" "$CDDP" train --work-dir "$T" --name "$name" \
      --set train.device=cuda "$@" >"$T/$name.out" 2>&1
  fi
}
# losses RUN: "step loss" per optimizer step of a run's metrics
losses() { grep -v '"eval"' "$T/$1/metrics.jsonl" 2>/dev/null | sed -n 's/.*"step":\([0-9]*\),.*"loss":\([^,]*\).*/\1 \2/p'; }
last_line() { tail -1 "$T/$1.out" | cut -c1-200; }

# 3. the loss after S steps against the CPU's, fp32 and bf16
source tests/gpu/loss_args.sh # LOSS=(...): the run tests/gpu/make_ref.sh made on the CPU
REF=tests/gpu/ref/gpt_200_cpu.txt
if [ $EMU = 1 ]; then # toy: 4 steps, the reference made here on the CPU
  LOSS+=(--set schedule.warmup_steps=1 --set train.max_steps=4 --set model.context=32 --set model.d_model=32 --set model.n_head=2)
  CDDP_DEVICE_EMULATE=0 timeout 300 "$CDDP" train --work-dir "$T" --name ref "${LOSS[@]}" --set train.device=cpu >"$T/ref.out" 2>&1
  losses ref >"$T/ref.txt"
  REF=$T/ref.txt
fi
steps=$(tail -1 "$REF" | cut -d' ' -f1)
for prec in fp32 bf16 fp16; do
  tol=$([ $prec = fp32 ] && echo 0.01 || echo 0.02)
  train loss_$prec 1 "${LOSS[@]}" --set train.precision=$prec; r=$?
  want=$(tail -1 "$REF" | cut -d' ' -f2) got=$(losses loss_$prec | awk -v s="$steps" '$1 == s { print $2 }')
  if [ $r != 0 ] || [ -z "$got" ]; then bad "loss_$prec: the run failed (exit $r): $(last_line loss_$prec)"; continue; fi
  rel=$(awk -v a="$got" -v b="$want" 'BEGIN { d = (a - b) / b; printf "%.4f", d < 0 ? -d : d }')
  fig "loss_$prec: step $steps loss $got on the device, $want on the CPU: $(awk -v r="$rel" 'BEGIN { printf "%.2f", r * 100 }')% apart (at most $(awk -v t="$tol" 'BEGIN { print t * 100 }')%)"
  awk -v r="$rel" -v t="$tol" 'BEGIN { exit !(r <= t) }' || bad "loss_$prec $rel apart, more than $tol"
done

# 4. two ranks on one GPU against one rank with two accumulation steps
TWO=("${LOSS[@]}" --set train.max_steps=$([ $EMU = 1 ] && echo 4 || echo 30) --set batch.global=32 --set batch.micro=16 --set ddp.threads=1)
train two_ranks 2 "${TWO[@]}"; r2=$?
train one_rank 1 "${TWO[@]}"; r1=$?
if [ $r2 != 0 ] || [ $r1 != 0 ]; then
  bad "two_ranks_one_gpu: a run failed (exit $r2 / $r1): $(last_line two_ranks) / $(last_line one_rank)"
else
  join <(losses two_ranks) <(losses one_rank) >"$T/pairs"
  n=$(wc -l <"$T/pairs")
  worst=$(awk '{ d = $2 - $3; if (d < 0) d = -d; r = d / ($3 < 0 ? -$3 : $3); if (r > w) w = r } END { printf "%.2g", w }' "$T/pairs")
  fig "two_ranks_one_gpu: $n steps, worst loss difference $worst relative against 1 rank x 2 accumulation steps (at most 1e-6)"
  [ "$n" -ge 4 ] && awk -v w="$worst" 'BEGIN { exit !(w <= 1e-6) }' || bad "two_ranks_one_gpu: $worst apart over $n steps"
fi

# train.device auto takes the GPU, and says so in one INFO line
CDDP_DEVICE_EMULATE=$EMU CDDP_DEBUG=INFO CDDP_DEBUG_SUBSYS=TRAIN timeout 300 "$CDDP" train --work-dir "$T" --name auto \
  "${LOSS[@]}" --set train.max_steps=4 --set schedule.warmup_steps=1 --set train.device=auto >"$T/auto.out" 2>&1; r=$?
line=$(grep -m1 -o 'train.device auto: .*' "$T/auto.out")
fig "auto: ${line:-no line} (exit $r)"
[ $r = 0 ] && grep -q 'train.device auto: cuda' <<<"$line" || bad "train.device auto did not take the GPU: $(last_line auto)"

# 5. GPT-2 small's shape: tokens/s and MFU, bf16 (the issue's figure) and fp32
B=${MFU_BATCH:-16} L=12 C=768 Tc=1024
[ $EMU = 1 ] && B=4 L=1 C=32 Tc=32
MFU=(--config configs/gpt_kjv.yaml --set model.n_layer=12 --set model.d_model=768 --set model.n_head=12 --set model.context=1024
     --set batch.global=$B --set batch.micro=$B --set batch.reference=$B --set train.max_steps=12 --set schedule.warmup_steps=1
     --set eval.every_epoch=false --set eval.at_end=false --set log.every_steps=1 --set checkpoint.every_steps=0)
[ $EMU = 1 ] && MFU+=(--set model.n_layer=1 --set model.d_model=32 --set model.n_head=2 --set model.context=32
                      --set batch.global=4 --set batch.micro=4 --set batch.reference=4 --set train.max_steps=4)
for prec in bf16 fp32; do
  train mfu_$prec 1 "${MFU[@]}" --set train.precision=$prec; r=$?
  if [ $r != 0 ]; then bad "mfu_$prec: the run failed (exit $r): $(last_line mfu_$prec)"; continue; fi
  # "GPT, N parameters", or "GPT (fused attention), N parameters" (a device's default)
  N=$(grep -m1 'cddp train: GPT[^,]*, [0-9]* parameters' "$T/mfu_$prec.out" | sed -n 's/.*GPT[^,]*, \([0-9]*\) parameters.*/\1/p')
  [ -n "$N" ] || { bad "mfu_$prec: no parameter count in the start line: $(last_line mfu_$prec)"; continue; }
  grep -q 'cddp train: GPT (fused attention)' "$T/mfu_$prec.out" || bad "mfu_$prec: the GPT did not take the fused attention"
  # the median tokens/s of the steps after the first two (allocation, cuBLAS's first calls)
  tps=$(grep -v '"eval"' "$T/mfu_$prec/metrics.jsonl" | sed -n 's/.*"step":\([0-9]*\),.*"tokens_per_s":\([^,]*\).*/\1 \2/p' |
        awk '$1 > 2 { print $2 }' | sort -g | awk '{ v[NR] = $1 } END { print NR ? v[int((NR + 1) / 2)] : 0 }')
  fig "mfu_$prec: $(awk -v t="$tps" -v n="$N" -v l="$L" -v c="$C" -v k="$Tc" -v p="$PEAK" 'BEGIN {
        f = 6 * n + 12 * l * c * k; printf "%.0f tokens/s x %.3g flops/token (6N + 12 L d T; N %d, L %d, d %d, T %d) = %.1f TFLOP/s = %.1f%% MFU of %d", t, f, n, l, c, k, t * f / 1e12, 100 * t * f / (p * 1e12), p }') (batch $B x T; cuBLAS bf16 peak measured above)"
done

# 5b. all-reduce on device buffers: 2 ranks sharing the GPU, staged through pinned memory
SZ=$([ $EMU = 1 ] && echo 1M || echo 64M)
CDDP_DEVICE_EMULATE=$EMU timeout 300 "$CDDP" run --nproc-per-node 2 "$CDDP" bench allreduce --device cuda -b $SZ -n 10 \
  >"$T/bar.out" 2>&1; r=$?
bw=$(sed -n 's/^\[rank 0\] # Avg bus bandwidth *: *\([0-9.]*\).*/\1/p' "$T/bar.out")
fig "allreduce_device: 2 ranks on 1 GPU, $SZ of float32 staged through pinned host memory: ${bw:-?} GB/s bus bandwidth (exit $r)"
[ $r = 0 ] && grep -q 'Out of bounds values : 0 OK' "$T/bar.out" || bad "allreduce_device: $(tail -2 "$T/bar.out")"

# 5c. all-reduce over NCCL on the device buffers, one rank per GPU (NCCL refuses two on one):
# on a one-GPU machine a world of one, which checks the path and every element, not a link
if [ $EMU = 0 ]; then
  NP=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU'); [ "${NP:-0}" -gt 2 ] && NP=2; [ "${NP:-0}" -lt 1 ] && NP=1
  timeout 300 "$CDDP" run --nproc-per-node "$NP" "$CDDP" bench allreduce --device cuda --backend nccl -b 64M -n 10 \
    >"$T/barn.out" 2>&1; r=$?
  bw=$(sed -n 's/^\(\[rank 0\] \)\{0,1\}# Avg bus bandwidth *: *\([0-9.]*\).*/\2/p' "$T/barn.out" | head -1)
  fig "allreduce_nccl: $NP rank(s), one GPU each, 64M of float32 on the device buffers: ${bw:-?} GB/s bus bandwidth (exit $r)"
  [ $r = 0 ] && grep -q 'Out of bounds values : 0 OK' "$T/barn.out" || bad "allreduce_nccl: $(tail -2 "$T/barn.out")"
fi

# 5d. NCCL under the trainer (ddp.backend nccl): DDP's buckets all-reduced by NCCL on the
# device's gradients, each after its mark, on the comm stream. One GPU: a world of one, which
# runs the whole path (the marks, the comm stream's waits, NCCL in place, the optimizer's wait)
# and must give the staged run's losses bit for bit (a sum over one rank is the identity); two
# GPUs: 2 ranks, one GPU each (ddp.backend auto must take NCCL), against 1 rank x 2
# accumulation steps within 1e-6, as two_ranks_one_gpu.
if [ $EMU = 0 ]; then
  NP=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU'); [ "${NP:-0}" -gt 2 ] && NP=2; [ "${NP:-0}" -lt 1 ] && NP=1
  if [ "$NP" = 1 ]; then
    CUDA_VISIBLE_DEVICES=0 timeout 300 "$CDDP" train --work-dir "$T" --name nccl_train --set train.device=cuda \
      "${TWO[@]}" --set ddp.backend=nccl >"$T/nccl_train.out" 2>&1; r=$?
  else
    CUDA_VISIBLE_DEVICES=0,1 CDDP_DEBUG=INFO CDDP_DEBUG_SUBSYS=TRAIN timeout 300 "$CDDP" run --standalone --nproc-per-node 2 \
      "$CDDP" train --work-dir "$T" --name nccl_train --set train.device=cuda "${TWO[@]}" >"$T/nccl_train.out" 2>&1; r=$?
  fi
  join <(losses nccl_train) <(losses one_rank) >"$T/npairs"
  n=$(wc -l <"$T/npairs")
  worst=$(awk '{ d = $2 - $3; if (d < 0) d = -d; r = d / ($3 < 0 ? -$3 : $3); if (r > w) w = r } END { printf "%.2g", w }' "$T/npairs")
  want=$([ "$NP" = 1 ] && echo 0 || echo 1e-6)
  fig "nccl_train: $NP rank(s), one GPU each, NCCL on the device's gradients: $n steps, worst loss difference $worst relative against 1 rank x 2 accumulation steps staged (at most $want) (exit $r)"
  [ $r = 0 ] && grep -q 'gradients all-reduced by NCCL on the device bucket by bucket' "$T/nccl_train.out" &&
    [ "$n" -ge 4 ] && awk -v w="$worst" -v m="$want" 'BEGIN { exit !(w <= m) }' ||
    bad "nccl_train: exit $r, $n steps, $worst apart: $(last_line nccl_train)"
fi

# 6. named, not built yet: the run is not whole without them
if [ $EMU = 0 ]; then
  for c in train allreduce; do
    "$CDDP" bench $c --help 2>&1 | grep -q -- '--device' || bad "cddp bench $c --device cuda: not built yet"
  done
fi
[ $rc = 0 ] && fig "result: all device checks passed" || fig "result: FAILED (the lines above say which)"
echo "tests/gpu/run.sh: figures in $FIGURES"
exit $rc
