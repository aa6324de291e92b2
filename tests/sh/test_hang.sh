#!/usr/bin/env bash
# test_hang.sh - the agent's watchdog (--hang-timeout): a SIGSTOPped worker of a 2x2 job is named,
# with the collective it was in, within the timeout + 3 s; its flight records (and its stack, or
# what the kernel says of its threads) are written; in replace mode it is replaced and training
# completes; in restart-all mode without restarts the job ends with one line naming it.
cd "$(dirname "$0")/../.." && source tests/sh/lib.sh
T=$(mktemp -d /tmp/cddp-hang.XXXXXX)
trap 'kill -KILL $(jobs -p) 2>/dev/null; rm -rf "$T"' EXIT
TR=(--config configs/fmnist_mlp.yaml --work-dir "$T" --set batch.micro=64 --set eval.every_epoch=false
    --set ddp.threads=1)
# job NAME MODE-ARGS...: two launchers (c10d, 2 workers each) in the background, logs in $T/NAME.n*.out;
# 120 steps: the stop comes at step 20, and a replaced job must finish within the timeout on a
# loaded host (700 steps at 0.7 s each did not)
job() {
  local name=$1; shift
  P=$(free_port)
  for n in 0 1; do
    TMPDIR=$T timeout 150 "$CDDP" run --nnodes 2 --nproc-per-node 2 --rdzv-backend c10d --rdzv-endpoint 127.0.0.1:$P \
      --rdzv-id "$name$P" --hang-timeout "$(scaled 5)" --grace-period 1 "$@" "$CDDP" train --name "$name" "${TR[@]}" \
      --set train.max_steps=120 >"$T/$name.n$n.out" 2>&1 &
    eval "pid_$n=\$!"
  done
}
# stop_one NAME: SIGSTOP one worker once training runs (after step 20); prints the stop time
stop_one() {
  local v=""
  # its output is the stop time: the reason it stopped nobody goes to the case's failing line
  wait_for 15 step_reached "$T/$1/metrics.jsonl" 20 || { echo "$1: no step 20 within $(scaled 15) s" >"$T/$1.victim"; return; }
  v=$(pgrep -f "^$CDDP train --name $1 --config configs/fmnist_mlp.yaml --work-dir $T " | sed -n 2p)
  [ -n "$v" ] && kill -STOP "$v" && date +%s.%N && echo "$v" >"$T/$1.victim"
}

# 1. replace mode: named within 5 + 3 s, replaced, the job completes
job rep --restart-mode replace --max-restarts 3
t0=$(stop_one rep)
wait_for 10 sh -c 'grep -qh "by the watchdog: hung" "$@"' - "$T"/rep.n*.out # the case's check names a miss
t1=$(date +%s.%N)
wait $pid_0; rc0=$?; wait $pid_1; rc1=$?
line=$(grep -h "by the watchdog: hung" "$T"/rep.n*.out | head -1)
dt=$(echo "$t1 - ${t0:-$t1}" | bc)
if [ -n "$t0" ] && [ -n "$line" ] && [ "$(echo "$dt < $(scaled 8)" | bc)" = 1 ] &&
   [[ "$line" == *"pid $(cat "$T/rep.victim"))"*"no progress for "*" s"*" #"*"stopped (SIGSTOP or a debugger)"* ]]; then
  ok "SIGSTOPped worker named in ${dt}s (timeout 5 s), with its collective"
else fail "hung worker named" "after ${dt}s (${t0:-$(cat "$T/rep.victim" 2>/dev/null)}): '$line'"; fi
dir=$(sed -n 's/.*flight records and stack in \([^;]*\);.*/\1/p' <<<"$line")
if [ -n "$dir" ] && [ "$(ls "$dir"/rank*.json 2>/dev/null | wc -l)" = 2 ] && ls "$dir"/rank*.stack.txt >/dev/null 2>&1 &&
   grep -q '"op": "allreduce"' "$dir"/rank*.json && grep -q "threads of pid" "$dir"/rank*.stack.txt; then
  ok "flight records of every local rank and the hung one's stack in $(basename "$dir")"
