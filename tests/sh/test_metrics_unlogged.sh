#!/usr/bin/env bash
# test_metrics_unlogged.sh - rank 0 killed between a step's commit and its metrics line
# (debug.die_unlogged): under `cddp run --restart-mode replace` rank 1 holds the step, rank 0's
# replacement takes metrics.jsonl over and must log that step from the survivor's record, so the
# file has every step once, in order (no hole the resume's check then refuses), and
# --resume-from latest goes on from it. Once at a plain step and once at a checkpoint's step.
# test_chaos run 13 (kills r0@5-in-ckpt r0@15+9ms r1@22+49ms) met this by chance.
cd "$(dirname "$0")/../.." && source tests/sh/lib.sh
T=$(mktemp -d /tmp/cddp-unlogged-test.XXXXXX)
trap 'rm -rf "$T"' EXIT
STEPS=10
JOB=(--config configs/fmnist_mlp.yaml --set debug.sample_log=true --set train.max_steps=$STEPS --set ddp.threads=1
     --set checkpoint.every_steps=3 --set eval.every_epoch=false)
steps_of() { grep -v '"eval"' "$1" 2>/dev/null | sed -n 's/.*"step":\([0-9]*\).*/\1/p' | tr '\n' ' '; }

for at in 5 6; do
  name=u$at
  timeout 120 "$CDDP" run --standalone --nproc-per-node 2 --max-restarts 2 --restart-mode replace \
    "$CDDP" train "${JOB[@]}" --set debug.die_unlogged=$at --work-dir "$T" --name $name >"$T/$name.out" 2>&1
  r=$?
  [ $r = 0 ] && grep -q 'cddp train: recovered from the loss of .*rank 0 is the replacement' "$T/$name.out" &&
    ok "$name: rank 0 killed after committing step $at, before logging it: replaced, exit 0" ||
    fail "$name: run" "exit $r: $(grep -v '^\[rank' "$T/$name.out" | grep -v epoch | tail -2 | tr '\n' ' ')"
  got=$(steps_of "$T/$name/metrics.jsonl") want=$(seq -s ' ' 1 $STEPS)
  [ "$got" = "$want " ] && ok "$name: metrics.jsonl has steps 1-$STEPS once each, step $at from the survivor" ||
    fail "$name: metrics.jsonl steps" "got '$got', want '$want '"
  [ "$(samples_verdict "$T/$name" $STEPS 256)" = clean ] && ok "$name: every sample trained once" ||
    fail "$name: samples" "$(samples_verdict "$T/$name" $STEPS 256)"
  timeout 60 "$CDDP" train "${JOB[@]}" --work-dir "$T" --name $name --set train.max_steps=$((STEPS + 2)) \
    --resume-from latest >"$T/$name.resume" 2>&1
  r=$?
  [ $r = 0 ] && grep -q "done: 2 steps (steps $((STEPS + 1))-$((STEPS + 2)) of $((STEPS + 2)))" "$T/$name.resume" &&
    ok "$name: --resume-from latest accepts the metrics and trains steps $((STEPS + 1))-$((STEPS + 2))" ||
    fail "$name: resume" "exit $r: $(grep -v epoch "$T/$name.resume" | tail -1)"
done
finish
