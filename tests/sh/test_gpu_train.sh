#!/usr/bin/env bash
# test_gpu_train.sh - the trainer's device path on a machine without a GPU: train.device cuda
# on the emulated device (CDDP_DEVICE_EMULATE=1, src/app/trainer/ops_emu.c: the CPU's kernels on
# memory the host cannot dereference, so a host access through a device pointer crashes). The
# state lives on the "device", batches are copied in, gradients are staged through DDP's host
# buffer, the optimizer runs through the table, checkpoints go through to_host / to_device, and
# cddp sample generates there.
# Every check is bits (the emulated device must give the CPU table's loss lines and weights),
# but for the GPT's fused attention (model.attention auto on a device), which sums in another
# order: within 1e-5 relative of the CPU's materialised attention at every step.
cd "$(dirname "$0")/../.." && source tests/sh/lib.sh
T=$(mktemp -d /tmp/cddp-gpu-train-test.XXXXXX)
trap 'pkill -KILL -f "$T" 2>/dev/null; rm -rf "$T"' EXIT
MLP=(--config configs/fmnist_mlp.yaml --set model.hidden=[128] --set train.max_steps=24 --set checkpoint.every_steps=12
     --set eval.every_epoch=false --set log.every_steps=1 --set train.seed=7 --set ddp.threads=1)
GPT=(--config configs/gpt_kjv.yaml --set model.n_layer=2 --set model.d_model=32 --set model.n_head=2 --set model.context=32
     --set train.max_steps=8 --set schedule.warmup_steps=2 --set checkpoint.every_steps=4 --set eval.every_epoch=false
     --set log.every_steps=1)
# on DEV NAME ARGS...: one rank, train.device DEV (emu: cuda on the emulated device)
on() {
  local dev=$1 name=$2; shift 2
  if [ "$dev" = emu ]; then set -- --set train.device=cuda "$@"; else set -- --set train.device=cpu "$@"; fi
  CDDP_DEVICE_EMULATE=$([ "$dev" = emu ] && echo 1 || echo 0) timeout 120 \
    "$CDDP" train --work-dir "$T" --name "$name" "$@" >"$T/$name.out" 2>&1
}
# on2 DEV NAME ARGS...: the same over two ranks
on2() {
  local dev=$1 name=$2; shift 2
  if [ "$dev" = emu ]; then set -- --set train.device=cuda "$@"; else set -- --set train.device=cpu "$@"; fi
  CDDP_DEVICE_EMULATE=$([ "$dev" = emu ] && echo 1 || echo 0) timeout 180 \
    "$CDDP" run --standalone --nproc-per-node 2 "$CDDP" train --work-dir "$T" --name "$name" "$@" >"$T/$name.out" 2>&1
}
losses() { grep -v '"eval"' "$T/$1/metrics.jsonl" | sed -n 's/.*"step":\([0-9]*\).*"loss":\([^,]*\).*/\1 \2/p'; }
weights() { md5sum <"$T/$1/checkpoints/step-$(printf %09d "$2")/model.safetensors"; }
same() { [ -n "$(losses "$1")" ] && [ "$(losses "$1")" = "$(losses "$2")" ] && [ "$(weights "$1" "$3")" = "$(weights "$2" "$3")" ]; }
# worst A B: the largest relative difference of two runs' 8 losses; "mismatch" when the steps
# differ, a loss is not a number (NaN), or there are not 8
worst() {
  paste -d' ' <(losses "$1") <(losses "$2") |
    awk '$1 != $3 || $4 !~ /^[0-9][0-9.]*(e[-+]?[0-9]+)?$/ { bad = 1 }
         { d = ($2 - $4) / $2; d = d < 0 ? -d : d; if (d > w) w = d }
         END { if (bad || NR != 8) print "mismatch"; else printf "%.2e", w }'
}
why() { echo "rc $1; $(tail -2 "$T/$2.out" | tr '\n' ' ' | cut -c1-300)"; }

# 1. the MLP, one rank, two accumulation micro-steps (the second added on the device)
on cpu mlp_cpu "${MLP[@]}"; rc1=$?
on emu mlp_emu "${MLP[@]}"; rc=$?
[ $rc1 = 0 ] && [ $rc = 0 ] && same mlp_cpu mlp_emu 24 &&
  grep -q 'the model trains on the emulated device' "$T/mlp_emu.out" &&
  ok "MLP on the emulated device, 1 rank x 2 micro-steps: the CPU's 24 loss lines and weights, bit for bit" ||
  fail "MLP emulated vs cpu" "$(why "$rc1/$rc" mlp_emu)"

