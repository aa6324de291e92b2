#!/usr/bin/env bash
# test_precision.sh - train.precision: bf16 trains the MLP and a small GPT as fp32 does (the
# loss falls, the validation loss within 2% of fp32's after the same steps) on the fastest path
# this CPU has; the SSE2 path gives the losses of the other FMA paths to the bit; and a path
# CDDP_CPU_BF16 names that the CPU lacks, or no path, is refused with one line, exit 2.
cd "$(dirname "$0")/../.." && source tests/sh/lib.sh
T=$(mktemp -d /tmp/cddp-precision.XXXXXX)
trap 'rm -rf "$T"' EXIT
field() { grep -v '"eval"' "$2" | sed -n "s/.*\"$1\":\([^,}]*\).*/\1/p"; }
evl() { grep '"eval"' "$1" | tail -1 | sed -n 's/.*"loss":\([0-9.]*\).*/\1/p'; }
MLP=(--config configs/fmnist_mlp.yaml --set model.hidden=[256] --set train.max_steps=60
     --set checkpoint.every_steps=0 --set eval.every_epoch=false --set ddp.threads=1)
GPT=(--config configs/gpt_kjv.yaml --set model.n_layer=2 --set model.d_model=64 --set model.n_head=2
     --set model.context=64 --set train.max_steps=40 --set schedule.warmup_steps=10
     --set checkpoint.every_steps=0 --set eval.every_epoch=false --set ddp.threads=1)

# train NAME PRECISION ARGS...: one rank; then prints "first last eval" losses (losses NAME), or
# the failure
train() {
  local name=$1 p=$2; shift 2
  timeout 300 "$CDDP" train --work-dir "$T" --name "$name" --set train.precision="$p" "$@" >"$T/$name.out" 2>&1 ||
    { echo "rc=$? $(tail -2 "$T/$name.out" | tr '\n' ' ')"; return; }
  losses "$name"
}
losses() { echo "$(field loss "$T/$1/metrics.jsonl" | head -1) $(field loss "$T/$1/metrics.jsonl" | tail -1) $(evl "$T/$1/metrics.jsonl")"; }
# compare MODEL ARGS...: fp32 then bf16, same steps
compare() {
  local model=$1; shift
  local f b
  f=$(train "$model-fp32" fp32 "$@") b=$(train "$model-bf16" bf16 "$@")
  # bf16: first > 1.5 x last, and its validation loss within 2% of fp32's
  if echo "$f $b" | awk 'NF == 6 { exit !($4 > 1.5 * $5 && $6 > 0 && ($6 - $3) / $3 < 0.02 && ($3 - $6) / $3 < 0.02) } { exit 1 }'
  then ok "$model bf16 trains as fp32: loss $(echo "$b" | awk '{ print $1 " -> " $2 ", validation " $3 }') (fp32: validation $(echo "$f" | awk '{ print $3 }'))"
  else fail "$model bf16 against fp32" "fp32: $f; bf16: $b"; fi
}

compare MLP "${MLP[@]}"
compare GPT "${GPT[@]}"
# the bf16 products round their inputs: the losses differ from fp32's, or the switch did nothing
[ "$(field loss "$T/MLP-fp32/metrics.jsonl" | tail -1)" != "$(field loss "$T/MLP-bf16/metrics.jsonl" | tail -1)" ] &&
  ok "bf16 computes differently from fp32 (its products round their inputs)" || fail "bf16 changed nothing"
# the bf16 products of 2^24 multiply-adds or more are split over ddp.threads, with the bits
# of one thread: 2 threads train the MLP to the very losses of the run above
thr=$(train MLP-bf16-2t bf16 "${MLP[@]}" --set ddp.threads=2)
b1=$(losses MLP-bf16)
[ -n "$thr" ] && [ "$thr" = "$b1" ] && ! grep -qi "warning" "$T/MLP-bf16-2t.out" &&
  ok "bf16 on 2 threads: the losses of 1 thread, to the bit ($thr)" ||
  fail "bf16 threads" "2 threads: $thr; 1 thread: $b1; $(grep -i warn "$T/MLP-bf16-2t.out")"
