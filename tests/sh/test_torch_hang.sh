#!/usr/bin/env bash
# test_torch_hang.sh - the watchdog on torch scripts, which keep no flight page (launcher/hang_probe.c):
# under torch 1.13 (/usr/bin/python3) and torch 2.x (.venv), a rank sleeping in its data loader
# while its peer waits in all_reduce is named with its function and line within --hang-timeout + 5 s,
# as 2 ranks on 1 node and as 2 nodes of 1 rank (there with its DataLoader's 2 worker processes
# spinning: their CPU is not the rank's progress), SIGUSR1 before that writing every rank's Python
# stack; a SIGSTOPped rank is named as stopped; 30 s silent CPU-bound steps with --hang-timeout 5
# are no hang.
cd "$(dirname "$0")/../.." && source tests/sh/lib.sh
SPY=$PWD/.venv/bin/py-spy
PYS=()
for py in /usr/bin/python3 "$PWD/.venv/bin/python"; do
  if "$py" -c 'import torch.distributed' 2>/dev/null; then PYS+=("$py")
  else fail "torch at $py" "absent: scripts/install-deps.sh test makes .venv; Debian's is python3-torch"; fi
done
[ -x "$SPY" ] || { fail "py-spy" "$SPY absent: scripts/install-deps.sh test"; finish; }
T=$(mktemp -d /tmp/cddp-torch-hang.XXXXXX)
trap 'kill -KILL $(jobs -p) 2>/dev/null; rm -rf "$T"' EXIT
cp tests/torch/hang.py "$T/"
cd "$T" || exit 1
export CDDP_PY_SPY=$SPY TMPDIR=$T
HT=$(scaled 5) # the watchdog judges progress by the wall clock: a loaded host stretches it
# how long a job may take to start (torch's import, on a loaded host: minutes at load 100+); the
# bound under test, the watchdog's line within HT + 5 s of the hang, does not move with it
START=180
# torch PY: "1.13" or "2.x", for the test names
ver() { "$1" -c 'import torch; print(torch.__version__.split("+")[0])'; }
# wait_for FILES PATTERN SECS: prints the time the pattern first showed in FILES (a glob: the
# nodes' outputs, as c10d places ranks on either); nothing if never
wait_for() {
  for _ in $(seq "$(awk -v s="$3" -v k="$test_scale" 'BEGIN { printf "%d", s * k * 20 }')"); do grep -qh "$2" $1 2>/dev/null && { date +%s.%N; return; }; sleep 0.05; done
}
# named NAME OUTS T0 PATTERN: the watchdog's line in OUTS matches PATTERN, came within HT + 5 s of T0
named() {
  local t1 line dt
  t1=$(wait_for "$2" "watchdog.* hung" 40) # its line at the verdict (the closing one waits for the others to stop)
  line=$(grep -h "watchdog.* hung" $2 | head -1)
  dt=$(echo "${t1:-0} - ${3:-0}" | bc)
  if [ -n "$3" ] && [ -n "$t1" ] && [ "$(echo "$dt < $HT + 5 * $test_scale" | bc)" = 1 ] && [[ "$line" == $4 ]]; then
    ok "$1: named in ${dt}s: ${line#cddp run: }"
  else fail "$1" "t0 '$3', after ${dt}s: '$line' $(tail -q -n 3 $2 | tr '\n' ' ')"; fi
}

