#!/usr/bin/env bash
# test_status.sh - `cddp status` asks a running 2-node job (two `cddp run --nnodes 2` agents on
# this host, a token) through its store: both nodes and all ranks with their step, by ENDPOINT,
# by the trainer's run folder and by cddp run's --log-dir (which says how cddp run ended once the
# job is over); a worker killed and a node lost in
# replace mode show as events with their recovery times; steps longer than the 1 s tick have
# their rate; a run folder whose job is over (done, stopped, killed) or not started is told from
# its files at once; bad input gets one line and a non-zero exit.
cd "$(dirname "$0")/../.." && source tests/sh/lib.sh
T=$(mktemp -d /tmp/cddp-status.XXXXXX)
trap 'kill -KILL $(jobs -p) 2>/dev/null; rm -rf "$T"' EXIT
export CDDP_TOKEN=status-test-token
TR=(--config configs/fmnist_mlp.yaml --work-dir "$T" --set batch.micro=64 --set eval.every_epoch=false
    --set ddp.threads=1 --set train.max_steps=100000)
# job NAME ARGS...: two agents (c10d, 2 workers each) in the background; node 0 keeps --log-dir $T/NAME.logs
job() {
  local name=$1; shift
  P=$(free_port)
  for n in 0 1; do
    local logs=()
    [ $n = 0 ] && logs=(--log-dir "$T/$name.logs")
    timeout 120 "$CDDP" run --nnodes 2 --nproc-per-node 2 --rdzv-backend c10d --rdzv-endpoint 127.0.0.1:$P \
      --rdzv-id "$name$P" --grace-period 1 "${logs[@]}" "$@" "$CDDP" train --name "$name" "${TR[@]}" \
      >"$T/$name.n$n.out" 2>&1 &
    eval "pid_$n=\$!"
  done
}
# at_step NAME N: waits (at most 60 s) until the run's metrics reach step N
at_step() { wait_for 60 step_reached "$T/$1/metrics.jsonl" "$2"; }
# recovered RUN_ID: asks the job (at most 30 s) until it shows a recovery; out = the last answer, ev = 1 when seen
recovered() { ev="" out=""; poll_every=0.1 wait_for 30 shows_recovery "$1" && ev=1; }
shows_recovery() { out=$("$CDDP" status 127.0.0.1:$P --rdzv-id "$1" 2>&1); grep -q "recovered [0-9.]* s after that loss" <<<"$out"; }
# ranks_with_steps OUT: how many "rank R ... alive step S" lines with S > 0 it has, for ranks 0..3
ranks_with_steps() { grep -cE '^  rank [0-3] +pid [0-9]+ +alive +step [1-9][0-9]* ' <<<"$1"; }

# 1. a 2x2 job: both nodes and the four ranks with their step, three ways of naming the job
job st
at_step st 10 || fail "job started" "$(tail -n 3 "$T"/st.n*.out)"
# until every rank's step is posted (the agents post every second or so)
st_posted() { [ "$(ranks_with_steps "$("$CDDP" status 127.0.0.1:$P --rdzv-id "st$P" 2>&1)")" = 4 ]; }
await "every rank posts its step" 15 st_posted
out=$("$CDDP" status 127.0.0.1:$P --rdzv-id "st$P" 2>&1); rc=$?
nodes=$(grep -cE '^node [01] .* running +ranks [0-9]-[0-9]' <<<"$out")
if [ $rc = 0 ] && [ "$nodes" = 2 ] && [ "$(ranks_with_steps "$out")" = 4 ] &&
   grep -q "^job st$P at 127.0.0.1:$P: 2 nodes, 4 ranks running" <<<"$out" && grep -qE 'last (allreduce|allgather|broadcast|barrier) #' <<<"$out"; then
  ok "status ENDPOINT: 2 nodes, 4 ranks alive with their step and last collective"
else fail "status ENDPOINT" "rc=$rc: $out"; fi
out=$("$CDDP" status "$T/st" 2>&1); rc=$?
[ $rc = 0 ] && [ "$(ranks_with_steps "$out")" = 4 ] && ok "status RUN_DIR (the trainer's run folder)" ||
  fail "status RUN_DIR" "rc=$rc: $out"
out=$(CDDP_TOKEN= "$CDDP" status "$T/st.logs" 2>&1); rc=$?
[ $rc = 0 ] && [ "$(ranks_with_steps "$out")" = 4 ] && ok "status LOG_DIR (cddp run's --log-dir; its record holds the token)" ||
  fail "status LOG_DIR" "rc=$rc: $out"
