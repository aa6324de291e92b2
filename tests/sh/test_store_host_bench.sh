#!/usr/bin/env bash
# test_store_host_bench.sh - bench/store_host_bench.sh runs small: the store-hosting launcher is
# killed; with 3 nodes cddp's survivors finish every step left (the store moves), with 2 (--nnodes 2)
# the survivor takes the store over but ends below MIN, naming it; bad flags get one line.
cd "$(dirname "$0")/../.." && source tests/sh/lib.sh
T=$(mktemp -d /tmp/cddp-store-host-test.XXXXXX)
trap 'rm -rf "$T"' EXIT
timeout 300 bench/store_host_bench.sh --nodes 3 --kill-at 10 --rows cddp --out "$T/3" >"$T/out3" 2>"$T/err3"; rc=$?
row=$(grep '^cddp ' "$T/out3")
# (a step may complete between the bench reading the last step and its kill: "left" is within 1)
if [ $rc = 0 ] && [[ "$row" =~ ^cddp\ +0,0\ +([0-9]+)\ of\ ([0-9]+)\ +[0-9.]+\ +[0-9.]+ ]] &&
   [ "${BASH_REMATCH[1]}" -ge $((BASH_REMATCH[2] - 1)) ]
then ok "3 nodes, the store's host killed: both survivors finish every step left: $row"
else fail "store host bench, 3 nodes" "rc $rc: $(cat "$T/out3" "$T/err3" | tail -4 | tr '\n' ' ')"; fi
timeout 300 bench/store_host_bench.sh --nodes 2 --kill-at 10 --rows cddp --out "$T/2" >"$T/out2" 2>"$T/err2"; rc=$?
row=$(grep '^cddp ' "$T/out2")
# (--nnodes 2: the survivor takes the store over, its host's port refusing, but one node is below MIN)
if [ $rc = 0 ] && [[ "$row" =~ ^cddp\ +[1-9][0-9]*\ +[0-9]+\ of\ [0-9]+\  ]] && grep -q '1 of at least 2 nodes' <<<"$row"
then ok "2 nodes: the survivor ends below MIN, naming it: $row"
else fail "store host bench, 2 nodes" "rc $rc: $(cat "$T/out2" "$T/err2" | tail -4 | tr '\n' ' ')"; fi
bench/store_host_bench.sh --kill-at 0 >"$T/bad" 2>&1; rc=$?
[ $rc = 2 ] && [ "$(grep -c . "$T/bad")" = 1 ] && grep -q -- '--kill-at' "$T/bad" && ok "bad input: --kill-at 0" || fail "bad --kill-at" "rc $rc: $(cat "$T/bad")"
bench/store_host_bench.sh --nodes 4 >"$T/bad" 2>&1; rc=$?
[ $rc = 2 ] && [ "$(grep -c . "$T/bad")" = 1 ] && grep -q -- '--nodes' "$T/bad" && ok "bad input: --nodes 4" || fail "bad --nodes" "rc $rc: $(cat "$T/bad")"
finish