# 2. two ranks: the gradients cross to DDP's host buffer bucket by bucket during backward
# (4 buckets of 0.1 MiB, copies on the comm stream after each piece's mark); the same bits as
# one rank with two accumulation steps (the 2-ranks-on-1-GPU check's CPU form). A copy queued
# without its mark, or read before its event, is NaN on the emulated device.
staged_line='gradients copied to host memory bucket by bucket during backward'
CDDP_DEBUG=INFO CDDP_DEBUG_SUBSYS=TRAIN on2 emu mlp_emu2 "${MLP[@]}" --set ddp.bucket_mb=0.1; rc=$?
[ $rc = 0 ] && same mlp_emu mlp_emu2 24 && grep -q "$staged_line" "$T/mlp_emu2.out" &&
  ok "MLP, 2 ranks on the emulated device: 4 buckets over the comm stream give 1 rank x 2 micro-steps' bits" ||
  fail "MLP 2 ranks emulated" "$(why $rc mlp_emu2) $(diff <(losses mlp_emu) <(losses mlp_emu2) | head -4 | tr '\n' ' ')"
# ddp.backend auto (ddp_path.c): NCCL only where every rank has a GPU of its own; the emulated
# device has none, so the staged path, said at INFO with the reason, once (rank 0)
path_line='ddp: the device.s gradients are staged through pinned host memory for the native transports (ddp.backend auto): rank 0 cannot use NCCL: the emulated device has no NCCL'
[ "$(grep -c "$path_line" "$T/mlp_emu2.out")" = 1 ] &&
  ok "ddp.backend auto on the emulated device: staged, said at INFO with the reason" ||
  fail "ddp.backend auto's line" "$(grep -c 'ddp: ' "$T/mlp_emu2.out") ddp lines: $(grep 'ddp: ' "$T/mlp_emu2.out" | head -2)"

# 3. the GPT (AdamW, clipping, the tied head; eval's logits copied to the host), with the
# CPU's materialised attention for bits
on cpu gpt_cpu "${GPT[@]}"; rc1=$?
on emu gpt_emu "${GPT[@]}" --set model.attention=materialised; rc=$?
ev() { grep '^eval after' "$T/$1.out"; }
[ $rc1 = 0 ] && [ $rc = 0 ] && same gpt_cpu gpt_emu 8 && [ -n "$(ev gpt_emu)" ] && [ "$(ev gpt_cpu)" = "$(ev gpt_emu)" ] &&
  ok "GPT on the emulated device: the CPU's loss lines, eval line and weights, bit for bit" ||
  fail "GPT emulated vs cpu" "$(why "$rc1/$rc" gpt_emu)"

# the device's own attention, fused (model.attention auto): every loss within 1e-5 relative
on emu gpt_fused "${GPT[@]}"; rc=$?
worst=$(worst gpt_cpu gpt_fused)
[ $rc = 0 ] && grep -q 'GPT (fused attention), [0-9]* parameters' "$T/gpt_fused.out" && [ "$worst" != mismatch ] &&
  awk -v w="$worst" 'BEGIN { exit !(w <= 1e-5) }' &&
  ok "GPT with the fused attention on the emulated device: 8 losses within $worst relative of the CPU's" ||
  fail "GPT fused vs cpu" "worst $worst; $(why $rc gpt_fused)"


# bf16 on the device (train.precision bf16): the products' inputs rounded to bf16, fp32
# accumulation and master weights, where the GPU's cuBLAS rounds them; the fused attention in
# fp32. The loss at step 8 within 2% of fp32's, and not fp32's own numbers (it did round)
on emu gpt_bf16 "${GPT[@]}" --set train.precision=bf16; rc=$?
b=$(losses gpt_bf16 | awk '$1 == 8 { print $2 }') f=$(losses gpt_fused | awk '$1 == 8 { print $2 }')
rel=$(awk -v a="$b" -v b="$f" 'BEGIN { if (a !~ /^[0-9]/ || b + 0 == 0) { print "none"; exit } d = (a - b) / b; printf "%.2e", d < 0 ? -d : d }')
[ $rc = 0 ] && [ "$rel" != none ] && [ "$(losses gpt_bf16)" != "$(losses gpt_fused)" ] &&
  awk -v r="$rel" 'BEGIN { exit !(r <= 0.02) }' &&
  ok "GPT in bf16 on the emulated device: step 8's loss $b, $rel from fp32's $f (at most 2%)" ||
  fail "GPT bf16 on the device" "rel $rel ($b vs $f); $(why $rc gpt_bf16)"
