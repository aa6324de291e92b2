#!/usr/bin/env bash
# test_rdzv_scale.sh - the rendezvous stays linear: bench/rdzv_scale.sh at 16 and 128 agents on the
# loopback, every agent through, and the requests each costs the store within 1.5x of each other
# (they were N per agent while every node read every record); bad input gets one line.
cd "$(dirname "$0")/../.." && source tests/sh/lib.sh
T=$(mktemp -d /tmp/cddp-rdzv-scale-test.XXXXXX)
trap 'rm -rf "$T"' EXIT
timeout 120 bench/rdzv_scale.sh --sizes 16,128 --out "$T/run" >"$T/out" 2>"$T/err"; rc=$?
m16=$(awk '$1 == 16 {print $6}' "$T/out"); m128=$(awk '$1 == 128 {print $6}' "$T/out")
if [ $rc = 0 ] && [ -n "$m16" ] && [ -n "$m128" ] && awk -v a="$m16" -v b="$m128" 'BEGIN {exit !(a > 0 && b <= 1.5 * a)}'
then ok "requests per agent: $m16 at 16 agents, $m128 at 128 (within 1.5x)"
else fail "requests per agent linear" "rc $rc: 16: $m16, 128: $m128; $(tail -3 "$T/err" | tr '\n' ' ')"; fi
rdzv=$(awk '$1 == 128 {print $2}' "$T/out")
[ $rc = 0 ] && awk -v r="$rdzv" 'BEGIN {exit !(r > 0)}' && ok "128 agents through the rendezvous: every worker started (${rdzv} s)" ||
  fail "128 agents" "rc $rc: $(tail -3 "$T/out" "$T/err" | tr '\n' ' ')"
bench/rdzv_scale.sh --sizes 0 >"$T/bad" 2>&1; rc=$?
[ $rc = 2 ] && [ "$(grep -c . "$T/bad")" = 1 ] && grep -q -- '--sizes' "$T/bad" && ok "bad input: --sizes 0" || fail "bad --sizes" "rc $rc: $(cat "$T/bad")"
finish
