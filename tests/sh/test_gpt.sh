#!/usr/bin/env bash
# test_gpt.sh - `cddp train` of the byte-level GPT on the King James Bible (a small model, a
# short run, 2 ranks; also with PowerSGD, and with model.recompute block), its evaluation, and
# `cddp sample` from the checkpoint it leaves.
cd "$(dirname "$0")/../.." && source tests/sh/lib.sh
T=$(mktemp -d /tmp/cddp-gpt.XXXXXX)
trap 'rm -rf "$T"' EXIT
CFG=configs/gpt_kjv.yaml
SMALL=(--set model.n_layer=2 --set model.d_model=64 --set model.n_head=2 --set model.context=64
       --set train.max_steps=80 --set schedule.warmup_steps=10 --set checkpoint.every_steps=40)
field() { grep -v '"eval"' "$2" | sed -n "s/.*\"$1\":\([^,}]*\).*/\1/p"; }

timeout 300 "$CDDP" run --standalone --nproc-per-node 2 "$CDDP" train --config "$CFG" --work-dir "$T" --name g "${SMALL[@]}" >"$T/g.out" 2>&1; rc=$?
first=$(field loss "$T/g/metrics.jsonl" | head -1); last=$(field loss "$T/g/metrics.jsonl" | tail -5 | sort -n | tail -1)
evl=$(grep '"eval"' "$T/g/metrics.jsonl" | sed -n 's/.*"loss":\([0-9.]*\).*/\1/p')
if [ $rc = 0 ] && awk -v a="$first" -v b="$last" -v e="$evl" 'BEGIN { exit !(a > 5 && b < 0.6 * a && e > 0 && e < 0.7 * a) }' &&
   grep -q "GPT, [0-9]* parameters; world 2" "$T/g.out" && grep -q "tokens/s" "$T/g.out"
then ok "GPT on the KJV, 2 ranks: loss $first -> $last nats/byte, validation $evl"
else fail "gpt train" "rc=$rc loss $first -> $last eval $evl: $(tail -3 "$T/g.out" | tr '\n' ' ')"; fi
"$CDDP" ckpt info "$T/g/checkpoints" 2>/dev/null | grep -q "h.1.attn.c_attn.weight" && ok "checkpoint holds the GPT's tensors by name" || fail "gpt checkpoint names"

# PowerSGD at rank 8 on the same GPT: it trains, and sends P (rows x 8) and Q (cols x 8) of each
# weight matrix and every 1-D tensor raw: V = 256 bytes, T = 64 positions, C = 64, L = 2 blocks
timeout 300 "$CDDP" run --standalone --nproc-per-node 2 "$CDDP" train --config "$CFG" --work-dir "$T" --name ps "${SMALL[@]}" \
  --set ddp.compress=powersgd --set ddp.powersgd_rank=8 >"$T/ps.out" 2>&1; rc=$?
want=$(awk 'BEGIN { V = 256; T = 64; C = 64; L = 2; r = 8
  full = V * C + T * C + L * (12 * C * C + 13 * C) + 2 * C             # wte, wpe, blocks, ln_f
  sent = r * (V + C) + r * (T + C) + L * (r * (4 * C + 2 * C + 5 * C + 5 * C) + 13 * C) + 2 * C
  printf "%.2f", full / sent }')
cp=$(field compression "$T/ps/metrics.jsonl" | tail -1)
pf=$(field loss "$T/ps/metrics.jsonl" | head -1); pl=$(field loss "$T/ps/metrics.jsonl" | tail -5 | sort -n | tail -1)
pe=$(grep '"eval"' "$T/ps/metrics.jsonl" | sed -n 's/.*"loss":\([0-9.]*\).*/\1/p')
if [ $rc = 0 ] && [ "$cp" = "$want" ] && awk -v a="$pf" -v b="$pl" -v e="$pe" -v f="$evl" 'BEGIN { exit !(b < 0.6 * a && e < 1.1 * f) }'
then ok "GPT with ddp.compress powersgd: compression $cp (expected $want), loss $pf -> $pl, validation $pe (float32: $evl)"
else fail "gpt powersgd" "rc=$rc compression $cp (expected $want) loss $pf -> $pl eval $pe vs $evl: $(tail -2 "$T/ps.out" | tr '\n' ' ')"; fi

# model.recompute block over the same 80 steps: every step's loss and the validation the same bits
timeout 300 "$CDDP" run --standalone --nproc-per-node 2 "$CDDP" train --config "$CFG" --work-dir "$T" --name rb "${SMALL[@]}" \
  --set model.recompute=block >"$T/rb.out" 2>&1; rc=$?
if [ $rc = 0 ] && [ "$(field loss "$T/rb/metrics.jsonl" | wc -l)" = 80 ] &&
   [ "$(field loss "$T/rb/metrics.jsonl")" = "$(field loss "$T/g/metrics.jsonl")" ] &&
   [ "$(grep '"eval"' "$T/rb/metrics.jsonl" | sed -n 's/.*"loss":\([0-9.]*\).*/\1/p')" = "$evl" ]
then ok "model.recompute block: the 80 losses and the validation loss are none's, bit for bit"
else fail "gpt recompute block" "rc=$rc: $(field loss "$T/rb/metrics.jsonl" | tail -1) vs $last; $(tail -2 "$T/rb.out" | tr '\n' ' ')"; fi

s1=$("$CDDP" sample --ckpt "$T/g" --prompt "And God said" -n 120 --seed 7 2>&1); rc=$?
s2=$("$CDDP" sample --ckpt "$T/g/checkpoints" --prompt "And God said" -n 120 --seed 7 2>&1)
s3=$("$CDDP" sample --ckpt "$T/g" --prompt "And God said" -n 120 --seed 8 2>&1)
if [ $rc = 0 ] && [ "${s1:0:12}" = "And God said" ] && [ "${#s1}" -ge 130 ] && [ "$s1" = "$s2" ] && [ "$s1" != "$s3" ]
then ok "cddp sample: continues the prompt, same seed same text, other seed other text"
else fail "sample" "rc=$rc: $s1"; fi

bad() { # NAME WANT-REGEX CODE CMD...
  local name=$1 want=$2 code=$3; shift 3
  local o r; o=$("$@" 2>&1); r=$?
  if [ $r = "$code" ] && grep -Eq -e "$want" <<<"$o" && [ "$(grep -c . <<<"$o")" = 1 ]; then ok "bad input: $name"
  else fail "bad input: $name" "rc=$r: $o"; fi
}
bad "sample without --ckpt" "--ckpt PATH is required" 2 "$CDDP" sample
bad "sample from nothing" "no complete checkpoint at $T/nope" 1 "$CDDP" sample --ckpt "$T/nope"
bad "sample --temperature 0" "--temperature 0: expected a number > 0" 2 "$CDDP" sample --ckpt "$T/g" --temperature 0
bad "gpt on images" "model.type: gpt needs data.name kjv" 2 "$CDDP" train --config "$CFG" --set data.name=fashion-mnist
bad "heads must divide the width" "model.n_head=3: 3 does not divide model.d_model" 2 "$CDDP" train --config "$CFG" --set model.n_head=3
finish
