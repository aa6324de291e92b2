#!/usr/bin/env bash
# test_flight.sh - `cddp flight DIR` over the ranks' flight records: the first collective two ranks
# called differently is named (exit 1), a rank that is behind is named, and no records is one line,
# exit 2 (test_hang.sh reads a dump the watchdog really wrote); `kill -USR1` on a running agent
# writes every worker's records at once, and training goes on.
cd "$(dirname "$0")/../.." && source tests/sh/lib.sh
T=$(mktemp -d /tmp/cddp-flight-test.XXXXXX)
trap 'kill -KILL $(jobs -p) 2>/dev/null; rm -rf "$T"' EXIT
# mk DIR RANK "CSEQ OP COUNT STATE"...: a record file as comm/flight.c writes it
mk() {
  local dir=$1 r=$2 sep=""; shift 2
  mkdir -p "$dir"
  { echo "{\"rank\": $r, \"pid\": 1, \"seq\": 9, \"done\": 8, \"collectives\": ["
    for l in "$@"; do
      set -- $l
      printf '%s\n  {"seq": %s, "cseq": %s, "op": "%s", "dtype": "f32", "redop": "sum", "count": %s, "root": 0, "world": 2, "round": 0, "state": "%s", "started_s_ago": 1.5, "ms": 0.100}' \
        "$sep" "$1" "$1" "$2" "$3" "$4"
      sep=,
    done
    printf '\n]}\n'; } >"$dir/rank$r.json"
}
mk "$T/desync" 0 "1 allreduce 1024 done" "2 allreduce 1024 done" "3 allreduce 4096 started"
mk "$T/desync" 1 "1 allreduce 1024 done" "2 allreduce 1024 done" "3 broadcast 4096 started"
out=$("$CDDP" flight "$T/desync"); rc=$?
[ $rc = 1 ] && grep -q "^desync at collective #3 of round 0: rank 0 called allreduce #3 (4096 f32, sum), rank 1 called broadcast #3 (4096 f32 from rank 0)$" <<<"$out" &&
  ok "a desync named: the collective, both ranks, both calls (exit 1)" || fail "desync" "rc=$rc: $out"
mk "$T/behind" 0 "1 allreduce 1024 done" "2 allreduce 1024 done" "3 allreduce 4096 started"
mk "$T/behind" 1 "1 allreduce 1024 done" "2 allreduce 1024 done"
echo "not a record" >"$T/behind/rank7.json"
out=$("$CDDP" flight "$T/behind" 2>"$T/behind.err"); rc=$?
[ $rc = 0 ] && grep -q "^rank 0: inside allreduce #3 (4096 f32, sum) for 1.5 s$" <<<"$out" &&
  grep -q "^rank 1 is behind: its last collective is allreduce #2 (1024 f32, sum) (done); others reached #3$" <<<"$out" &&
  grep -q "^no desync" <<<"$out" && grep -q "rank7.json is not a flight record; skipped" "$T/behind.err" &&
  ok "who is stuck inside what, and who is behind (exit 0); a bad file skipped with a line" || fail "behind" "rc=$rc: $out"
out=$("$CDDP" flight "$T/none" 2>&1); rc=$?
[ $rc = 2 ] && [ "$(grep -c . <<<"$out")" = 1 ] && grep -q "cannot read $T/none" <<<"$out" && ok "no such folder: one line, exit 2" ||
  fail "no folder" "rc=$rc: $out"
mkdir -p "$T/empty"; out=$("$CDDP" flight "$T/empty" 2>&1); rc=$?
[ $rc = 2 ] && grep -q "no rank<R>.json flight records in $T/empty" <<<"$out" && ok "no records: one line, exit 2" || fail "empty" "rc=$rc: $out"

# SIGUSR1 on the agent of a running job: both workers' records in --log-dir/flight, readable by
# cddp flight; the job goes on and completes
timeout 120 "$CDDP" run --standalone --nproc-per-node 2 --log-dir "$T/logs" --tee 3 "$CDDP" train \
  --config configs/fmnist_mlp.yaml --work-dir "$T" --name usr1 --set eval.every_epoch=false --set ddp.threads=1 \
  --set train.max_steps=150 >"$T/usr1.out" 2>&1 & agent=$!
