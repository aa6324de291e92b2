#!/usr/bin/env bash
# test_run.sh - `cddp run` on one node: env contract, output prefix, log dir, exit codes,
# signals, grace period, restarts, Slurm rank mode. Every command is bounded by timeout.
cd "$(dirname "$0")/../.." && source tests/sh/lib.sh
W=$PWD/build/tests/helpers/run_worker
T=$(mktemp -d /tmp/cddp-run-test.XXXXXX)
trap 'rm -rf "$T"' EXIT
HOST=$(hostname)

# 1. the environment contract, 2 workers
timeout 20 "$CDDP" run --standalone --nproc-per-node 2 sh -c 'echo "R=$RANK L=$LOCAL_RANK W=$WORLD_SIZE LW=$LOCAL_WORLD_SIZE G=$GROUP_RANK GW=$GROUP_WORLD_SIZE MA=$MASTER_ADDR MP=$MASTER_PORT RO=$CDDP_ROUND RC=$CDDP_RESTART_COUNT MR=$CDDP_MAX_RESTARTS ST=$CDDP_STORE TK=${#CDDP_TOKEN} ID=$CDDP_RUN_ID TE=$TORCHELASTIC_RUN_ID TR=$TORCHELASTIC_RESTART_COUNT"' >"$T/env.out" 2>&1
rc=$?
r0=$(grep '^\[rank 0\] R=0 L=0 W=2 LW=2 G=0 GW=1 MA=127.0.0.1 MP=[0-9][0-9]* RO=0 RC=0 MR=0 ST=127.0.0.1:[0-9][0-9]* TK=32 ID=standalone-' "$T/env.out")
r1=$(grep -c '^\[rank 1\] R=1 L=1 W=2 LW=2 G=0 GW=1 MA=127.0.0.1' "$T/env.out")
id0=$(sed -n 's/.*ID=\([^ ]*\) TE=\([^ ]*\) TR=0$/\1=\2/p' "$T/env.out" | head -1)
if [ $rc = 0 ] && [ -n "$r0" ] && [ "$r1" = 1 ] && [ "${id0%%=*}" = "${id0#*=}" ]; then ok "env contract (standalone, 2 workers)"; else fail "env contract" "rc=$rc $(cat "$T/env.out")"; fi

# 2. workers reach the store with the generated token and pass a barrier
out=$(timeout 20 "$CDDP" run --standalone --nproc-per-node 2 "$W" barrier 2>&1)
[ $? = 0 ] && [ "$(grep -c 'barrier passed' <<<"$out")" = 2 ] && ok "workers connect to the store and pass a barrier" || fail "barrier" "$out"

# 3. every line prefixed, stdout and stderr, whole lines, partial last line flushed
timeout 20 "$CDDP" run --nproc-per-node 2 sh -c 'i=0; while [ $i -lt 300 ]; do echo "out $RANK $i"; echo "err $RANK $i" >&2; i=$((i+1)); done; printf "tail $RANK"' >"$T/o.out" 2>"$T/o.err"
rc=$?
good=1
for r in 0 1; do
  [ "$(grep -c "^\[rank $r\] out $r [0-9]*$" "$T/o.out")" = 300 ] || good=0
  [ "$(grep -c "^\[rank $r\] err $r [0-9]*$" "$T/o.err")" = 300 ] || good=0
  grep -q "^\[rank $r\] tail $r$" "$T/o.out" || good=0
done
[ "$(grep -vc '^\[rank [01]\] ' "$T/o.out")" = 0 ] || good=0
[ $rc = 0 ] && [ $good = 1 ] && ok "output lines prefixed [rank N], per stream, partial line flushed" || fail "prefix" "rc=$rc $(head -3 "$T/o.out")"

# 4. --log-dir: files per rank, console silent; --tee 1 shows stdout too
timeout 20 "$CDDP" run --nproc-per-node 2 --log-dir "$T/logs" sh -c 'echo "hello $RANK"; echo "oops $RANK" >&2' >"$T/l.out" 2>"$T/l.err"
rc=$?
if [ $rc = 0 ] && grep -qx 'hello 0' "$T/logs/rank0.log" && grep -qx 'oops 1' "$T/logs/rank1.log" && [ ! -s "$T/l.out" ] && [ ! -s "$T/l.err" ]; then
  ok "--log-dir writes DIR/rank<N>.log"; else fail "--log-dir" "rc=$rc"; fi
