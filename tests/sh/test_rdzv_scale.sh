#!/usr/bin/env bash
# test_rdzv_scale.sh - the rendezvous stays linear: bench/rdzv_scale.sh at 16 and 128 agents on the
# loopback, every agent through, and the requests each costs the store within 1.5x of each other
# (they were N per agent while every node read every record); the heartbeat load per agent in
# replace mode stays flat from 8 to 32 agents; bad input gets one line.
# suite: alone (compares request rates at two scales, which another test's load would skew)
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
# the membership watch (replace mode) costs the same per agent at any size: each agent watches its
# ring successors, not every member (it was 332 requests per agent per second at 16, 625 at 32)
timeout 120 bench/rdzv_scale.sh --sizes 8,32 --hb-secs 2 --replace --out "$T/hb" >"$T/hbout" 2>"$T/hberr"; rc=$?
h8=$(awk '$1 == 8 {print $7}' "$T/hbout"); h32=$(awk '$1 == 32 {print $7}' "$T/hbout")
if [ $rc = 0 ] && [ -n "$h8" ] && [ -n "$h32" ] && awk -v a="$h8" -v b="$h32" 'BEGIN {exit !(a > 0 && b <= 1.5 * a)}'
then ok "heartbeat load per agent: $h8 requests/s at 8 agents, $h32 at 32 (within 1.5x)"
else fail "heartbeat load flat" "rc $rc: 8: $h8, 32: $h32; $(tail -3 "$T/hberr" | tr '\n' ' ')"; fi
bench/rdzv_scale.sh --sizes 0 >"$T/bad" 2>&1; rc=$?
[ $rc = 2 ] && [ "$(grep -c . "$T/bad")" = 1 ] && grep -q -- '--sizes' "$T/bad" && ok "bad input: --sizes 0" || fail "bad --sizes" "rc $rc: $(cat "$T/bad")"
finish