await "usr1: step 10" 20 step_reached "$T/usr1/metrics.jsonl" 10
kill -USR1 "$(pgrep -P $agent | head -1)" # cddp run, not timeout(1)
wait $agent; rc=$?
out=$("$CDDP" flight "$T/logs/flight" 2>&1); frc=$?
if [ $rc = 0 ] && grep -q "^cddp run: SIGUSR1: the flight records of 2 worker(s) are in $T/logs/flight$" "$T/usr1.out" &&
   [ -s "$T/logs/flight/rank0.json" ] && [ -s "$T/logs/flight/rank1.json" ] && [ $frc = 0 ] && grep -q '^no desync' <<<"$out" &&
   grep -q 'done:' "$T/usr1.out"; then ok "kill -USR1 on the agent: both ranks' records written, readable, the job completes"
else fail "SIGUSR1 dump" "rc $rc, flight rc $frc: $(grep -i 'usr1\|cddp run' "$T/usr1.out" | head -3 | tr '\n' ' ') $out"; fi
# a worker killed: the agent writes every local rank's records as they stood (what the survivor
# was doing when it lost its peer), and says where at INFO
# kill_one NAME RUN-FLAGS...: a 2-worker job (its output in $T/NAME.out) whose second worker is
# SIGKILLed at step 10; rc is the agent's exit
kill_one() {
  local name=$1 agent; shift
  CDDP_DEBUG=INFO CDDP_DEBUG_SUBSYS=RUN timeout 120 "$CDDP" run --standalone --nproc-per-node 2 --tee 3 "$@" \
    "$CDDP" train --config configs/fmnist_mlp.yaml --work-dir "$T" --name "$name" --set eval.every_epoch=false \
    --set ddp.threads=1 --set train.max_steps=300 >"$T/$name.out" 2>&1 & agent=$!
  await "$name: step 10" 20 step_reached "$T/$name/metrics.jsonl" 10
  kill -KILL "$(pgrep -f "^$CDDP train --config configs/fmnist_mlp.yaml --work-dir $T --name $name" | sed -n 2p)"
  wait $agent; rc=$?
}
kill_one killed --log-dir "$T/logs2"
out=$("$CDDP" flight "$T/logs2/flight" 2>&1); frc=$?
if [ $rc != 0 ] && grep -q "on a worker's failure: the flight records of 2 worker(s) are in $T/logs2/flight" "$T/killed.out" &&
   [ -s "$T/logs2/flight/rank0.json" ] && [ -s "$T/logs2/flight/rank1.json" ] && [ $frc -le 1 ] && grep -q '^rank [01]' <<<"$out"
then ok "a worker killed: every local rank's records written at the failure, readable"
else fail "records at a failure" "rc $rc, flight rc $frc: $(grep -i 'flight\|cddp run' "$T/killed.out" | head -3 | tr '\n' ' ') $out"; fi
# without --log-dir the records go to a new private folder (mkdtemp, 0700), never to the predictable
# $TMPDIR/cddp-flight-<run id> a stranger could make first with links in it; a job that ends well
# leaves no folder behind
mkdir -p "$T/tmpd/cddp-flight-J" && echo secret >"$T/victim" && chmod 600 "$T/victim"
for r in 0 1; do ln -s "$T/victim" "$T/tmpd/cddp-flight-J/rank$r.json"; done
TMPDIR=$T/tmpd kill_one planted --rdzv-id J
dir=$(sed -n 's/.*the flight records of 2 worker(s) are in \(.*\)$/\1/p' "$T/planted.out" | head -1)
if [ $rc != 0 ] && [ "$(cat "$T/victim")" = secret ] && [ -n "$dir" ] && [ "$dir" != "$T/tmpd/cddp-flight-J" ] &&
   [[ $dir == "$T/tmpd/cddp-flight-J."?????? ]] && [ "$(stat -c %a "$dir")" = 700 ] && [ -s "$dir/rank0.json" ] && [ ! -L "$dir/rank0.json" ]
then ok "a planted folder of links is not used: records in a private mkdtemp folder, the link's target untouched"
else fail "planted flight folder" "rc $rc dir '$dir' victim '$(cat "$T/victim")': $(grep -i 'flight' "$T/planted.out" | head -2 | tr '\n' ' ')"; fi
mkdir -p "$T/tmpd2"
TMPDIR=$T/tmpd2 timeout 120 "$CDDP" run --standalone --nproc-per-node 2 "$CDDP" train --config configs/fmnist_mlp.yaml \
  --work-dir "$T" --name good --set eval.every_epoch=false --set train.max_steps=5 >"$T/good.out" 2>&1; rc=$?
[ $rc = 0 ] && [ -z "$(ls -A "$T/tmpd2" | grep cddp-flight)" ] && ok "a job that ends well leaves no flight folder in \$TMPDIR" ||
  fail "flight folder cleaned" "rc $rc: $(ls -A "$T/tmpd2")"
finish
