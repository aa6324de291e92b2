#!/usr/bin/env bash
# test_run_faults.sh - how `cddp run` answers faults (issue 16): SIGINT / SIGTERM end the agent at
# once even while it waits on the store or its peers; the blame line names the rank whose failure
# came first, not the first one reaped; a failure that would repeat (a usage error, exit 2, or the
# same failure again at once) is not retried and leaves the restart budget alone. Every command is
# bounded by timeout.
cd "$(dirname "$0")/../.." && source tests/sh/lib.sh
T=$(mktemp -d /tmp/cddp-faults-test.XXXXXX)
bg=()
cleanup() { for p in "${bg[@]}"; do kill -KILL "$p" 2>/dev/null; done; wait 2>/dev/null; rm -rf "$T"; }
trap cleanup EXIT
HOST=$(hostname)
W=$PWD/build/tests/helpers/run_worker
CFG=configs/fmnist_mlp.yaml

# stop_in AGENT_PID OUT SIG NAME: sends SIG to the agent, which must end within 3 s with 128+SIG and
# its one line (with 0.2 s of patience for its own loop, and --grace-period 1 for its workers)
stop_in() {
  local p=$1 out=$2 sig=$3 name=$4 t0 rc dt
  t0=$(date +%s.%N); kill -"$sig" "$p"; wait "$p"; rc=$?
  dt=$(echo "$(date +%s.%N) - $t0" | bc)
  if [ $rc = $((128 + $(kill -l "$sig"))) ] && [ "$(echo "$dt < $(scaled 3)" | bc)" = 1 ] &&
     grep -q "^cddp run: the agent on $HOST received SIG$sig while it waited on the store or its peers; exiting$" "$out"; then
    ok "$name: SIG$sig ends the agent in ${dt}s, exit $rc, one line"
  else fail "$name: SIG$sig" "rc=$rc after ${dt}s: $(tail -2 "$out" | tr '\n' ' ')"; fi
}

# (signal, rendezvous) an agent of --nnodes 2 waits for a node that never comes (--rdzv-timeout 30).
# With OPENBLAS_NUM_THREADS=1 no thread of the process has the signals unblocked (the agent used to
# sit out --rdzv-timeout); with BLAS's threads one has, and the signal's default action used to
# kill the agent there, without its line and without stopping its workers
for sig in TERM INT; do
  P=$(free_port) blas=(); [ $sig = TERM ] && blas=(OPENBLAS_NUM_THREADS=1)
  env "${blas[@]}" timeout 60 "$CDDP" run --nnodes 2 --nproc-per-node 1 --rdzv-backend c10d --rdzv-endpoint 127.0.0.1:$P --rdzv-id w$P \
    --rdzv-timeout 30 true >"$T/w$sig.out" 2>&1 &
  p=$!; bg+=($p)
  await "signal (waiting in the rendezvous): SIG$sig: the store is up" 10 port_listening $P # its store is up: it waits in the rendezvous
  stop_in $p "$T/w$sig.out" $sig "signal (waiting in the rendezvous)"
done

# (signal, cut off) replace mode, 2 agents; the one hosting the store freezes (SIGSTOP): the other
# is cut off, its worker stops and it tries to reach the store again (--rdzv-timeout 30) to come
# back as a pending node. SIGTERM there ends it at once (it used to take --rdzv-timeout)
P=$(free_port)
for i in 1 2; do
  CDDP_HEARTBEAT_TIMEOUT_MS=1000 "$CDDP" run --restart-mode replace --max-restarts 3 --nnodes 1:2 --nproc-per-node 1 \
    --rdzv-backend c10d --rdzv-endpoint 127.0.0.1:$P --rdzv-id c$P --rdzv-timeout 30 --grace-period 1 \
    "$W" sleep=60 >"$T/c$i.out" 2>&1 &
  bg+=($!); [ $i = 1 ] && await "signal (cut off): the first agent hosts the store" 10 port_listening "$P"
done
host=${bg[-2]} other=${bg[-1]}
both_ran() { [ "$(cat "$T"/c[12].out | grep -c 'rank=')" = 2 ]; }
await "signal (cut off): both workers run" 10 both_ran
kill -STOP "$host"
wait_for 10 grep -q "is cut off from the job" "$T/c2.out" # the check below names a miss
# past its worker's grace period (its worker gone): in the store's retry loop now
await "signal (cut off): its worker gone" 10 bash -c "! pgrep -P $other >/dev/null"
if grep -q "is cut off from the job" "$T/c2.out"; then stop_in "$other" "$T/c2.out" TERM "signal (cut off, reconnecting)"
else fail "signal (cut off): never cut off" "$(tail -3 "$T/c2.out" | tr '\n' ' ')"; fi
kill -KILL "$host"; wait "$host" 2>/dev/null

