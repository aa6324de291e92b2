#!/usr/bin/env bash
# test_sweep.sh - `cddp bench train --sweep` on a tiny grid: one table row per combination with
# its figures, a combination that cannot run named with the trainer's own line (exit 1), a slow
# setting named against the one that differs only there, sweep.tsv drawn by `cddp plot`, and one
# line for each bad input. Nodes: 1 and 2 agents on the loopback, and 2 namespace hosts over tcp.
# suite: alone (its namespace hosts use netns.sh's default subnet)
cd "$(dirname "$0")/../.." && source tests/sh/lib.sh
T=$(mktemp -d /tmp/cddp-sweep-test.XXXXXX)
trap 'rm -rf "$T"' EXIT
C=configs/fmnist_mlp.yaml

# 1. 2 x 2: nproc 1,2 x batch.micro 64,256 (256 over 2 ranks cannot split the global batch of 256)
"$CDDP" bench train --sweep --config $C --steps 8 --nproc 1,2 --set batch.micro=64,256 --set model.hidden=[32] \
  --out "$T/a" >"$T/a.out" 2>"$T/a.err"; rc=$?
rows=$(grep -cE '^ +[12] +(64|256) +\[32\] \| +[0-9]+\.[0-9] +[0-9]+\.[0-9]{2} +[0-9]+\.[0-9]% +[0-9]+\.[0-9] +[0-9]\.[0-9]{4}$' "$T/a.out")
if [ $rc = 1 ] && [ "$rows" = 3 ] && grep -qE '^ +2 +256 +\[32\] \| +failed' "$T/a.out" &&
   grep -q "run 4 failed: cddp train: batch.global=256 cannot be split" "$T/a.err" &&
   [ "$(grep -vc '^#' "$T/a/sweep.tsv")" = 3 ] && grep -q '^# axes: nproc batch.micro model.hidden$' "$T/a/sweep.tsv"
then ok "a 2x2 grid: 3 rows with their figures, the one that cannot run named with the trainer's line (exit 1)"
else fail "2x2 grid" "rc $rc, $rows rows: $(cat "$T/a.out" "$T/a.err" | tr '\n' ' ')"; fi
# the loss at the end is the same for every split of the global batch (cddp keeps it constant)
[ "$(grep -E '^ +[12] +(64|256) ' "$T/a.out" | grep -v failed | awk '{ print $NF }' | sort -u | wc -l)" = 1 ] &&
  ok "the same loss at the end for every process count and micro-batch (the global batch kept)" ||
  fail "same loss" "$(grep -E '^ +[12] ' "$T/a.out" | tr '\n' ' ')"

# 2. a slow setting named against the run that differs only there
"$CDDP" bench train --sweep --config $C --steps 8 --nproc 1 --set debug.slow_rank=0 --set debug.slow_ms=0,250 \
  --set model.hidden=[32] --out "$T/b" >"$T/b.out" 2>"$T/b.err"; rc=$?
if [ $rc = 0 ] && grep -qE '^slow: nproc=1 debug.slow_rank=0 debug.slow_ms=250 model.hidden=\[32\] runs at [0-9.]+ samples/s, [0-9.]+x below debug.slow_ms=0 with all else equal$' "$T/b.out" &&
   ! grep -q 'slow_ms=0 model.hidden=\[32\] runs at' "$T/b.out"
then ok "a 250 ms stall per step named: slow against debug.slow_ms=0, all else equal"
else fail "slow named" "rc $rc: $(cat "$T/b.out" | tr '\n' ' ')"; fi

# 3. cddp plot draws the sweep
if command -v gnuplot >/dev/null; then
  out=$("$CDDP" plot "$T/a" --out "$T/a.svg" 2>&1); rc=$?
  [ $rc = 0 ] && [ "$out" = "cddp plot: a sweep of 3 runs -> $T/a.svg" ] && grep -q '<text>nproc batch.micro model.hidden</text>' "$T/a.svg" &&
    grep -q '<text>peak RSS (MB)</text>' "$T/a.svg" && ok "cddp plot draws a sweep: throughput and peak RSS per setting" ||
    fail "plot sweep" "rc $rc: $out"
else
  ok "cddp plot draws a sweep # SKIP gnuplot is not installed"