[ "$(stat -c %a "$T/st/endpoint" 2>/dev/null)" = 600 ] && ok "the run folder's record is its owner's only (0600)" ||
  fail "record mode" "$(stat -c %a "$T/st/endpoint" 2>&1)"
out=$(CDDP_TOKEN=wrong "$CDDP" status 127.0.0.1:$P --rdzv-id "st$P" 2>&1); rc=$?
[ $rc = 1 ] && [ "$(wc -l <<<"$out")" = 1 ] && grep -q "refused our token" <<<"$out" &&
  ok "a wrong token: one line, exit 1" || fail "wrong token" "rc=$rc: $out"
out=$("$CDDP" status 127.0.0.1:$P --rdzv-id nosuchjob 2>&1); rc=$?
[ $rc = 1 ] && [ "$(wc -l <<<"$out")" = 1 ] && grep -q "no job 'nosuchjob' at 127.0.0.1:$P" <<<"$out" &&
  ok "another --rdzv-id: one line, exit 1" || fail "unknown run id" "rc=$rc: $out"
# a finished run's folder whose store port another job holds now: the run is over, no token error
mkdir -p "$T/old" && printf '{"step":7}\n' >"$T/old/metrics.jsonl"
printf 'store 127.0.0.1:%s\nrun_id gone\ntoken another-jobs\n' "$P" >"$T/old/endpoint"
out=$("$CDDP" status "$T/old" 2>&1); rc=$?
[ $rc = 0 ] && grep -q "^run $T/old: over; how it ended is not recorded .*is no longer its store" <<<"$out" &&
  grep -q '^  last step 7 ' <<<"$out" && ok "a run folder whose port another job holds now: over, its last step" ||
  fail "port reused" "rc=$rc: $out"
kill -TERM $pid_0 $pid_1 2>/dev/null; wait $pid_0 $pid_1 2>/dev/null
# the launcher's --log-dir once its job is over: how cddp run ended, no line about a run's files
out=$(CDDP_TOKEN= "$CDDP" status "$T/st.logs" 2>&1); rc=$?
[ $rc = 0 ] && [ "$(head -1 <<<"$out")" = "run $T/st.logs: over, stopped by signal SIGTERM (cddp run exit code 143)" ] &&
  ! grep -q "metrics\|checkpoint" <<<"$out" && ok "status LOG_DIR of a job stopped: over, by SIGTERM (exit 143)" ||
  fail "status LOG_DIR over" "rc=$rc: $out"

# 2. replace mode: a killed worker is an event, and so is its recovery, with the time it took
job rep --restart-mode replace --max-restarts 3
at_step rep 10 || fail "replace job started" "$(tail -n 3 "$T"/rep.n*.out)"
victim=""  # rank 0: its replacement is the one that records how the run ended
for p in $(pgrep -f "^$CDDP train --name rep --config configs/fmnist_mlp.yaml --work-dir $T "); do
  tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx RANK=0 && victim=$p
done
kill -KILL "$victim"
recovered "rep$P"
if [ -n "$ev" ] && grep -qE "^  [0-9:]{8}  rank [0-3] \(host .*, pid $victim\) was killed by signal 9 \(SIGKILL\).*replaced by pid [0-9]+, generation [1-9]" <<<"$out" &&
   grep -q "; a replacement" <<<"$out" && grep -qE "generation [1-9]" <<<"$(head -1 <<<"$out")"; then
  ok "a killed worker: its loss, replacement and recovery time are events; the replacement is marked"
else fail "replace events" "$out"; fi
kill -TERM $pid_0 $pid_1 2>/dev/null; wait $pid_0 $pid_1 2>/dev/null
out=$("$CDDP" status "$T/rep" 2>&1); rc=$?
[ $rc = 0 ] && grep -qE "^run $T/rep: over, stopped by signal SIGTERM at step [0-9]+$" <<<"$out" &&
  ok "a replacement rank 0 records how the run ended in its folder" || fail "replacement's ending" "rc=$rc: $out"
# the events outlive the store: kept in the run folder (by rank 0) and the --log-dir (by its agent)
kept='^  [0-9:]{8}  rank 0 \(host .*, pid '$victim'\) was killed by signal 9 \(SIGKILL\).*replaced by pid'
outl=$("$CDDP" status "$T/rep.logs" 2>&1)
grep -qx "events (kept when the job ended)" <<<"$out" && grep -qE "$kept" <<<"$out" &&
  grep -qx "events (kept when the job ended)" <<<"$outl" && grep -qE "$kept" <<<"$outl" &&
  ok "a finished job's events: kept in its run folder and its --log-dir" || fail "kept events" "$out // $outl"