# (signal, stopping) rank 1 fails; rank 0 ignores the agent's SIGTERM, so stopping it takes the
# whole --grace-period 2. A SIGTERM to the agent meanwhile ends the job (it used to be dropped,
# and the restart that followed went on)
# rank 1 fails once rank 0 ignores SIGTERM (a file, not a guess of how long that takes)
rm -f "$T/trapped"
timeout 30 "$CDDP" run --nproc-per-node 2 --max-restarts 3 --grace-period 2 sh -c 'if [ $RANK = 1 ]; then i=0
  while [ ! -e "$0/trapped" ] && [ $i -lt 400 ]; do sleep 0.02; i=$((i + 1)); done
  echo "rank 1 fails in restart $CDDP_RESTART_COUNT" >&2; exit 1; fi; trap "" TERM; touch "$0/trapped"; sleep 30' "$T" >"$T/s.out" 2>&1 &
p=$!; bg+=($p)
# stopping: rank 1 has been reaped (the agent signals rank 0 in the same pass), rank 0 lives on
agent=""; find_agent() { agent=$(pgrep -P $p -x cddp); [ -n "$agent" ]; }
only_rank0_left() { grep -q "rank 1 fails" "$T/s.out" && [ "$(pgrep -P "$agent" | wc -l)" = 1 ]; }
await "signal (while stopping): the agent runs" 10 find_agent && await "signal (while stopping): rank 1 reaped, rank 0 left" 10 only_rank0_left
t0=$(date +%s.%N); kill -TERM $p; wait $p; rc=$?
dt=$(echo "$(date +%s.%N) - $t0" | bc)
if [ $rc = 143 ] && ! grep -q "restarting the workers" "$T/s.out" && [ "$(echo "$dt < $(scaled 3)" | bc)" = 1 ] &&
   grep -q "^cddp run: the agent on $HOST received SIGTERM; workers stopped$" "$T/s.out"; then
  ok "signal (while stopping after a failure): the job ends (exit 143 in ${dt}s), no restart"
else fail "signal (while stopping)" "rc=$rc after ${dt}s: $(grep -v '^\[rank' "$T/s.out" | tr '\n' ' ')"; fi

# (blame) rank 0 reports its error and takes 0.6 s to exit (it ignores the agent's SIGTERM); rank 1
# fails after the report (a file, not a guess of how long it takes) and exits at once, so the
# agent reaps rank 1 first
rm -f "$T/said"
timeout 20 "$CDDP" run --nproc-per-node 2 sh -c 'if [ $RANK = 0 ]; then echo "checkpoint /x is corrupt" >&2; touch "$0/said"
  trap "" TERM; sleep 0.6; exit 2; else while [ ! -e "$0/said" ]; do sleep 0.02; done; sleep 0.1
  echo "rank 0 could not load the checkpoint" >&2; exit 2; fi' "$T" >/dev/null 2>"$T/b.err"
rc=$?
last=$(tail -1 "$T/b.err")
if [ $rc = 2 ] && echo "$last" | grep -q "^cddp run: rank 0 (host $HOST, pid [0-9]*) exited with code 2$"; then
  ok "blame: rank 0 failed first (reaped last): named, exit 2"
else fail "blame: rank 0 failed first" "rc=$rc last='$last'"; fi

# (blame, two nodes) the same across launchers: node 0's rank 0 reports its error and takes 0.6 s
# to exit; node 1's rank 1 fails 0.1 s after the report, exits at once, and its agent posts the
# job's failure first. Both launchers must name rank 0 (the failure records in the store, by time)
P=$(free_port)
blame2() {
  timeout 30 "$CDDP" run --nnodes 2 --nproc-per-node 1 --rdzv-backend static --master-addr 127.0.0.1 --master-port "$P" \
    --node-rank "$1" sh -c 'if [ $RANK = 0 ]; then echo "checkpoint /x is corrupt" >&2; touch "$0/said"; trap "" TERM
      sleep 0.6; exit 2; else while [ ! -e "$0/said" ]; do sleep 0.02; done; sleep 0.1
      echo "rank 0 could not load the checkpoint" >&2; exit 3; fi' "$T" >/dev/null 2>"$T/b2-$1.err"
}
rm -f "$T/said"; blame2 0 & p0=$!; blame2 1 & p1=$!; wait $p0; rc0=$?; wait $p1; rc1=$?
l0=$(tail -1 "$T/b2-0.err"); l1=$(tail -1 "$T/b2-1.err")
want="^cddp run: rank 0 (host $HOST, pid [0-9]*) exited with code 2$"
if [ $rc0 = 2 ] && [ $rc1 = 2 ] && echo "$l0" | grep -q "$want" && echo "$l1" | grep -q "$want"; then
  ok "blame across nodes: rank 0 failed first, node 1 posted first: both name rank 0, exit 2"
else fail "blame across nodes" "exits $rc0/$rc1: '$l0' / '$l1'"; fi

# (blame, real) rank 0 finds an explicit --resume-from PATH corrupt and exits 2; rank 1 learns it
# from rank 0 and exits 2 too
timeout 60 "$CDDP" run --standalone --nproc-per-node 2 "$CDDP" train --config $CFG --work-dir "$T" --name src \
  --set train.max_steps=10 --set checkpoint.every_steps=10 >"$T/src.out" 2>&1
