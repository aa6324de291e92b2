#!/usr/bin/env bash
# test_ckpt_fail.sh - rank 0 cannot write a checkpoint (its folder is a file here; a full disk or
# a lost mount alike): every rank stops at that step with rank 0's reason. Rank 1 used to run
# into its next collective, find rank 0 gone and report a desync. Under --restart-mode replace
# the failure is not mistaken for a lost peer (no in-place recovery): the agent replaces the two
# workers that exited, and their replacements stop the same way until the restarts run out.
cd "$(dirname "$0")/../.." && source tests/sh/lib.sh
T=$(mktemp -d /tmp/cddp-ckpt-fail.XXXXXX)
trap 'rm -rf "$T"' EXIT
for mode in all replace; do
  mkdir -p "$T/$mode"; : >"$T/$mode/checkpoints" # the checkpoint root: a file, so no step-N folder can be made
  timeout 60 "$CDDP" run --standalone --nproc-per-node 2 --max-restarts 2 --restart-mode $mode "$CDDP" train \
    --config configs/fmnist_mlp.yaml --work-dir "$T" --name $mode --set train.max_steps=20 --set checkpoint.every_steps=5 \
    --set eval.every_epoch=false --set ddp.threads=1 >"$T/$mode.out" 2>&1; rc=$?
  why="checkpoint root $T/$mode/checkpoints is not a directory"
  if [ $rc = 1 ] && grep -q "^\[rank 0\] cddp train: rank 0: checkpoint at step 5: $why$" "$T/$mode.out" &&
     grep -q "^\[rank 1\] cddp train: rank 1: checkpoint at step 5: rank 0 could not save the checkpoint of step 5: $why$" "$T/$mode.out" &&
     ! grep -qiE 'desync|recovered|recovery' "$T/$mode.out"; then
    ok "--restart-mode $mode: both ranks stop at step 5 with rank 0's reason (exit 1), no desync, no in-place recovery"
  else fail "--restart-mode $mode" "rc=$rc: $(grep -v 'epoch [0-9]' "$T/$mode.out" | tail -4 | tr '\n' ' ')"; fi
done
finish