# 3. a node lost (its agent SIGKILLed) in replace mode, 3 nodes x 1 worker: the generation's event
# names it, the survivors' recovery is timed, their ranks follow the new generation, and its record
# goes silent
P=$(free_port)
ONE=(--config configs/fmnist_mlp.yaml --work-dir "$T" --set batch.global=192 --set batch.micro=32
     --set 'model.hidden=[256]' --set eval.every_epoch=false --set ddp.threads=1 --set train.max_steps=100000)
ag=()
for i in 1 2 3; do
  "$CDDP" run --nnodes 2:3 --nproc-per-node 1 --rdzv-backend c10d --rdzv-endpoint 127.0.0.1:$P \
    --rdzv-id "loss$P" --rdzv-last-call "$(scaled 1)" --restart-mode replace --max-restarts 3 "$CDDP" train --name loss "${ONE[@]}" \
    >"$T/loss$i.out" 2>&1 & # no timeout(1) between: the SIGKILL below is for the agent itself
  ag[$i]=$!
  [ $i = 1 ] && wait_for 10 port_listening "$P" # the first one hosts the store
done
at_step loss 30 || fail "3-node job started" "$(tail -n 3 "$T"/loss*.out)"
# until every agent posted its record
three_running() { [ "$("$CDDP" status 127.0.0.1:$P --rdzv-id "loss$P" 2>&1 | grep -cE '^node [0-2] .* running ')" = 3 ]; }
await "loss: every agent posts its record" 15 three_running
kill -KILL "${ag[2]}" # the middle node: the last one's rank moves down
recovered "loss$P"
if [ -n "$ev" ] && grep -qE "^  [0-9:]{8}  generation [1-9][0-9]*: node .* \(agent [0-9]\) lost; 2 nodes, world 2$" <<<"$out"; then
  ok "a node lost: the generation's event names it, the survivors' recovery is timed"
else fail "node lost event" "$out"; fi
# until the lost node's record goes silent (its age past the silence limit)
one_silent() { out=$("$CDDP" status 127.0.0.1:$P --rdzv-id "loss$P" 2>&1); [ "$(grep -c '^node .* silent ' <<<"$out")" = 1 ]; }
wait_for 20 one_silent
[ "$(grep -c '^node .* silent ' <<<"$out")" = 1 ] && grep -qE '^node 0 .* running +ranks 0-0 ' <<<"$out" &&
  grep -qE '^node 1 .* running +ranks 1-1 ' <<<"$out" && ok "the lost node's record is shown silent; the survivors renumbered (world 2)" ||
  fail "silent node" "$out"
kill -TERM "${ag[1]}" "${ag[3]}" 2>/dev/null; wait "${ag[1]}" "${ag[2]}" "${ag[3]}" 2>/dev/null

# 4. steps longer than the agent's 1 s tick: the rate between the last two changes of the step
P=$(free_port)
timeout 120 "$CDDP" run --standalone --nproc-per-node 2 "$CDDP" train --name slow "${TR[@]}" \
  --set debug.slow_rank=0 --set debug.slow_ms=1500 >"$T/slow.out" 2>&1 &
slow=$!
at_step slow 3 || fail "slow job started" "$(tail -n 3 "$T/slow.out")"
# each rank's step changed twice since the agent began watching: a rate of about 1/1.5 s
slow_rated() { out=$("$CDDP" status "$T/slow" 2>&1); [ "$(grep -cE '^  rank [01] .* 0\.[4-7][0-9] steps/s' <<<"$out")" = 2 ]; }
# judged on the poll that saw it: a second look can land on the other side of the agent's 1 s tick
if wait_for 20 slow_rated; then ok "steps of 1.5 s: their rate (0.4-0.79 steps/s), not 0.00"; else fail "slow rate" "$out"; fi
# 5. stopped by a signal: the trainer's record says so, with its last step, once the job is over
kill -TERM $slow; wait $slow 2>/dev/null
out=$("$CDDP" status "$T/slow" 2>&1); rc=$?
[ $rc = 0 ] && grep -qE "^run $T/slow: over, stopped by signal SIGTERM at step [0-9]+$" <<<"$out" &&
  grep -qE '^  last step [0-9]+ \(metrics.jsonl\)$' <<<"$out" && ! grep -q "no job at" <<<"$out" &&
  ok "a run stopped by SIGTERM: its folder says so and its last step" || fail "stopped run" "rc=$rc: $out"

