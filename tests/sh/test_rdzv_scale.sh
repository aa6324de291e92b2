#!/usr/bin/env bash
# test_rdzv_scale.sh - the rendezvous stays linear: bench/rdzv_scale.sh at 16 and 128 agents on the
# loopback, every agent through, and the requests each costs the store within 1.5x of each other
# (they were N per agent while every node read every record); the heartbeat load per agent in
# replace mode stays flat from 8 to 32 agents, and falls with a slower beat; so do a communicator's
# requests per rank from 16 to 64 ranks; the heartbeat timeout
# grows with --nnodes' MAX; bad input gets one line.
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
# at the pace of a 10,000-node job (a 2 s beat, the 8 s timeout) every periodic request slows
# with the beat: the parked wait, the peers list, the status record (the agent's generation, not
# two reads of the store's); 12.6 a beat before, 7.6 now
CDDP_HEARTBEAT_MS=2000 CDDP_HEARTBEAT_TIMEOUT_MS=8000 timeout 120 bench/rdzv_scale.sh --sizes 8 --hb-secs 8 --replace \
  --out "$T/slow" >"$T/slowout" 2>"$T/slowerr"; rc=$?
h=$(awk '$1 == 8 {print $7}' "$T/slowout")
[ $rc = 0 ] && [ -n "$h" ] && awk -v h="$h" 'BEGIN {exit !(h > 0 && 2 * h <= 10)}' &&
  ok "heartbeat load at a 2 s beat: $h requests per agent per second (at most 10 a beat)" ||
  fail "load at a 2 s beat" "rc $rc: $h; $(tail -3 "$T/slowerr" | tr '\n' ' ')"
# a communicator formed by every worker costs the store O(1) requests a rank (the peer exchange
# was every rank reading every record: 1,024 ranks took 357 s, 20 s now)
timeout 120 bench/rdzv_scale.sh --sizes 16,64 --comm --out "$T/comm" >"$T/commout" 2>"$T/commerr"; rc=$?
c16=$(awk '$1 == 16 {print $10}' "$T/commout"); c64=$(awk '$1 == 64 {print $10}' "$T/commout")
t64=$(awk '$1 == 64 {print $9}' "$T/commout")
if [ $rc = 0 ] && [ -n "$c16" ] && [ -n "$c64" ] && awk -v a="$c16" -v b="$c64" 'BEGIN {exit !(a > 0 && b <= 1.5 * a)}'
then ok "a 64-rank communicator: $c64 requests per agent, $c16 at 16 (within 1.5x), formed in $t64 s"
else fail "communicator requests linear" "rc $rc: 16: $c16, 64: $c64; $(tail -3 "$T/commerr" | tr '\n' ' ')"; fi
# a job of up to 2,048 (4,096) nodes beats slower, so its heartbeat timeout grows: every agent
# derives it from --nnodes' MAX, says so at INFO, and its workers' store clients get it too; a
# small job and a user's own value are left as they are
timeout_seen() { # MAX [VAR=VALUE]: prints the worker's CDDP_HEARTBEAT_TIMEOUT_MS; the agent's INFO in $T/info
  local port; port=$(free_port)
  env ${2:+"$2"} CDDP_DEBUG=INFO CDDP_DEBUG_SUBSYS=RUN timeout 60 build/cddp run --nnodes "1:$1" --rdzv-last-call 0 \
    --rdzv-backend c10d --rdzv-endpoint "127.0.0.1:$port" --nproc-per-node 1 --no-python \
    sh -c 'echo "T=${CDDP_HEARTBEAT_TIMEOUT_MS:-unset}"' 2>"$T/info" | sed -n 's/.*T=//p'
}
got=$(timeout_seen 2048)
[ "$got" = 4000 ] && grep -q 'up to 2048 nodes: heartbeat timeout 4000 ms' "$T/info" &&
  ok "--nnodes 1:2048: heartbeat timeout 4000 ms, said at INFO and given to the workers" ||
  fail "timeout at 2048" "worker saw '$got'; $(grep -i heartbeat "$T/info" | head -2)"
got=$(timeout_seen 10000)
[ "$got" = 8000 ] && ok "--nnodes 1:10000: heartbeat timeout 8000 ms (the cap: a loss seen within 10 s)" ||
  fail "timeout at 10000" "worker saw '$got'"
got=$(timeout_seen 1024)
[ "$got" = unset ] && ! grep -q 'heartbeat timeout' "$T/info" && ok "--nnodes 1:1024: the 3 s default, nothing set" ||
  fail "timeout at 1024" "worker saw '$got'"
got=$(timeout_seen 10000 CDDP_HEARTBEAT_TIMEOUT_MS=5000)
[ "$got" = 5000 ] && ! grep -q 'heartbeat timeout' "$T/info" && ok "CDDP_HEARTBEAT_TIMEOUT_MS=5000 wins at 10,000 nodes" ||
  fail "user's timeout" "worker saw '$got'"
bench/rdzv_scale.sh --sizes 0 >"$T/bad" 2>&1; rc=$?
[ $rc = 2 ] && [ "$(grep -c . "$T/bad")" = 1 ] && grep -q -- '--sizes' "$T/bad" && ok "bad input: --sizes 0" || fail "bad --sizes" "rc $rc: $(cat "$T/bad")"
finish