ck=$T/src/checkpoints/step-000000010
if [ -f "$ck/model.safetensors" ]; then
  printf 'x' | dd of="$ck/model.safetensors" bs=1 seek=100 conv=notrunc 2>/dev/null
  timeout 60 "$CDDP" run --standalone --nproc-per-node 2 "$CDDP" train --config $CFG --work-dir "$T" --name bad \
    --resume-from "$ck" --set train.max_steps=20 >"$T/bad.out" 2>&1
  rc=$?
  last=$(tail -1 "$T/bad.out")
  if [ $rc = 2 ] && grep -q "^\[rank 0\] cddp train: checkpoint .* is corrupt" "$T/bad.out" &&
     echo "$last" | grep -q "^cddp run: rank 0 (host $HOST, pid [0-9]*) exited with code 2$"; then
    ok "blame: a corrupt --resume-from PATH: rank 0 named, exit 2"
  else fail "blame: corrupt --resume-from" "rc=$rc $(tail -3 "$T/bad.out" | tr '\n' ' ')"; fi
else fail "blame: no checkpoint to corrupt" "$(tail -3 "$T/src.out" | tr '\n' ' ')"; fi

# (usage) a worker exits 2 (a usage error): not retried (no AGAIN line), exit 2, the last line names
# it, says so and ends with the worker's own line (TAIL, a pattern); no restart spent.
# usage_case TAG NAME AGAIN MAX TAIL ARGS...
usage_case() {
  local tag=$1 name=$2 again=$3 max=$4 tail=$5; shift 5
  timeout 60 "$CDDP" run --max-restarts "$max" "$@" >"$T/$tag.out" 2>&1
  local rc=$? last; last=$(tail -1 "$T/$tag.out")
  if [ $rc = 2 ] && ! grep -q "$again" "$T/$tag.out" &&
     echo "$last" | grep -q "^cddp run: rank [0-9] (host $HOST, pid [0-9]*) exited with code 2 (a usage error: not retried; restarts used 0 of $max): $tail"; then
    ok "$name: not retried, exit 2, the worker's own line, 0 of $max restarts used"
  else fail "$name" "rc=$rc $(grep -c "$again" "$T/$tag.out") retries; last='$last'"; fi
}
# every worker of a batch that cannot split over 4 ranks exits 2
usage_case u "usage (replace): batch.micro=128 on 4 ranks" "replaced in place" 5 "cddp train: batch.global=256 cannot be split" \
  --standalone --nproc-per-node 4 --restart-mode replace "$CDDP" train --config $CFG --work-dir "$T" --name u --set batch.micro=128
usage_case ua "usage (all): rank 1 exits 2" "restarting the workers" 3 "rank 1 exiting with 2$" --nproc-per-node 2 "$W" exit=2@1 sleep=10

# (repeat) rank 1 fails at once the same way every time (same code, same error line): restarted
# once, then the job stops naming it; the rest of the budget stays. MODE: replace or all
repeat_case() {
  local mode=$1 again=$2
  timeout 30 "$CDDP" run --nproc-per-node 2 --max-restarts 5 --restart-mode "$mode" sh -c \
    'if [ $RANK = 1 ]; then echo "cannot open /nonexistent/data" >&2; exit 1; fi; exec sleep 30' >/dev/null 2>"$T/r$mode.err"
  local rc=$? last; last=$(tail -1 "$T/r$mode.err")
  if [ $rc = 1 ] && [ "$(grep -c "$again" "$T/r$mode.err")" = 1 ] &&
     echo "$last" | grep -q "^cddp run: rank 1 (host $HOST, pid [0-9]*) exited with code 1 (the same failure again, at once: not retried; restarts used 1 of 5): cannot open /nonexistent/data$"; then
    ok "repeat ($mode): the same failure at once: retried once ('$again'), then stopped, 1 of 5 restarts used"
  else fail "repeat ($mode)" "rc=$rc $(tr '\n' ' ' <"$T/r$mode.err")"; fi
}
repeat_case replace "replaced in place"
repeat_case all "restarting the workers"

# a store host that does not resolve fails at once, and its line says how long it tried rather
# than claiming the --rdzv-timeout it did not wait
s=$(date +%s)
timeout 60 "$CDDP" run --nnodes 1 --nproc-per-node 1 --rdzv-backend c10d --rdzv-endpoint no-such-host.invalid:29400 \
  --rdzv-timeout 300 true >"$T/typo.out" 2>&1; rc=$?
dt=$(($(date +%s) - s)); line=$(grep "cannot reach the rendezvous store" "$T/typo.out")
if [ $rc != 0 ] && [ $rc != 124 ] && [ $dt -lt 30 ] && [[ "$line" == *"no-such-host.invalid"*"gave up after "*" s of --rdzv-timeout 300.0 s"* ]] &&
   ! grep -q "within --rdzv-timeout" "$T/typo.out"
then ok "a mistyped store host: exit $rc after ${dt}s, the line says how long it tried: ${line:0:120}"
else fail "mistyped host" "rc=$rc after ${dt}s: $(tr '\n' ' ' <"$T/typo.out")"; fi
finish