# a worker killed outright: rank 0 records the failure it saw, not the stop that followed it
timeout 120 "$CDDP" run --standalone --nproc-per-node 2 "$CDDP" train --name kil "${TR[@]}" >"$T/kil.out" 2>&1 &
kil=$!
at_step kil 5 || fail "job to kill started" "$(tail -n 3 "$T/kil.out")"
for p in $(pgrep -f "^$CDDP train --name kil --config configs/fmnist_mlp.yaml --work-dir $T "); do
  tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx RANK=1 && kill -KILL "$p"
done
wait $kil 2>/dev/null
out=$("$CDDP" status "$T/kil" 2>&1); rc=$?
[ $rc = 0 ] && grep -qE "^run $T/kil: over, failed at step [0-9]+: .*rank 1 .*\(exit code [0-9]+\)$" <<<"$out" &&
  ok "a worker killed: rank 0's record names the failure it saw" || fail "failed run" "rc=$rc: $out"

# 6. a finished run: done with its last step and checkpoint, no connection error; with no end
# recorded (its rank 0 killed outright) the store that refuses says the run is over, at once
timeout 120 "$CDDP" run --standalone --nproc-per-node 2 "$CDDP" train --name fin "${TR[@]}" \
  --set train.max_steps=12 >"$T/fin.out" 2>&1 || fail "short run" "$(tail -n 3 "$T/fin.out")"
out=$("$CDDP" status "$T/fin" 2>&1); rc=$?
[ $rc = 0 ] && grep -q "^run $T/fin: over, done at step 12$" <<<"$out" && grep -q '^  last step 12 (metrics.jsonl)$' <<<"$out" &&
  grep -q '^  newest checkpoint: step-000000012$' <<<"$out" && ok "a finished run: done at its last step, its checkpoint" ||
  fail "finished run" "rc=$rc: $out"
sed -i '/^ended /d' "$T/fin/endpoint"
printf '{"step":13,"lo' >>"$T/fin/metrics.jsonl"
out=$("$CDDP" status "$T/fin" 2>&1); rc=$?
[ $rc = 0 ] && grep -q "^run $T/fin: over; how it ended is not recorded .*Connection refused" <<<"$out" &&
  grep -q '^  last step 12 ' <<<"$out" && grep -q "^  metrics.jsonl: its last line does not parse .*'{\"step\":13,\"lo'$" <<<"$out" &&
  ok "no end recorded: the store refuses, the run is over; a cut metrics line named" || fail "killed run" "rc=$rc: $out"
# a run folder being made (its config, no metrics yet), and one not made yet
mkdir -p "$T/young" && cp "$T/fin/config.yaml" "$T/young/"
out=$("$CDDP" status "$T/young" 2>&1); rc=$?
[ $rc = 0 ] && grep -q "^run $T/young: starting (no metrics yet)$" <<<"$out" && ok "a starting run folder: said so" ||
  fail "starting run" "rc=$rc: $out"
out=$("$CDDP" status "$T/notyet" 2>&1); rc=$?
[ $rc = 2 ] && [ "$(wc -l <<<"$out")" = 1 ] && grep -q "no folder '$T/notyet'" <<<"$out" &&
  ok "a run folder not made yet: one line naming it, exit 2" || fail "no folder" "rc=$rc: $out"

# 7. bad input: one line, non-zero exit
P=$(free_port)
out=$("$CDDP" status 127.0.0.1:$P 2>&1); rc=$?
[ $rc = 1 ] && [ "$(wc -l <<<"$out")" = 1 ] && grep -q "^cddp status: no job at 127.0.0.1:$P" <<<"$out" &&
  ok "no job at ENDPOINT: one line, exit 1" || fail "no job" "rc=$rc: $out"
mkdir -p "$T/empty"
out=$("$CDDP" status "$T/empty" 2>&1); rc=$?
[ $rc = 1 ] && [ "$(wc -l <<<"$out")" = 1 ] && grep -q "has no job record" <<<"$out" &&
  ok "RUN_DIR without a record: one line, exit 1" || fail "no record" "rc=$rc: $out"
out=$("$CDDP" status nohost 2>&1); rc=$?
[ $rc = 2 ] && [ "$(wc -l <<<"$out")" = 1 ] && ok "neither a folder nor HOST:PORT: one line, exit 2" || fail "junk" "rc=$rc: $out"
out=$("$CDDP" status 2>&1); rc=$?
[ $rc = 2 ] && [ "$(wc -l <<<"$out")" = 1 ] && ok "no argument: one line, exit 2" || fail "no argument" "rc=$rc: $out"
finish
