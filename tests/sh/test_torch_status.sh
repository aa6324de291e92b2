#!/usr/bin/env bash
# test_torch_status.sh - `cddp status` on a torch job (no flight page): each rank's CPU %, memory,
# last output line and its age, and restarts, from its agent (launcher/status_pub.c); rank 1
# sleeping in its data loader while rank 0 waits in all_reduce is shown idle, stuck where it sleeps,
# and rank 0 waiting, before the watchdog's timeout (the watchdog naming it: test_torch_hang.sh).
cd "$(dirname "$0")/../.." && source tests/sh/lib.sh
T=$(mktemp -d /tmp/cddp-torch-status.XXXXXX)
trap 'kill -KILL $(jobs -p) 2>/dev/null; rm -rf "$T"' EXIT
PY=/usr/bin/python3
"$PY" -c 'import torch.distributed' 2>/dev/null || PY=$PWD/.venv/bin/python
"$PY" -c 'import torch.distributed' 2>/dev/null || { fail "torch" "neither Debian's nor .venv's: scripts/install-deps.sh test"; finish; }
SPY=$PWD/.venv/bin/py-spy
[ -x "$SPY" ] || { fail "py-spy" "$SPY absent: scripts/install-deps.sh test"; finish; }
export CDDP_PYTHON=$PY TMPDIR=$T CDDP_PY_SPY=$SPY
HT=12
timeout 300 "$CDDP" run --standalone --nproc-per-node 2 --hang-timeout $HT --log-dir "$T/logs" tests/torch/hang.py sleep \
  >"$T/run.out" 2>&1 & p=$!
await "rank 1 reaches step 4" 240 grep -qs "step 4 rank 1" "$T/logs/rank1.log"
# rank 1 now sleeps; from half the timeout its agent's record says where each rank is: rank 1
# stuck in its own code, rank 0 waiting for it in all_reduce, before the watchdog's kill
shows_both() {
  "$CDDP" status "$T/logs" >"$T/st.out" 2>&1; rc=$?
  grep -q "^  rank 1 .* stuck " "$T/st.out" && grep -q "^  rank 0 .* waiting " "$T/st.out"
}
poll_every=0.5 wait_for $((HT * 2)) shows_both # the checks below name a miss
r0=$(grep -A1 "^  rank 0 " "$T/st.out" | tail -1)
r1=$(grep -A1 "^  rank 1 " "$T/st.out" | tail -1)
if [ $rc = 0 ] && [[ "$r0" == *"cpu "*"% "*"rss "*" MiB  restarts 0  last line ("*" s ago): step "*" rank 0"* ]] &&
   [[ "$r1" == *"last line ("*" s ago): step 4 rank 1; idle "*" s (no line, under 5% CPU)" ]]; then
  ok "a torch job's ranks: CPU, memory, last line and its age, restarts; the sleeping rank idle"
else fail "status of a torch job" "rc $rc: $(tr '\n' '|' <"$T/st.out")"; fi
if grep -q "^  rank 1 .* stuck .*last in sleepy_data_loader (hang.py:13) (its Python stack)" "$T/st.out" &&
   grep -q "^  rank 0 .* waiting .*last all_reduce (its Python stack)" "$T/st.out" && ! grep -q "watchdog" "$T/run.out"; then
  ok "before the kill: rank 1 stuck in sleepy_data_loader, rank 0 waiting in all_reduce"
else fail "stuck and waiting" "$(tr '\n' '|' <"$T/st.out") $(tr '\n' '|' <"$T/run.out")"; fi
kill -TERM "$(pgrep -P $p)" 2>/dev/null; wait $p # the launcher, not timeout(1); the watchdog's line: test_torch_hang.sh
finish
