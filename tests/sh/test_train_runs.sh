#!/usr/bin/env bash
# test_train_runs.sh - a resume cuts metrics.jsonl back to its checkpoint; the `done:` line
# counts this process's own steps and time; epochs are numbered from 1 alike on the console and
# in metrics.jsonl.
cd "$(dirname "$0")/../.." && source tests/sh/lib.sh
T=$(mktemp -d /tmp/cddp-runs-test.XXXXXX)
trap 'rm -rf "$T"' EXIT
CFG=configs/fmnist_mlp.yaml
SMALL=(--set model.hidden=[32] --set ddp.threads=1)
run1() { timeout 120 "$CDDP" train --config "$CFG" --work-dir "$T" "$@"; }
# steps FILE: the step numbers of a metrics.jsonl's step lines, one per line
steps() { grep -v '"eval"' "$1" | sed -n 's/.*"step":\([0-9]*\).*/\1/p'; }

run1 --name a "${SMALL[@]}" --set train.max_steps=30 --set checkpoint.every_steps=10 >"$T/a.out" 2>&1 ||
  fail "first run" "$(tail -2 "$T/a.out")"

# 1. resumed from its step-20 checkpoint, run a trains steps 21-30 again: metrics.jsonl has each
# step once (cut back to step 20 before the resume appends), and its eval lines too
out=$(run1 --name a "${SMALL[@]}" --set train.max_steps=30 --set checkpoint.every_steps=10 \
  --resume-from "$T/a/checkpoints/step-000000020" 2>&1); rc=$?
n=$(steps "$T/a/metrics.jsonl" | wc -l); u=$(steps "$T/a/metrics.jsonl" | sort -u | wc -l)
if [ $rc = 0 ] && [ "$n" = 30 ] && [ "$u" = 30 ] && [ "$(steps "$T/a/metrics.jsonl" | tr '\n' ' ')" = "$(seq -s ' ' 1 30) " ] &&
   [ "$(grep -c '"eval":true' "$T/a/metrics.jsonl")" = 1 ]
then ok "resumed at step 20 of a 30-step run: metrics.jsonl holds steps 1..30 once each, one eval line"
else fail "metrics cut back on resume" "rc=$rc $n lines, $u distinct: $(tail -2 <<<"$out" | tr '\n' ' ')"; fi

# 2. the done line: this process's steps, its wall time, and samples/s over its training steps
# (rate x training time = the samples it trained); a resumed run counts only its own steps
run1 --name d --set ddp.threads=1 --set train.max_steps=20 --set eval.every_epoch=false >"$T/d1.out" 2>&1
run1 --name d --set ddp.threads=1 --set train.max_steps=40 --set eval.every_epoch=false --resume-from latest >"$T/d2.out" 2>&1; rc=$?
# done_ok FILE STEPS SPAN: the done line says STEPS steps (SPAN: its parenthesis, or empty), and adds up
done_ok() {
  local line w s r
  line=$(grep '^cddp train: done: ' "$1")
  read -r w s r < <(sed -n 's/.* in \([0-9.]*\) s, \([0-9.]*\) s of it in training steps at \([0-9]*\) samples\/s;.*/\1 \2 \3/p' <<<"$line")
  [[ "$line" == "cddp train: done: $2 steps$3 in "* ]] && [ -n "$r" ] &&
    awk -v w="$w" -v s="$s" -v r="$r" -v n=$(($2 * 256)) 'BEGIN { d = r * s / n - 1; exit !(s > 0 && w >= s && d < 0.05 && d > -0.05) }'
}
if done_ok "$T/d1.out" 20 "" && [ $rc = 0 ] && done_ok "$T/d2.out" 20 " (steps 21-40 of 40)"; then
  ok "done line: $(grep -ho 'done: [^;]*' "$T/d2.out") (rate x training time = 20 x 256 samples)"
else fail "done line" "rc=$rc $(grep -h 'done:' "$T"/d?.out | tr '\n' ' ')"; fi

# 3. epochs: 240 steps at 234 an epoch reach into 2 (not train.epochs' 3); the progress line's epoch
# for a step is metrics.jsonl's, numbered from 1; an eval after the last step (mid-epoch) says so
run1 --name e "${SMALL[@]}" --set train.max_steps=240 --set log.every_steps=6 >"$T/e.out" 2>&1; rc=$?
bad=$(grep -o 'epoch [0-9]*/[0-9]*  step [0-9]*' "$T/e.out" | while read -r _ es _ s; do
  m=$(grep "^{\"step\":$s," "$T/e/metrics.jsonl" | sed -n 's/.*"epoch":\([0-9]*\).*/\1/p')
  [ "${es%/*}" = "$m" ] && [ "${es#*/}" = 2 ] || echo "step $s: console $es, metrics $m"; done)
if [ $rc = 0 ] && [ -z "$bad" ] && grep -q "epoch 2/2  step 240/240" "$T/e.out" &&
   grep -q '^{"step":1,"epoch":1,' "$T/e/metrics.jsonl" && grep -q '^{"step":235,"epoch":2,' "$T/e/metrics.jsonl" &&
   grep -q '"eval":true,"epoch":1,"step":234,' "$T/e/metrics.jsonl" && grep -q "^eval after epoch 1 (step 234)" "$T/e.out" &&
   grep -q "^eval after step 240 (in epoch 2)" "$T/e.out"
then ok "epochs from 1 alike on the console and in metrics.jsonl; max_steps 240: epoch 2/2; the last eval is 'after step 240 (in epoch 2)'"
else fail "epoch labels" "rc=$rc $bad $(grep -m3 'epoch' "$T/e.out" | tr '\n' ' ')"; fi

finish
