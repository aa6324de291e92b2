#!/usr/bin/env bash
# test_examples.sh - the example trainer built on libcddp's public headers: trains with 2
# ranks, its loss falls, and a run stopped at step 30 and resumed ends with the same weights
# as an uninterrupted run (also after SIGKILL mid-run).
cd "$(dirname "$0")/../.." && source tests/sh/lib.sh
EX=$PWD/build/examples/train_linear
T=$(mktemp -d /tmp/cddp-examples.XXXXXX)
trap 'rm -rf "$T"' EXIT
run2() { timeout 60 "$CDDP" run --standalone --nproc-per-node 2 "$EX" "$@" 2>&1; }
sum() { sed -n 's/.*weights checksum \([^ ]*\)$/\1/p' <<<"$1"; }
loss() { sed -n 's/.*last local loss \([0-9.]*\),.*/\1/p' <<<"$1"; }

full=$(run2 "$T/full" 60); rc=$?
short=$(run2 "$T/short" 5)
if [ $rc = 0 ] && [ -n "$(sum "$full")" ] && awk -v a="$(loss "$short")" -v b="$(loss "$full")" 'BEGIN { exit !(b < a && a < 2.1) }'; then
  ok "2 ranks train: loss falls ($(loss "$short") after 5 steps, $(loss "$full") after 60)"
else
  fail "2 ranks train" "rc=$rc $full"
fi

run2 "$T/resumed" 30 >/dev/null
out=$(run2 "$T/resumed" 60)
if grep -q "resumed from .*step-000000030 at step 30" <<<"$out" && [ "$(sum "$out")" = "$(sum "$full")" ]; then
  ok "stopped at 30, resumed: same weights as the uninterrupted run"
else
  fail "resume" "$(sum "$out") vs $(sum "$full"): $out"
fi

# SIGKILL the whole job somewhere after its first checkpoints, then resume to the end
{
  timeout 60 "$CDDP" run --standalone --nproc-per-node 2 "$EX" "$T/killed" 60 20000 >/dev/null 2>&1 &
  pid=$!
  await "the run to be killed saves step 20" 10 test -d "$T/killed/step-000000020"
  pkill -KILL -f "train_linear $T/killed"; kill -KILL $pid; wait $pid
} 2>/dev/null
out=$(run2 "$T/killed" 60)
if grep -q "resumed from .* at step [1-5][0-9]$" <<<"$out" && [ "$(sum "$out")" = "$(sum "$full")" ]; then
  ok "SIGKILLed mid-run, resumed: same weights"
else
  fail "SIGKILL resume" "$out"
fi
finish
