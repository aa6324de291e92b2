#!/usr/bin/env bash
# test_run_faults.sh - how `cddp run` answers faults (issue 16): the blame line names the rank whose
# failure came first, not the first one reaped. Every command is bounded by timeout.
cd "$(dirname "$0")/../.." && source tests/sh/lib.sh
T=$(mktemp -d /tmp/cddp-faults-test.XXXXXX)
bg=()
cleanup() { for p in "${bg[@]}"; do kill -KILL "$p" 2>/dev/null; done; wait 2>/dev/null; rm -rf "$T"; }
trap cleanup EXIT
HOST=$(hostname)
CFG=configs/fmnist_mlp.yaml

# (blame) rank 0 reports its error and takes 0.6 s to exit (it ignores the agent's SIGTERM); rank 1
# fails 0.1 s later because of it and exits at once, so the agent reaps rank 1 first
timeout 20 "$CDDP" run --nproc-per-node 2 sh -c 'if [ $RANK = 0 ]; then echo "checkpoint /x is corrupt" >&2; trap "" TERM
  sleep 0.6; exit 2; else sleep 0.1; echo "rank 0 could not load the checkpoint" >&2; exit 2; fi' >/dev/null 2>"$T/b.err"
rc=$?
last=$(tail -1 "$T/b.err")
if [ $rc = 2 ] && echo "$last" | grep -q "^cddp run: rank 0 (host $HOST, pid [0-9]*) exited with code 2$"; then
  ok "blame: rank 0 failed first (reaped last): named, exit 2"
else fail "blame: rank 0 failed first" "rc=$rc last='$last'"; fi

# (blame, real) rank 0 finds an explicit --resume-from PATH corrupt and exits 2; rank 1 learns it
# from rank 0 and exits 2 too
timeout 60 "$CDDP" run --standalone --nproc-per-node 2 "$CDDP" train --config $CFG --work-dir "$T" --name src \
  --set train.max_steps=10 --set checkpoint.every_steps=10 >"$T/src.out" 2>&1
ck=$T/src/checkpoints/step-000000010
if [ -f "$ck/model.safetensors" ]; then
  printf 'x' | dd of="$ck/model.safetensors" bs=1 seek=100 conv=notrunc 2>/dev/null
  timeout 60 "$CDDP" run --standalone --nproc-per-node 2 "$CDDP" train --config $CFG --work-dir "$T" --name bad \
    --resume-from "$ck" --set train.max_steps=20 >"$T/bad.out" 2>&1
  rc=$?
  last=$(tail -1 "$T/bad.out")
  if [ $rc = 2 ] && grep -q "^\[rank 0\] cddp train: checkpoint .* is corrupt" "$T/bad.out" &&
     echo "$last" | grep -q "^cddp run: rank 0 (host $HOST, pid [0-9]*) exited with code 2$"; then
    ok "blame: a corrupt --resume-from PATH: rank 0 named, exit 2"
  else fail "blame: corrupt --resume-from" "rc=$rc $(tail -3 "$T/bad.out" | tr '\n' ' ')"; fi
else fail "blame: no checkpoint to corrupt" "$(tail -3 "$T/src.out" | tr '\n' ' ')"; fi
finish