fi

# 4. nodes: one agent per node on this host's loopback, then each in its namespace host (TCP)
"$CDDP" bench train --sweep --config $C --steps 10 --nodes 1,2 --nproc 1 --set model.hidden=[32] \
  --out "$T/n" >"$T/n.out" 2>"$T/n.err"; rc=$?
rows=$(grep -cE '^ +[12] +1 +\[32\] \| +[0-9]+\.[0-9] +[0-9]+\.[0-9]{2} +[0-9]+\.[0-9]% +[0-9]+\.[0-9] +[0-9]\.[0-9]{4}$' "$T/n.out")
if [ $rc = 0 ] && [ "$rows" = 2 ] && grep -qE '^ +nodes +nproc +model.hidden \|' "$T/n.out" &&
   grep -q '^# axes: nodes nproc model.hidden$' "$T/n/sweep.tsv" && grep -q 'world 2 (' "$T/n/runs/s01.log" &&
   [ -e "$T/n/runs/s01.node1.log" ] && [ "$(grep -E '^ +[12] +1 ' "$T/n.out" | awk '{ print $NF }' | sort -u | wc -l)" = 1 ]
then ok "--nodes 1,2: a row per node count, 2 agents make a world of 2, the same loss at the end"
else fail "--nodes 1,2" "rc $rc, $rows rows: $(cat "$T/n.out" "$T/n.err" | tr '\n' ' ')"; fi
export CDDP_NETNS_PREFIX=cddpsw$$ CDDP_NETNS_STATE=$T/netns
if timeout 60 tests/cluster/netns.sh up 2 >"$T/netns.log" 2>&1; then
  "$CDDP" bench train --sweep --config $C --steps 10 --nodes 2 --netns "$CDDP_NETNS_PREFIX" --nproc 1 \
    --set model.hidden=[32] --out "$T/m" >"$T/m.out" 2>"$T/m.err"; rc=$?
  if [ $rc = 0 ] && grep -qE '^ +2 +1 +\[32\] \| +[0-9]+\.[0-9] ' "$T/m.out" && grep -q 'world 2 (tcp)' "$T/m/runs/s00.log"
  then ok "--nodes 2 --netns: each node in its namespace host, the ranks meet over tcp"
  else fail "--netns" "rc $rc: $(cat "$T/m.out" "$T/m.err" | tr '\n' ' ')"; fi
else fail "namespace hosts" "$(tail -2 "$T/netns.log" | tr '\n' ' ')"; fi
timeout 60 tests/cluster/netns.sh down >/dev/null 2>&1

# 5. bad input: one line, exit 2
bad() { # NAME WANT ARGS...
  local name=$1 want=$2; shift 2
  "$CDDP" bench train "$@" >"$T/bad.out" 2>&1; local r=$?
  if [ $r = 2 ] && [ "$(grep -c . "$T/bad.out")" = 1 ] && grep -q -- "$want" "$T/bad.out"; then ok "bad input: $name"
  else fail "bad input: $name" "rc $r: $(cat "$T/bad.out" | tr '\n' ' ')"; fi
}
bad "no --sweep" "--sweep is needed" --config $C
bad "missing config" "--config $T/nope.yaml" --sweep --config "$T/nope.yaml"
bad "--set without =" "--set batch.micro: expected KEY=V1,V2" --sweep --config $C --set batch.micro
bad "an empty value" "--set batch.micro=32,: an empty value" --sweep --config $C --set batch.micro=32,
bad "--nodes 0" "--nodes 0: '0' is not a node count 1-8" --sweep --config $C --nodes 0
bad "--netns without --nodes" "--netns cddpx without --nodes" --sweep --config $C --netns cddpx
bad "--netns naming no namespace" "no namespace cddpnone-h1 for node 1 of 2" --sweep --config $C --nodes 2 --netns cddpnone
bad "--nproc 0" "--nproc 1,0: '0' is not a process count" --sweep --config $C --nproc 1,0
bad "too many runs" "81 combinations; at most 64" --sweep --config $C --nproc 1,2,3 --set a=1,2,3 --set b=1,2,3 --set c=1,2,3
bad "--steps 1" "--steps" --sweep --config $C --steps 1
finish
