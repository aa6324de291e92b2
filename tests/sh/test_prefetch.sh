#!/usr/bin/env bash
# test_prefetch.sh - data.prefetch: with the next micro-batch gathered by the background thread,
# training is the same bits as without it (every step's loss, the samples each rank consumed,
# the validation loss), over accumulation micro-steps, an epoch's end and 2 ranks; and the
# thread did gather some of them.
cd "$(dirname "$0")/../.." && source tests/sh/lib.sh
T=$(mktemp -d /tmp/cddp-prefetch.XXXXXX)
trap 'rm -rf "$T"' EXIT
losses() { grep -v '"eval"' "$1" | sed -n 's/.*"loss":\([^,}]*\).*/\1/p'; }
evl() { grep '"eval"' "$1" | sed -n 's/.*"loss":\([0-9.]*\).*/\1/p'; }

# 1 rank, global 256 = 2 micro-steps of 128; 240 steps cross the epoch's end (234 a epoch)
MLP=(--config configs/fmnist_mlp.yaml --set model.hidden=[64] --set train.max_steps=240
     --set checkpoint.every_steps=0 --set eval.every_epoch=false --set debug.sample_log=true)
for p in false true; do
  CDDP_DEBUG=INFO timeout 300 "$CDDP" train --work-dir "$T" --name mlp-$p "${MLP[@]}" --set data.prefetch=$p >"$T/mlp-$p.out" 2>&1 ||
    fail "mlp data.prefetch=$p" "$(tail -2 "$T/mlp-$p.out" | tr '\n' ' ')"
done
hits=$(sed -n 's/.*data.prefetch: \([0-9]*\) of \([0-9]*\) micro-batches.*/\1 \2/p' "$T/mlp-true.out")
if [ "$(losses "$T/mlp-true/metrics.jsonl" | wc -l)" = 240 ] &&
   [ "$(losses "$T/mlp-true/metrics.jsonl")" = "$(losses "$T/mlp-false/metrics.jsonl")" ] &&
   cmp -s "$T/mlp-true/samples/rank0.txt" "$T/mlp-false/samples/rank0.txt" &&
   [ -n "$(evl "$T/mlp-true/metrics.jsonl")" ] && [ "$(evl "$T/mlp-true/metrics.jsonl")" = "$(evl "$T/mlp-false/metrics.jsonl")" ]
then ok "MLP, 2 micro-steps a step, across an epoch: the same losses, samples and validation with prefetch"
else fail "MLP with prefetch differs" "$(losses "$T/mlp-true/metrics.jsonl" | tail -1) vs $(losses "$T/mlp-false/metrics.jsonl" | tail -1)"; fi
# 240 steps x 2 = 480 micro-batches asked for; the one after the epoch's end is not prefetched
echo "$hits" | awk 'NF == 2 && $2 == 480 && $1 > 0 && $1 < $2 { ok = 1 } END { exit !ok }' &&
  ok "the thread gathered $(echo "$hits" | awk '{ print $1 " of " $2 }') micro-batches ahead" ||
  fail "prefetch hits" "'$hits' (want N of 480, 0 < N < 480): $(grep -i prefetch "$T/mlp-true.out" | head -2)"
! grep -q "data.prefetch" "$T/mlp-false.out" && ok "no thread without data.prefetch" || fail "prefetch off still reports"

GPT=(--config configs/gpt_kjv.yaml --set model.n_layer=1 --set model.d_model=32 --set model.n_head=2
     --set model.context=32 --set train.max_steps=30 --set schedule.warmup_steps=5
     --set checkpoint.every_steps=0 --set eval.every_epoch=false)
for p in false true; do
  timeout 300 "$CDDP" run --standalone --nproc-per-node 2 "$CDDP" train --work-dir "$T" --name gpt-$p "${GPT[@]}" \
    --set data.prefetch=$p >"$T/gpt-$p.out" 2>&1 || fail "gpt data.prefetch=$p" "$(tail -2 "$T/gpt-$p.out" | tr '\n' ' ')"
done
if [ "$(losses "$T/gpt-true/metrics.jsonl" | wc -l)" = 30 ] &&
   [ "$(losses "$T/gpt-true/metrics.jsonl")" = "$(losses "$T/gpt-false/metrics.jsonl")" ] &&
   [ "$(evl "$T/gpt-true/metrics.jsonl")" = "$(evl "$T/gpt-false/metrics.jsonl")" ]
then ok "GPT, 2 ranks: the same losses and validation with prefetch"
else fail "GPT with prefetch differs"; fi
finish
