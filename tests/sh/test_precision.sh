#!/usr/bin/env bash
# test_precision.sh - train.precision: bf16 trains the MLP and a small GPT as fp32 does (the
# loss falls, the validation loss within 2% of fp32's after the same steps), and a CPU without
# AVX512-BF16 (CDDP_CPU_BF16=0 pretends) is refused with one line naming the key, exit 2.
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

if grep -qw avx512_bf16 /proc/cpuinfo; then
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
else
  for c in "MLP bf16 trains as fp32" "GPT bf16 trains as fp32" "bf16 computes differently from fp32" \
           "bf16 on 2 threads: the losses of 1 thread"; do
    ok "$c # SKIP [cpu:avx512_bf16] the bf16 product needs it; its refusal is tested instead"
  done
  out=$("$CDDP" train --work-dir "$T" --name nat "${MLP[@]}" --set train.precision=bf16 2>&1); rc=$?
  [ $rc = 2 ] && echo "$out" | grep -q "train.precision" && ok "refused on this CPU, which lacks AVX512-BF16" ||
    fail "refusal on this CPU" "rc=$rc: $out"
fi
out=$(CDDP_CPU_BF16=0 "$CDDP" train --work-dir "$T" --name no "${MLP[@]}" --set train.precision=bf16 2>&1); rc=$?
if [ $rc = 2 ] && [ "$(echo "$out" | wc -l)" = 1 ] && echo "$out" | grep -q "^cddp train: train.precision: bf16 needs a CPU with AVX512-BF16" &&
   [ ! -e "$T/no/metrics.jsonl" ]
then ok "a CPU without AVX512-BF16 is refused in one line naming train.precision, exit 2"
else fail "refusal" "rc=$rc: $out"; fi
CDDP_CPU_BF16=0 timeout 120 "$CDDP" train --work-dir "$T" --name no32 "${MLP[@]}" --set train.max_steps=2 >/dev/null 2>&1 &&
  ok "fp32 is not refused there" || fail "fp32 with CDDP_CPU_BF16=0"
finish