busy=()
for PY in "${PYS[@]}"; do
  V=$(ver "$PY")
  export CDDP_PYTHON=$PY
  # no false alarm: started first, it runs while the others are tested (30 s silent steps)
  timeout 300 "$CDDP" run --standalone --nproc-per-node 2 --hang-timeout $HT hang.py busy 30 1 >"busy$V.out" 2>&1 &
  busy+=("$!:$V")

  # 1. one node, 2 ranks: rank 1 sleeps in sleepy_data_loader at step 5
  timeout 300 "$CDDP" run --standalone --nproc-per-node 2 --hang-timeout $HT hang.py sleep >"s1$V.out" 2>&1 & p=$!
  wait_for "s1$V.out" "step 2 rank 1" $START >/dev/null
  kill -USR1 "$(pgrep -P $p)" # the launcher, not timeout(1)
  t0=$(wait_for "s1$V.out" "step 4 rank 1" $START)
  named "torch $V, 1 node: the sleeping rank" "s1$V.out" "$t0" \
    "*rank 1 (host *, pid *) *hung: no progress for * s while ranks 0 wait in all_reduce; in sleepy_data_loader (hang.py:13)*"
  wait $p
  dir=$(sed -n 's/.*flight records and stack in \([^;]*\)$/\1/p' "s1$V.out" | head -1)
  if grep -q "sleepy_data_loader" "$dir/rank1.pystack.txt" 2>/dev/null && grep -q "all_reduce" "$dir/rank0.pystack.txt"; then
    ok "torch $V: every rank's Python stack in the flight folder"
  else fail "torch $V: stacks" "'$dir': $(ls "$dir" 2>&1 | tr '\n' ' '): $(cat "$dir"/rank*.pystack.txt | tr '\n' ' ')"; fi
  udir=$(sed -n 's/.*SIGUSR1: the Python stacks of 2 worker(s) are in //p' "s1$V.out" | head -1)
  if [ -n "$udir" ] && grep -q "Thread" "$udir/rank0.pystack.txt"; then ok "torch $V: SIGUSR1 writes every rank's Python stack"
  else fail "torch $V: SIGUSR1" "$(grep SIGUSR1 "s1$V.out")"; fi

  # 2. two nodes of one rank each: the waiting rank is on the other node; the sleeping rank's
  # main thread waits for its DataLoader, whose 2 worker processes spin (their CPU is not its own)
  P=$(free_port)
  nodes=()
  for n in 0 1; do
    timeout 300 "$CDDP" run --nnodes 2 --nproc-per-node 1 --rdzv-backend c10d --rdzv-endpoint 127.0.0.1:$P \
      --rdzv-id "h$P" --hang-timeout $HT hang.py loader >"s2$V.n$n.out" 2>&1 &
    nodes+=($!)
  done
  t0=$(wait_for "s2$V.n*.out" "step 4 rank 1" $START)
  named "torch $V, 2 nodes: the rank waiting for its spinning DataLoader workers" "s2$V.n*.out" "$t0" \
    "*rank 1 (host *, pid *) *hung: no progress for * s while ranks on other nodes wait in a collective; in sleepy_data_loader (hang.py:15)*"
  wait "${nodes[@]}"

  # 3. a SIGSTOPped rank is named as stopped
  timeout 300 "$CDDP" run --standalone --nproc-per-node 2 --hang-timeout $HT hang.py steady >"st$V.out" 2>&1 & p=$!
  wait_for "st$V.out" "step 3 rank 1" $START >/dev/null
  # this job's rank 1 only (TMPDIR=$T): another session's test may run hang.py steady at the same time
  v=$(pgrep -f "hang.py steady" | while read -r q; do
    tr '\0' '\n' <"/proc/$q/environ" 2>/dev/null | grep -ax -c -e "RANK=1" -e "TMPDIR=$T" | grep -qx 2 && echo "$q"; done | head -1)
  t0=""; [ -n "$v" ] && kill -STOP "$v" && t0=$(date +%s.%N)
  named "torch $V: a SIGSTOPped rank" "st$V.out" "$t0" "*rank 1 (host *, pid $v) *hung: stopped (SIGSTOP or a debugger), no progress for * s*"
  wait $p
done

for b in "${busy[@]}"; do
  wait "${b%%:*}"; rc=$?; V=${b#*:}
  if [ $rc = 0 ] && grep -q "step 0 rank 1" "busy$V.out" && ! grep -q "watchdog" "busy$V.out"; then
    ok "torch $V: 30 s silent CPU-bound steps with --hang-timeout $HT: no hang"
  else fail "torch $V: busy job" "exit $rc: $(tail -3 "busy$V.out" | tr '\n' ' ')"; fi
done
finish
