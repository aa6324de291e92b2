#!/usr/bin/env bash
# test_split_tie.sh - the split-brain tie rule (docs/store.md, "Failover"): 4 namespace hosts,
# `cddp run --nnodes 2:4 --restart-mode replace`, the store on host 1, then a partition 1,2 | 3,4.
# Two of four is no strict majority: hosts 3 and 4 never take the store over and end by
# themselves, each with its one line; the old host keeps the store (2 of 4 keep it) and hosts 1
# and 2 finish. Uses tests/cluster/netns.sh: run it under flock /tmp/cddp-cluster.lock.
cd "$(dirname "$0")/../.." && source tests/sh/lib.sh
NS=tests/cluster/netns.sh
W=$PWD/build/tests/helpers/run_worker
T=$(mktemp -d /tmp/cddp-split-tie.XXXXXX)
A=()
cleanup() {
  local p
  for p in "${A[@]}"; do kill -KILL "$p" 2>/dev/null; done
  wait 2>/dev/null
  netns_down
  [ -n "${CDDP_TEST_KEEP:-}" ] && cp "$T"/h?.out "$CDDP_TEST_KEEP"/ 2>/dev/null; rm -rf "$T"
}
trap cleanup EXIT

netns_up 4 "$T" t 79
ep=$("$NS" addr 1):29500
# the far side's voter that is not next in line gives up after the failover wait: 8 s, not 30
export CDDP_STORE_FAILOVER_MS=8000
for i in 1 2 3 4; do
  "$NS" exec $i "$CDDP" run --nnodes 2:4 --nproc-per-node 1 --rdzv-backend c10d --rdzv-endpoint "$ep" \
    --rdzv-id tie --rdzv-last-call "$(scaled 1)" --rdzv-timeout 10 --max-restarts 3 --restart-mode replace --grace-period 1 \
    "$W" sleep=20 >"$T/h$i.out" 2>&1 &
  A[$i]=$!
  [ $i = 1 ] && await "host 1 hosts the store" 10 "$NS" exec 1 bash -c "$(declare -f port_listening); port_listening 29500"
done
all_in() { [ "$(cat "$T"/h?.out | grep -c 'rank=')" = 4 ]; } # every worker started: one generation of 4
wait_for 60 all_in || fail "4 hosts formed no job" "$(tail -q -n 2 "$T"/h?.out | tr '\n' ' ')"
"$NS" partition 1,2 3,4
wait_all 60 "${A[3]}" "${A[4]}"
r3=${RC[0]} r4=${RC[1]}
wait_all 60 "${A[1]}" "${A[2]}"
r1=${RC[0]} r2=${RC[1]}
"$NS" heal
cat "$T"/h?.out >"$T/all.out"
took=$(grep -h "agent [0-9]* took the store over" "$T/all.out")
[ -z "$took" ] && ok "2 of 4 on the far side: nobody took the store over" || fail "a take-over on a tie" "$took"
for i in 3 4; do
  o=$T/h$i.out; r=$([ $i = 3 ] && echo "$r3" || echo "$r4")
  if [ "$r" != 0 ] && [ "$r" != 137 ] &&
     grep -q '^cddp run: node .* \(is cut off from the job\|carrying on needs a majority\)' "$o"; then
    ok "host $i ends by itself (exit $r): $(grep -h '^cddp run: node' "$o" | tail -1 | cut -c1-110)"
  else fail "host $i" "rc=$r: $(tail -3 "$o" | tr '\n' ' ')"; fi
done
! grep -q "hosts the job's store but hears from only" "$T/h1.out" && [ "$r1" = 0 ] && [ "$r2" = 0 ] &&
  ok "the old host keeps the store on a tie: hosts 1 and 2 finish (exit 0)" ||
  fail "the old host's side" "rc=$r1 $r2: $(grep -h '^cddp run' "$T/h1.out" "$T/h2.out" | tail -4 | tr '\n' ' ')"
finish