else fail "flight records" "dir '$dir': $(ls "$dir" 2>&1 | tr '\n' ' ')"; fi
out=$("$CDDP" flight "$dir" 2>&1); frc=$?
if [ $frc = 0 ] && [ "$(grep -c '^rank [0-9]*: \(inside\|last\) ' <<<"$out")" = 2 ] && grep -q "^no desync" <<<"$out"; then
  ok "cddp flight reads the dump: both local ranks' last collectives, no desync"
else fail "cddp flight on the dump" "exit $frc: $out"; fi
if [ $rc0 = 0 ] && [ $rc1 = 0 ] && grep -q "done: .*steps" "$T"/rep.n*.out && grep -q "replaced in place" <<<"$line"; then
  ok "replace mode: the hung worker replaced, training completes"
else fail "replace mode completes" "exits $rc0/$rc1: $(grep -h 'done:\|recovered\|cddp run' "$T"/rep.n*.out | head -3 | tr '\n' ' ')"; fi

# 2. restart-all without restarts left: the job ends with one line naming the rank, host, collective
job all
t0=$(stop_one all)
wait $pid_0; rc0=$?; wait $pid_1; rc1=$?
l0=$(grep '^cddp run:' "$T/all.n0.out" | tail -1); l1=$(grep '^cddp run:' "$T/all.n1.out" | tail -1)
if [ -n "$t0" ] && [ $rc0 = 137 ] && [ $rc1 = 137 ] && [ "$l0" = "$l1" ] &&
   [[ "$l0" == *"pid $(cat "$T/all.victim"))"*"by the watchdog: hung: no progress for"*"#"*"stopped (SIGSTOP or a debugger)"* ]]; then
  ok "restart-all, no restarts: both nodes end with the same line naming the hung rank (exit 137)"
else fail "restart-all hang" "${t0:-$(cat "$T/all.victim" 2>/dev/null); }exits $rc0/$rc1: '$l0' / '$l1'"; fi

# 3. alone on its node: 2 launchers x 1 worker, rank 1 stalls outside any collective (60 s in
# debug.slow_ms) while rank 0, on the other node, waits in the gradients' allreduce; node 1's
# agent learns that from node 0's status record and names it
P=$(free_port)
for n in 0 1; do
  TMPDIR=$T timeout 150 "$CDDP" run --nnodes 2 --nproc-per-node 1 --rdzv-backend c10d --rdzv-endpoint 127.0.0.1:$P \
    --rdzv-id "lone$P" --hang-timeout "$(scaled 3)" --grace-period 1 "$CDDP" train --name lone "${TR[@]}" --set ddp.overlap=false \
    --set debug.slow_rank=1 --set debug.slow_ms=60000 --set train.max_steps=20 >"$T/lone.n$n.out" 2>&1 &
  eval "pid_$n=\$!"
done
t0=$(date +%s.%N)
wait $pid_0; rc0=$?; wait $pid_1; rc1=$?
dt=$(echo "$(date +%s.%N) - $t0" | bc)
l1=$(grep '^cddp run:' "$T/lone.n1.out" | tail -1)
if [ $rc1 = 137 ] && [[ "$l1" == "cddp run: rank 1 "*"by the watchdog: hung: no progress for "*"outside any collective while ranks on other nodes wait inside one"* ]] &&
   [ "$(echo "$dt < $(scaled 30)" | bc)" = 1 ]; then ok "alone on its node: a stalled rank named from the other node's status record (job ended in ${dt}s)"
else fail "lone worker hang" "exits $rc0/$rc1 in ${dt}s: '$l1' $(tail -2 "$T/lone.n0.out" | tr '\n' ' ')"; fi

# 4. bad input, and off
out=$(timeout 10 "$CDDP" run --hang-timeout x true 2>&1); rc=$?
[ $rc = 2 ] && grep -q "^cddp run: --hang-timeout must be a number of seconds (0 = off), got 'x'$" <<<"$out" &&
  ok "--hang-timeout x: one line, exit 2" || fail "bad --hang-timeout" "rc=$rc: $out"
out=$(CDDP_HANG_TIMEOUT=0 timeout 20 "$CDDP" run --standalone --nproc-per-node 2 sh -c 'echo "F=${CDDP_FLIGHT_FILE:-none}"' 2>&1)
[ "$(grep -c 'F=/.*flight-rank[01].page$' <<<"$out")" = 2 ] && ok "CDDP_HANG_TIMEOUT=0: the flight page stays (cddp status reads it)" ||
  fail "hang off" "$out"
finish