timeout 20 "$CDDP" run --nproc-per-node 1 --log-dir "$T/logs2" --tee 1 sh -c 'echo "hello $RANK"; echo "oops" >&2' >"$T/l.out" 2>"$T/l.err"
grep -qx '\[rank 0\] hello 0' "$T/l.out" && [ ! -s "$T/l.err" ] && grep -qx oops "$T/logs2/rank0.log" && ok "--tee 1 also shows stdout" || fail "--tee"

# 5. a worker exiting 3: the agent exits 3 with one line naming rank, host, pid
timeout 20 "$CDDP" run --nproc-per-node 2 "$W" exit=3@1 sleep=10 >"$T/e.out" 2>"$T/e.err"
rc=$?
n=$(grep -c '^cddp run:' "$T/e.err")
if [ $rc = 3 ] && [ "$n" = 1 ] && grep -q "^cddp run: rank 1 (host $HOST, pid [0-9]*) exited with code 3$" "$T/e.err"; then
  ok "worker exit 3 -> agent exit 3, one line naming rank and host"; else fail "exit 3" "rc=$rc $(cat "$T/e.err")"; fi

# 6. a worker killed by a signal: 128+9 and the signal named
timeout 20 "$CDDP" run --nproc-per-node 2 sh -c '[ $RANK = 0 ] && kill -9 $$; sleep 10' >/dev/null 2>"$T/k.err"
rc=$?
[ $rc = 137 ] && grep -q "^cddp run: rank 0 (host $HOST, pid [0-9]*) was killed by signal 9 (SIGKILL)$" "$T/k.err" && ok "killed worker -> 137 and SIGKILL named" || fail "signal exit" "rc=$rc $(cat "$T/k.err")"