# fp16 on the device (train.precision fp16): the products' inputs rounded to IEEE half where
# cuBLAS's fp16 GEMM takes them, the loss scaled by S = 65536 (GradScaler's) and the gradients
# unscaled before they leave (the gradient norm is fp32's, not S times it); step 8's loss within
# 2% of fp32's, not its numbers, no step skipped
on emu gpt_fp16 "${GPT[@]}" --set train.precision=fp16; rc=$?
h=$(losses gpt_fp16 | awk '$1 == 8 { print $2 }')
gn() { grep -v '"eval"' "$T/$1/metrics.jsonl" | sed -n 's/.*"step":8,.*"grad_norm":\([^,]*\).*/\1/p'; }
gnrel=$(awk -v a="$(gn gpt_fp16)" -v b="$(gn gpt_fused)" 'BEGIN { if (b + 0 == 0) { print 1; exit } d = (a - b) / b; print d < 0 ? -d : d }')
rel=$(awk -v a="$h" -v b="$f" 'BEGIN { if (a !~ /^[0-9]/ || b + 0 == 0) { print "none"; exit } d = (a - b) / b; printf "%.2e", d < 0 ? -d : d }')
scales=$(grep -v '"eval"' "$T/gpt_fp16/metrics.jsonl" | sed -n 's/.*"loss_scale":\([0-9.e+]*\),"skipped":false.*/\1/p' | sort -u)
[ $rc = 0 ] && [ "$rel" != none ] && [ "$(losses gpt_fp16)" != "$(losses gpt_fused)" ] && [ "$scales" = 65536 ] &&
  awk -v r="$gnrel" 'BEGIN { exit !(r <= 0.02) }' &&
  [ "$(grep -v '"eval"' "$T/gpt_fp16/metrics.jsonl" | grep -c '"skipped":false')" = 8 ] &&
  awk -v r="$rel" 'BEGIN { exit !(r <= 0.02) }' &&
  ok "GPT in fp16 on the emulated device: step 8's loss $h, $rel from fp32's $f (at most 2%), S 65536, none skipped" ||
  fail "GPT fp16 on the device" "rel $rel ($h vs $f), grad norm $gnrel apart, scales '$scales'; $(why $rc gpt_fp16)"
# an overflow injected on rank 1 at step 3 (its backward's scale times inf): every rank skips
# that step (rank 0's line says so, and no loss after it is NaN), S halves, and it doubles
# again after train.loss_scale_interval (4) good steps
on2 emu fp16_skip "${GPT[@]}" --set train.precision=fp16 --set debug.overflow_step=3 --set debug.overflow_rank=1 \
  --set train.loss_scale_interval=4; rc=$?
got=$(grep -v '"eval"' "$T/fp16_skip/metrics.jsonl" |
      sed -n 's/.*"step":\([0-9]*\),.*"loss":\([0-9][0-9.e+-]*\),.*"loss_scale":\([0-9.e+]*\),"skipped":\([a-z]*\).*/\1:\3:\4/p' | tr '\n' ' ')
want="1:65536:false 2:65536:false 3:65536:true 4:32768:false 5:32768:false 6:32768:false 7:32768:false 8:65536:false "
[ $rc = 0 ] && [ "$got" = "$want" ] &&
  ok "fp16, 2 ranks, an overflow on rank 1 at step 3: step 3 skipped on every rank, S 65536 -> 32768 -> 65536 after 4 good steps" ||
  fail "fp16 overflow skip" "got '$got'; $(why $rc fp16_skip)"
# the loss scale is in the checkpoint (GradScaler's state): resumed at step 4 (S 32768, one good
# step counted), steps 5-8 are the uninterrupted run's, losses and scales, bit for bit
on2 emu fp16_resume "${GPT[@]}" --set train.precision=fp16 --set train.loss_scale_interval=4 \
  --resume-from "$T/fp16_skip/checkpoints/step-000000004"; rc=$?