# every FMA path keeps one contract: SSE2 (which every x86-64 has) trains to the bits of the
# widest FMA path here (auto's, unless auto is VDPBF16PS, which may differ below 2^-126)
fma=$(grep -qw avx512_bf16 /proc/cpuinfo && echo "$(grep -qw avx2 /proc/cpuinfo && echo avx2 || echo sse2)")
[ -n "$fma" ] && wide=$(CDDP_CPU_BF16=$fma train MLP-bf16-$fma bf16 "${MLP[@]}") || wide=$b1
sse=$(CDDP_CPU_BF16=sse2 train MLP-bf16-sse2 bf16 "${MLP[@]}")
[ -n "$sse" ] && [ "$sse" = "$wide" ] && ok "bf16 on the SSE2 path: the losses of the ${fma:-auto} path, to the bit ($sse)" ||
  fail "bf16 paths" "sse2: $sse; ${fma:-auto}: $wide"
# refusals: no path at all; a path this CPU lacks (on a CPU with every path: it trains)
refused() { # NAME PATH: exit 2, one line naming CDDP_CPU_BF16=PATH, before any metrics
  out=$(CDDP_CPU_BF16=$2 "$CDDP" train --work-dir "$T" --name "$1" "${MLP[@]}" --set train.precision=bf16 2>&1); rc=$?
  [ $rc = 2 ] && [ "$(echo "$out" | wc -l)" = 1 ] && echo "$out" | grep -q "^cddp train: .*CDDP_CPU_BF16=$2" &&
    [ ! -e "$T/$1/metrics.jsonl" ] || { echo "rc=$rc: $out"; return 1; }
}
why=$(refused none avx9) && ok "CDDP_CPU_BF16=avx9 (no such path) is refused in one line, exit 2" || fail "unknown path" "$why"
lack=
for f in avx512_bf16:avx512_bf16 avx512:avx512f avx2:avx2; do
  grep -qw "${f#*:}" /proc/cpuinfo || { lack=${f%%:*}; break; }
done
if [ -n "$lack" ]; then
  why=$(refused lacks "$lack") && ok "CDDP_CPU_BF16=$lack, which this CPU lacks, is refused in one line, exit 2" ||
    fail "a lacking path" "$why"
else
  timeout 120 env CDDP_CPU_BF16=avx512_bf16 "$CDDP" train --work-dir "$T" --name all "${MLP[@]}" --set train.precision=bf16 \
    --set train.max_steps=2 >/dev/null 2>&1 && ok "this CPU lacks no path: CDDP_CPU_BF16=avx512_bf16 trains" ||
    fail "CDDP_CPU_BF16=avx512_bf16 on a CPU with it"
fi
CDDP_CPU_BF16=avx9 timeout 120 "$CDDP" train --work-dir "$T" --name no32 "${MLP[@]}" --set train.max_steps=2 >/dev/null 2>&1 &&
  ok "fp32 does not read CDDP_CPU_BF16" || fail "fp32 with CDDP_CPU_BF16=avx9"
# fp16 (loss scaling) is a device's: the CPU trainer refuses it before joining, one line
out=$("$CDDP" train --work-dir "$T" --name f16 "${MLP[@]}" --set train.device=cpu --set train.precision=fp16 2>&1); rc=$?
[ $rc = 2 ] && [ "$(echo "$out" | wc -l)" = 1 ] && [ ! -e "$T/f16" ] &&
  echo "$out" | grep -q '^cddp train: train.precision fp16 runs on a device only (train.device cuda)' &&
  ok "train.precision fp16 on the CPU: exit 2, one line: $(echo "$out" | cut -c1-80)" || fail "fp16 on the CPU" "rc $rc: $out"
finish