# 7. SIGTERM to the agent stops the workers, nothing left behind
# both_pids: both workers wrote their pid to $T/pids; workers_gone: none of those pids runs
both_pids() { [ -s "$T/pids/0" ] && [ -s "$T/pids/1" ]; }
workers_gone() { none_alive $(cat "$T"/pids/*); }
rm -rf "$T/pids"; mkdir "$T/pids"
timeout 20 "$CDDP" run --nproc-per-node 2 sh -c 'echo $$ > '"$T"'/pids/$RANK; exec sleep 30' >/dev/null 2>"$T/t.err" &
agent=$!
await "SIGTERM: both workers run" 5 both_pids
t0=$(date +%s.%N)
kill -TERM $agent; wait $agent; rc=$?
dt=$(echo "$(date +%s.%N) - $t0" | bc)
left=0; workers_gone || left=1
[ $rc = 143 ] && [ $left = 0 ] && [ "$(echo "$dt < $(scaled 3)" | bc)" = 1 ] && ok "SIGTERM to the agent stops the workers (${dt}s)" || fail "SIGTERM" "rc=$rc left=$left dt=$dt $(cat "$T/t.err")"

# 8. a worker ignoring SIGTERM is SIGKILLed after the grace period
rm -rf "$T/pids"; mkdir "$T/pids"
timeout 20 "$CDDP" run --nproc-per-node 2 --grace-period 0.5 sh -c 'trap "" TERM; echo $$ > '"$T"'/pids/$RANK; while :; do sleep 0.1; done' >/dev/null 2>&1 &
agent=$!
await "grace: both workers ignore SIGTERM" 5 both_pids
t0=$(date +%s.%N)
kill -TERM $agent; wait $agent; rc=$?
dt=$(echo "$(date +%s.%N) - $t0" | bc)
wait_for 1 workers_gone # SIGKILLed: gone at once
left=0; workers_gone || left=1
[ $rc = 143 ] && [ $left = 0 ] && [ "$(echo "$dt >= 0.4 && $dt < $(scaled 3)" | bc)" = 1 ] && ok "SIGTERM-ignoring worker killed after the grace period (${dt}s)" || fail "grace" "rc=$rc left=$left dt=$dt"

# 9. --max-restarts 1: rank 0 fails once, the restart (CDDP_RESTART_COUNT=1) succeeds
timeout 30 "$CDDP" run --nproc-per-node 2 --max-restarts 1 "$W" exit=1@0/0 barrier >"$T/r.out" 2>"$T/r.err"
rc=$?
[ $rc = 0 ] && [ "$(grep -c 'restart=1 max_restarts=1' "$T/r.out")" = 2 ] && [ "$(grep -c 'barrier passed' "$T/r.out")" = 2 ] &&
  grep -q 'restarting the workers (restart 1 of 1)' "$T/r.err" && ok "--max-restarts 1 restarts once, then succeeds" || fail "restart" "rc=$rc $(cat "$T/r.out" "$T/r.err")"
# (each failure says something else: the same failure again at once is not retried, test_run_faults.sh)
timeout 30 "$CDDP" run --nproc-per-node 1 --max-restarts 2 sh -c 'echo "failed in restart $CDDP_RESTART_COUNT" >&2; exit 4' \
  >"$T/r2.out" 2>"$T/r2.err"
rc=$?
[ $rc = 4 ] && [ ! -s "$T/r2.out" ] && [ "$(grep -c 'restarting' "$T/r2.err")" = 2 ] &&
  grep -q "^cddp run: rank 0 (host $HOST, pid [0-9]*) exited with code 4$" "$T/r2.err" && ok "restart budget spent: exit code of the last failure" ||
  fail "restart budget" "rc=$rc $(cat "$T/r2.err")"

# 10. Slurm, one task per rank: PROGRAM runs as that rank
out=$(env SLURM_JOB_ID=77 SLURM_STEP_ID=0 SLURM_PROCID=3 SLURM_LOCALID=1 SLURM_NODEID=1 SLURM_STEP_NUM_NODES=2 \
  SLURM_STEP_NUM_TASKS=4 SLURM_STEP_NODELIST='node[1-2]' SLURM_STEP_TASKS_PER_NODE='2(x2)' MASTER_ADDR=127.0.0.1 \
  timeout 10 "$CDDP" run sh -c 'echo "$RANK $LOCAL_RANK $WORLD_SIZE $LOCAL_WORLD_SIZE $GROUP_RANK $MASTER_ADDR $CDDP_RUN_ID"' 2>&1)
[ "$out" = "3 1 4 2 1 127.0.0.1 slurm-77.0" ] && ok "Slurm task per rank: exec as SLURM_PROCID" || fail "slurm rank" "$out"

# 11. a missing program: found before any worker starts; one line naming it, exit 2
timeout 10 "$CDDP" run /nonexistent/prog >/dev/null 2>"$T/m.err"
rc=$?
[ $rc = 2 ] && [ "$(wc -l <"$T/m.err")" = 1 ] && grep -q "PROGRAM '/nonexistent/prog' not found" "$T/m.err" &&
  ok "missing program -> one line, exit 2" || fail "missing program" "rc=$rc $(cat "$T/m.err")"

# 12. --cpu-bind: by default each worker gets its own share of the agent's CPUs (disjoint, covering
# them all); none leaves every worker on all of them; too few CPUs for the workers binds nobody
allowed=$(sed -n 's/^Cpus_allowed_list:\t//p' /proc/$$/status)
ncpu=$(nproc)
cpus_of() { sed -n "s/^\[rank $1\] Cpus_allowed_list:\t//p" "$T/cb.out"; }
if [ "$ncpu" -ge 2 ]; then
  timeout 10 "$CDDP" run --nproc-per-node 2 sh -c 'grep Cpus_allowed_list /proc/self/status' >"$T/cb.out" 2>&1
  c0=$(cpus_of 0) c1=$(cpus_of 1)
  n0=$(taskset -c "$c0" nproc 2>/dev/null) n1=$(taskset -c "$c1" nproc 2>/dev/null)
  both=$(taskset -c "$c0,$c1" nproc 2>/dev/null)
  [ -n "$c0" ] && [ -n "$c1" ] && [ "$c0" != "$c1" ] && [ "$((n0 + n1))" = "$ncpu" ] && [ "$both" = "$ncpu" ] &&
    ok "--cpu-bind auto: 2 workers on disjoint CPU shares ($c0 | $c1 of $allowed)" || fail "--cpu-bind auto" "$(cat "$T/cb.out")"
  timeout 10 "$CDDP" run --cpu-bind none --nproc-per-node 2 sh -c 'grep Cpus_allowed_list /proc/self/status' >"$T/cb.out" 2>&1
  [ "$(cpus_of 0)" = "$allowed" ] && [ "$(cpus_of 1)" = "$allowed" ] && ok "--cpu-bind none: every worker on all CPUs" ||
    fail "--cpu-bind none" "$(cat "$T/cb.out")"
else
  ok "--cpu-bind auto # SKIP [cpus:2] one CPU to run on"; ok "--cpu-bind none # SKIP [cpus:2] one CPU to run on"
fi
first=${allowed%%[-,]*}
taskset -c "$first" timeout 10 "$CDDP" run --nproc-per-node 2 sh -c 'grep Cpus_allowed_list /proc/self/status' >"$T/cb.out" 2>&1
[ "$(cpus_of 0)" = "$first" ] && [ "$(cpus_of 1)" = "$first" ] && ok "--cpu-bind auto: 2 workers on 1 allowed CPU share it" ||
  fail "--cpu-bind oversubscribed" "$(cat "$T/cb.out")"
CDDP_CPU_BIND=cores timeout 10 "$CDDP" run --nproc-per-node 2 true >/dev/null 2>"$T/cb.err"
rc=$?
[ $rc = 2 ] && [ "$(wc -l <"$T/cb.err")" = 1 ] && grep -q "CDDP_CPU_BIND must be auto or none, got 'cores'" "$T/cb.err" &&
  ok "bad CDDP_CPU_BIND: one line, exit 2" || fail "bad --cpu-bind" "rc=$rc $(cat "$T/cb.err")"
# 13. a live progress line: on a terminal (script(1) gives one) the trainer's progress line
# passes through the agent rewritten in place ("\r[rank 0] epoch ..."), and a line from another
# rank clears it first; not on a terminal, it stays line by line
if command -v script >/dev/null; then
  script -qec "$CDDP run --standalone --nproc-per-node 2 $CDDP train --config configs/fmnist_mlp.yaml --work-dir $T \
    --name live --set train.max_steps=30 --set eval.every_epoch=false" /dev/null >"$T/live.tty" 2>&1
  n=$(grep -a -o $'\r\\[rank 0\\] epoch 1/1  step [0-9]*/30' "$T/live.tty" | wc -l)
  nl=$(grep -a -c $'^\\[rank 0\\] epoch 1/1  step' "$T/live.tty")
  [ "$n" -ge 25 ] && [ "$nl" = 0 ] && ok "terminal: the progress line rewritten in place through the agent ($n updates)" ||
    fail "live progress line" "$n in-place updates, $nl separate lines"
  # the order A, other, B by files, not sleeps: each rank waits (bounded) for the other's mark
  cat >"$T/clear.sh" <<'SH'
upto() { i=0; while [ ! -e "$1" ] && [ $i -lt 400 ]; do sleep 0.05; i=$((i + 1)); done; }
if [ "$RANK" = 0 ]; then printf '\rA\033[K' >&2; touch "$1/a"; upto "$1/b"; printf '\rB\033[K\n' >&2
else upto "$1/a"; echo other >&2; touch "$1/b"; fi
SH
  script -qec "$CDDP run --standalone --nproc-per-node 2 sh $T/clear.sh $T" /dev/null >"$T/clear.tty" 2>&1
  v=$(cat -v "$T/clear.tty" | tr -d '\n')
  [[ "$v" == *'^M[rank 0] A^[[K^M^[[K[rank 1] other'*'[rank 0] B^[[K'* ]] && ok "terminal: another rank's line clears the progress line first" ||
    fail "live line cleared" "$(od -c "$T/clear.tty" | head -4 | tr '\n' ' ')"
else
  echo "ok $((t_n += 1)) - test_run:live progress line # SKIP script(1) is not installed"
fi
timeout 60 "$CDDP" run --standalone --nproc-per-node 2 "$CDDP" train --config configs/fmnist_mlp.yaml --work-dir "$T" \
  --name nolive --set train.max_steps=30 --set eval.every_epoch=false >"$T/nolive.out" 2>&1
grep -q "^\[rank 0\] epoch 1/1  step 30/30 " "$T/nolive.out" && ! grep -q $'\r' "$T/nolive.out" &&
  ok "not a terminal: the progress line stays line by line, no \\r" || fail "not a terminal" "$(head -3 "$T/nolive.out")"
finish
