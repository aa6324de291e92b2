#!/usr/bin/env bash
# test_torch_timer.sh - torch.distributed.elastic.timer served by cddp run (launcher/elastic_timer.c),
# as torchrun's agent does with TORCHELASTIC_ENABLE_FILE_TIMER=1: under torch 1.13 and 2.x a rank
# overstaying its timer is killed within a second and named with the timer; lines no request
# should be (pid 1, over 4096 bytes, bad JSON, a terminal escape) are dropped with a line each and
# kill nobody; the user's own TORCHELASTIC_TIMER_FILE is the pipe served (torchrun keeps it too).
cd "$(dirname "$0")/../.." && source tests/sh/lib.sh
T=$(mktemp -d /tmp/cddp-torch-timer.XXXXXX)
trap 'rm -rf "$T"' EXIT
export TMPDIR=$T TORCHELASTIC_ENABLE_FILE_TIMER=1
for PY in /usr/bin/python3 "$PWD/.venv/bin/python"; do
  if ! "$PY" -c 'import torch.distributed.elastic.timer.file_based_local_timer' 2>/dev/null; then
    fail "torch at $PY" "absent, or without FileTimerClient: scripts/install-deps.sh test"; continue
  fi
  V=$("$PY" -c 'import torch; print(torch.__version__.split("+")[0])')
  CDDP_PYTHON=$PY timeout 90 "$CDDP" run --standalone --nproc-per-node 2 tests/torch/etimer.py expire >"$T/e.out" 2>&1; rc=$?
  t_in=$(grep -n "rank 1 in data_load" "$T/e.out" | cut -d: -f1)
  line=$(grep "timer 'data_load' expired" "$T/e.out")
  if [ $rc -ne 0 ] && [[ "$line" == "cddp run: rank 1 (host "*", pid "*") was killed by signal 9 (SIGKILL) by the watchdog: timer 'data_load' expired "?.?" s ago (torch.distributed.elastic.timer)" ]] &&
     [ -n "$t_in" ] && grep -q "rank 0 done" "$T/e.out" && ! grep -q "warmup" "$T/e.out"; then
    ok "torch $V: rank 1 over its timer is killed and named: ${line#cddp run: }"
  else fail "torch $V: timer expiry" "rc $rc: $(tr '\n' ' ' <"$T/e.out")"; fi
  CDDP_PYTHON=$PY timeout 90 "$CDDP" run --standalone --nproc-per-node 1 tests/torch/etimer.py hostile >"$T/h.out" 2>&1; rc=$?
  if [ $rc = 0 ] && grep -q "rank 0 done" "$T/h.out" && grep -q "pid 1 expired; that pid is no worker of this node: nothing signalled" "$T/h.out" &&
     grep -q "a line over 4096 bytes in .* dropped" "$T/h.out" && [ "$(grep -c "a request in .* dropped" "$T/h.out")" = 2 ] &&
     grep -q "timer '?\[2J' expired .*; it asked for no signal, so it runs on" "$T/h.out"; then
    ok "torch $V: hostile lines on the timer pipe dropped, one line each, nobody killed"
  else fail "torch $V: hostile lines" "rc $rc: $(tr '\n' ' ' <"$T/h.out" | cut -c1-1500)"; fi
done
# without the switch the agent serves no pipe, as torchrun
TORCHELASTIC_ENABLE_FILE_TIMER=0 CDDP_PYTHON=/usr/bin/python3 timeout 60 "$CDDP" run --standalone --nproc-per-node 1 \
  python3 -c 'import os; print("file", os.environ.get("TORCHELASTIC_TIMER_FILE", "<unset>"))' >"$T/n.out" 2>&1
grep -q "file <unset>" "$T/n.out" && ok "TORCHELASTIC_ENABLE_FILE_TIMER unset: no pipe" || fail "no switch" "$(tr '\n' ' ' <"$T/n.out")"
# the user's own TORCHELASTIC_TIMER_FILE is the pipe served and forwarded, as torchrun keeps it
chk='import os, stat; f = os.environ.get("TORCHELASTIC_TIMER_FILE", "<unset>"); print("file", f, "fifo", os.path.exists(f) and stat.S_ISFIFO(os.stat(f).st_mode))'
TORCHELASTIC_TIMER_FILE=$T/my.pipe timeout 60 "$CDDP" run --standalone --nproc-per-node 1 python3 -c "$chk" >"$T/u.out" 2>&1
if grep -q "file $T/my.pipe fifo True" "$T/u.out" && [ ! -e "$T/my.pipe" ]; then ok "the user's TORCHELASTIC_TIMER_FILE is served and kept"
else fail "the user's timer file" "$(tr '\n' ' ' <"$T/u.out")"; fi
# ... but a file of the user's at that path is never replaced: one line, non-zero
echo keep >"$T/mine.txt"
TORCHELASTIC_TIMER_FILE=$T/mine.txt timeout 60 "$CDDP" run --standalone --nproc-per-node 1 python3 -c "$chk" >"$T/r.out" 2>&1; rc=$?
if [ $rc != 0 ] && [ "$(cat "$T/mine.txt")" = keep ] && [ "$(wc -l <"$T/r.out")" = 1 ] && grep -q "mine.txt exists and is no pipe" "$T/r.out"; then
  ok "a file at TORCHELASTIC_TIMER_FILE is refused in one line and kept"
else fail "a file at the timer path" "rc $rc: $(tr '\n' ' ' <"$T/r.out")"; fi
finish
