#!/usr/bin/env bash
# test_plot.sh - `cddp plot RUN_DIR` draws a run's metrics with gnuplot (PNG and SVG), and
# bad input gets one line.
cd "$(dirname "$0")/../.." && source tests/sh/lib.sh
T=$(mktemp -d /tmp/cddp-plot.XXXXXX)
trap 'rm -rf "$T"' EXIT
if ! command -v gnuplot >/dev/null; then echo "ok 1 - test_plot:plot # SKIP gnuplot is not installed"; exit 0; fi
timeout 120 "$CDDP" run --standalone --nproc-per-node 2 "$CDDP" train --config configs/fmnist_mlp.yaml \
  --work-dir "$T" --name r --set model.hidden=[32] --set train.max_steps=30 >/dev/null 2>&1

out=$("$CDDP" plot "$T/r" 2>&1); rc=$?
magic=$(head -c 8 "$T/r/metrics.png" 2>/dev/null | od -An -tx1 | tr -d ' \n')
if [ $rc = 0 ] && [ "$magic" = 89504e470d0a1a0a ] && [ "$(stat -c %s "$T/r/metrics.png")" -gt 20000 ] &&
   grep -q "30 steps, 1 evaluations -> $T/r/metrics.png" <<<"$out"; then ok "PNG of 30 steps and the final eval"
else fail "png" "rc=$rc magic=$magic $out"; fi

"$CDDP" plot "$T/r" --out "$T/m.svg" --title "it's mine" >/dev/null 2>&1; rc=$?
if [ $rc = 0 ] && grep -q "<svg" "$T/m.svg" && grep -q "samples/s" "$T/m.svg" && grep -q "it&#39;s mine\|it's mine" "$T/m.svg"
then ok "SVG with a title holding a quote"; else fail "svg" "rc=$rc"; fi

bad() { # NAME WANT-REGEX EXPECTED-RC ARGS...
  local name=$1 want=$2 code=$3; shift 3
  local o r; o=$("$CDDP" plot "$@" 2>&1); r=$?
  if [ $r = "$code" ] && grep -Eq -e "$want" <<<"$o" && [ "$(grep -c . <<<"$o")" = 1 ]; then ok "bad input: $name"
  else fail "bad input: $name" "rc=$r: $o"; fi
}
bad "no run dir" "RUN_DIR is required" 2
bad "missing run" "cannot read $T/nope/metrics.jsonl" 1 "$T/nope"
mkdir -p "$T/empty" && : >"$T/empty/metrics.jsonl"
bad "no steps" "has no step lines" 1 "$T/empty"
bad "unknown flag" "unexpected argument '--bogus'" 2 "$T/r" --bogus
finish