tail8() { grep -v '"eval"' "$T/$1/metrics.jsonl" | sed -n 's/.*"step":\([5-8]\),.*"loss":\([^,]*\),.*"loss_scale":\([0-9.e+]*\).*/\1 \2 \3/p'; }
[ $rc = 0 ] && [ "$(tail8 fp16_resume | wc -l)" = 4 ] && [ "$(tail8 fp16_resume)" = "$(tail8 fp16_skip)" ] &&
  ok "fp16 resumed from step 4's checkpoint: S and its count restored, steps 5-8 as uninterrupted" ||
  fail "fp16 resume" "$(tail8 fp16_resume | tr '\n' ' ') vs $(tail8 fp16_skip | tr '\n' ' '); $(why $rc fp16_resume)"
# cddp sample on the device: the same text as on the CPU from the same checkpoint and seed
smp() { CDDP_DEVICE_EMULATE=$1 timeout 60 "$CDDP" sample --ckpt "$T/gpt_emu" --device "$2" -n 40 --seed 3 --prompt "In the"; }
a=$(smp 0 cpu 2>&1); rc1=$?
b=$(smp 1 cuda 2>&1); rc=$?
[ $rc1 = 0 ] && [ $rc = 0 ] && [ ${#a} -gt 40 ] && [ "$a" = "$b" ] &&
  ok "cddp sample --device cuda on the emulated device: the CPU's 40 bytes" || fail "sample on the device" "rc $rc1/$rc: '$a' vs '$b'"

# 3b. the GPT over two ranks, its buckets (0.02 MiB: 8) crossing during backward, against one
# rank with two micro-steps (gpt_emu: global 32, micro 16): every loss within 1e-6 relative,
# the issue's 2-ranks-on-1-GPU bound (the GPT's weights differ from 1 x 2 in the last bits,
# as they did with the whole buffer staged after backward; a copy without its mark is NaN,
# and a loss that is not a number fails)
on2 emu gpt_emu2 "${GPT[@]}" --set model.attention=materialised --set ddp.bucket_mb=0.02; rc=$?
worst=$(worst gpt_emu gpt_emu2)
[ $rc = 0 ] && grep -q "$staged_line" "$T/gpt_emu2.out" && [ "$worst" != mismatch ] &&
  awk -v w="$worst" 'BEGIN { exit !(w <= 1e-6) }' &&
  ok "GPT, 2 ranks on the emulated device, buckets over the comm stream: 8 losses within $worst of 1 rank x 2 micro-steps" ||
  fail "GPT 2 ranks emulated" "worst $worst; $(why $rc gpt_emu2)"
# 4. a checkpoint written on the device resumes on the CPU, and one from the CPU on the device:
# the rest of the run is the uninterrupted run's, bit for bit
for way in emu:cpu cpu:emu; do
  from=${way%:*} to=${way#*:} name=resume_${from}_$to
  src=mlp_$from
  on "$to" "$name" "${MLP[@]}" --resume-from "$T/$src/checkpoints/step-000000012"; rc=$?
  [ $rc = 0 ] && grep -q 'resuming from' "$T/$name.out" &&
    [ "$(losses "$name" | awk '$1 > 12')" = "$(losses mlp_cpu | awk '$1 > 12')" ] && [ "$(weights "$name" 24)" = "$(weights mlp_cpu 24)" ] &&
    ok "a checkpoint from the $from resumed on the $to: steps 13-24 and the weights as uninterrupted" ||
    fail "resume $from -> $to" "$(why $rc "$name")"
done

# cddp bench train --device: the device is one more axis of the sweep, the same loss on both
CDDP_DEVICE_EMULATE=1 timeout 120 "$CDDP" bench train --sweep --config configs/fmnist_mlp.yaml --device cpu,cuda \
  --nproc 1 --steps 4 --set model.hidden=[64] --out "$T/sweep" >"$T/sweep.out" 2>&1; rc=$?
rows=$(grep -c '^s0[01]	1 \[64\] \(cpu\|cuda\)	' "$T/sweep/sweep.tsv" 2>/dev/null)
[ $rc = 0 ] && [ "$rows" = 2 ] && [ "$(grep -v '^#' "$T/sweep/sweep.tsv" | cut -f7 | sort -u | wc -l)" = 1 ] &&
  ok "cddp bench train --device cpu,cuda: a row each, the same end loss" || fail "bench train --device" "rc $rc, $rows rows: $(tail -3 "$T/sweep.out")"

# cddp bench allreduce --device cuda: 2 ranks' data in (emulated) device memory, staged through
# pinned host memory around each all-reduce, every element checked; with no device, one line
CDDP_DEVICE_EMULATE=1 timeout 60 "$CDDP" run --nproc-per-node 2 "$CDDP" bench allreduce --device cuda \
  -b 64K -e 1M -f 4 -n 3 >"$T/bar.out" 2>&1; rc=$?
[ $rc = 0 ] && grep -q 'GPU memory, staged through pinned host memory' "$T/bar.out" &&
  [ "$(grep -c '^\[rank 0\] .* float  *sum .* 0$' "$T/bar.out")" = 3 ] && grep -q 'Out of bounds values : 0 OK' "$T/bar.out" &&
  ok "bench allreduce --device cuda, 2 ranks on the emulated device: 3 sizes, 0 wrong elements" ||
  fail "bench allreduce --device cuda" "rc $rc: $(tail -3 "$T/bar.out")"
if [ -z "$(command -v nvidia-smi)" ]; then
  CDDP_DEVICE_EMULATE=0 "$CDDP" bench allreduce --device cuda >"$T/barn.out" 2>&1; rc=$?
  [ $rc = 2 ] && [ "$(wc -l <"$T/barn.out")" = 1 ] && grep -q '^cddp bench: --device cuda: .*(use --device cpu)$' "$T/barn.out" &&
    ok "bench allreduce --device cuda with no GPU: exit 2, one line: $(cut -c1-90 "$T/barn.out")" ||
    fail "bench --device cuda refusal" "rc $rc: $(head -3 "$T/barn.out")"
else # a GPU here: it must run on it instead
  CDDP_DEVICE_EMULATE=0 "$CDDP" bench allreduce --device cuda -b 1M -n 3 >"$T/barn.out" 2>&1; rc=$?
  [ $rc = 0 ] && grep -q 'Out of bounds values : 0 OK' "$T/barn.out" &&
    ok "bench allreduce --device cuda on this machine's GPU: 0 wrong elements" ||
    fail "bench --device cuda on the GPU" "rc $rc: $(tail -3 "$T/barn.out")"
fi

# 5. what does not run on the device yet is refused in one line naming the key, exit 2
CDDP_DEVICE_EMULATE=1 "$CDDP" train --work-dir "$T" --name cnn --config configs/fmnist_cnn.yaml --set train.device=cuda >"$T/cnn.out" 2>&1; rc=$?
[ $rc = 2 ] && [ "$(wc -l <"$T/cnn.out")" = 1 ] && grep -q 'model.type' "$T/cnn.out" &&
  ok "the CNN on the device: exit 2, one line: $(cut -c1-100 "$T/cnn.out")" || fail "CNN refusal" "$(why $rc cnn)"
CDDP_DEVICE_EMULATE=1 "$CDDP" train --work-dir "$T" --name z1 "${MLP[@]}" --set train.device=cuda --set ddp.shard_optimizer=true >"$T/z1.out" 2>&1; rc=$?
[ $rc = 2 ] && grep -q 'ddp.shard_optimizer' "$T/z1.out" &&
  ok "ZeRO-1 on the device: exit 2 naming ddp.shard_optimizer" || fail "ZeRO-1 refusal" "$(why $rc z1)"
# ddp.backend nccl where NCCL cannot take the gradients: the emulated device, the CPU trainer
CDDP_DEVICE_EMULATE=1 "$CDDP" train --work-dir "$T" --name nccl_emu "${MLP[@]}" --set train.device=cuda --set ddp.backend=nccl >"$T/nccl_emu.out" 2>&1; rc=$?
[ $rc = 2 ] && [ "$(wc -l <"$T/nccl_emu.out")" = 1 ] &&
  grep -q '^cddp train: ddp.backend nccl: rank 0 cannot all-reduce its gradients with NCCL: the emulated device has no NCCL (use ddp.backend auto or native)$' "$T/nccl_emu.out" &&
  ok "ddp.backend nccl on the emulated device: exit 2, one line naming the rank and why" || fail "nccl refusal, emulated" "$(why $rc nccl_emu)"
"$CDDP" train --work-dir "$T" --name nccl_cpu "${MLP[@]}" --set train.device=cpu --set ddp.backend=nccl >"$T/nccl_cpu.out" 2>&1; rc=$?
[ $rc = 2 ] && [ "$(wc -l <"$T/nccl_cpu.out")" = 1 ] && grep -q 'ddp.backend nccl all-reduces GPU buffers, but the model trains on the CPU here (train.device)' "$T/nccl_cpu.out" &&
  ok "ddp.backend nccl with train.device cpu: exit 2, one line" || fail "nccl refusal, cpu" "$(why $rc nccl_cpu)"
finish
