#!/usr/bin/env bash
# test_torch_flight.sh - torch's own flight recorder under cddp run (launcher/torch_fr_vars.c) and
# `cddp flight` reading its dumps (cli/torch_fr.c): torch 2.x workers get the recorder on with its
# dumps in the run's flight folder, a user's own value wins, torch 1.13 gets none of it; dumps built
# from torch's documented format name the rank behind and a desync; a hostile pickle is refused.
cd "$(dirname "$0")/../.." && source tests/sh/lib.sh
T=$(mktemp -d /tmp/cddp-torch-flight.XXXXXX)
trap 'rm -rf "$T"' EXIT
VENV=$PWD/.venv/bin/python

# 1. torch 2.x over gloo: the variables set, the dumps in --log-dir/flight, read back
if "$VENV" -c 'import torch.distributed' 2>/dev/null; then
  CDDP_PYTHON=$VENV timeout 120 "$CDDP" run --standalone --nproc-per-node 2 --log-dir "$T/l2" tests/torch/fr_dump.py >"$T/r2.out" 2>&1
  rc=$?
  if [ $rc = 0 ] && grep -q "rank 1 env TORCH_FR_BUFFER_SIZE=2000" "$T/l2/rank1.log" &&
     grep -q "rank 0 env TORCH_FR_DUMP_TEMP_FILE=$T/l2/flight/torch-fr-$" "$T/l2/rank0.log" &&
     grep -q "rank 0 env TORCH_NCCL_DEBUG_INFO_PIPE_FILE=$T/l2/flight/torch-fr-pipe-$" "$T/l2/rank0.log"; then
    ok "torch 2.x: the flight-recorder variables point into the run's flight folder"
  else fail "torch 2.x: variables" "rc $rc: $(cat "$T/r2.out" "$T/l2"/rank*.log 2>&1 | tr '\n' ' ')"; fi
  # torch 2.7+ warns on every rank about an older name it finds set: only the name it reads is set
  if [ $rc = 0 ] && grep -q "rank 1 env TORCH_NCCL_TRACE_BUFFER_SIZE=<unset>" "$T/l2/rank1.log" &&
     ! grep -qi "deprecated" "$T/r2.out" "$T/l2"/rank*.log; then
    ok "torch $("$VENV" -c 'import torch; print(torch.__version__)'): only the names it reads, no deprecation warning"
  else fail "torch 2.x: deprecation warning" "$(grep -hi "deprecated\|TRACE_BUFFER" "$T/r2.out" "$T/l2"/rank*.log | tr '\n' ' ')"; fi
  "$CDDP" flight "$T/l2/flight" >"$T/f2.out" 2>&1; rc=$?
  if [ $rc = 0 ] && grep -q "^# 2 ranks' torch flight-recorder dumps" "$T/f2.out" &&
     [ "$(grep -c "^rank [01]: .*barrier #4" "$T/f2.out")" = 2 ] &&
     grep -q "^no desync" "$T/f2.out"; then
    ok "torch 2.x over gloo: cddp flight reads torch's own dumps of both ranks"
  else fail "torch 2.x: cddp flight" "rc $rc: $(ls "$T/l2/flight" 2>&1 | tr '\n' ' ') $(tr '\n' ' ' <"$T/f2.out")"; fi
  # the user's own value wins, and keeps the older name unset too
  TORCH_NCCL_TRACE_BUFFER_SIZE=7 CDDP_PYTHON=$VENV timeout 120 "$CDDP" run --standalone --nproc-per-node 1 \
    --log-dir "$T/lu" tests/torch/fr_dump.py >"$T/ru.out" 2>&1
  if grep -q "env TORCH_FR_BUFFER_SIZE=<unset>" "$T/lu/rank0.log" && grep -q "env TORCH_FR_DUMP_ON_TIMEOUT=1" "$T/lu/rank0.log"; then
    ok "torch 2.x: a user's TORCH_NCCL_TRACE_BUFFER_SIZE wins over the default"
  else fail "torch 2.x: user's value" "$(cat "$T/ru.out" "$T/lu/rank0.log" 2>&1 | tr '\n' ' ')"; fi
else fail "torch 2.x at $VENV" "absent: scripts/install-deps.sh test makes .venv"; fi

# 2. torch 1.13 has no such recorder: its workers get none of the variables
if /usr/bin/python3 -c 'import torch.distributed' 2>/dev/null; then
  CDDP_PYTHON=/usr/bin/python3 timeout 120 "$CDDP" run --standalone --nproc-per-node 1 --log-dir "$T/l1" \
    tests/torch/fr_dump.py >"$T/r1.out" 2>&1
  if grep -q "env TORCH_FR_BUFFER_SIZE=<unset>" "$T/l1/rank0.log" && grep -q "env TORCH_FR_DUMP_TEMP_FILE=<unset>" "$T/l1/rank0.log" &&
     [ ! -e "$T/l1/flight" ] && ! grep -qi "deprecated" "$T/r1.out" "$T/l1/rank0.log"; then
    ok "torch 1.13: no flight-recorder variables, no flight folder"
  else fail "torch 1.13" "$(cat "$T/r1.out" "$T/l1/rank0.log" 2>&1 | tr '\n' ' ')"; fi
else fail "torch 1.13 at /usr/bin/python3" "absent: python3-torch"; fi

# 3. dumps in torch's documented format (a pickled dict, torch/distributed/flight_recorder's
# loader reads "entries", "version", "pg_config"): rank 1 is behind, then ranks 0 and 2 part
mkdir -p "$T/doc"
python3 - "$T/doc" <<'PY'
import pickle, sys
def entry(seq, op, done=True):
    return {"collective_seq_id": seq, "p2p_seq_id": 0, "is_p2p": False, "profiling_name": "gloo:" + op,
            "state": "scheduled", "retired": done, "input_sizes": [[2, 3]], "input_dtypes": ["Float"],
            "process_group": ("0", "default_pg"), "time_created_ns": 1795847483849987814 + seq,
            "time_discovered_completed_ns": None, "timeout_ms": 1800000,
            "frames": [{"filename": "/v/torch/distributed/distributed_c10d.py", "line": 4174, "name": op},
                       {"filename": "/home/u/train.py", "line": 20 + seq, "name": "train_step"}]}
ranks = {0: [entry(1, "all_reduce"), entry(2, "all_reduce"), entry(3, "all_reduce", False)],
         1: [entry(1, "all_reduce"), entry(2, "all_reduce")],
         2: [entry(1, "all_reduce"), entry(2, "all_reduce"), entry(3, "broadcast", False)]}
for r, es in ranks.items():
    d = {"version": "2.10", "comm_lib_version": "", "pg_config": {"0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1, 2]"}},
         "pg_status": {}, "entries": es}
    open(f"{sys.argv[1]}/torch-fr-{r}", "wb").write(pickle.dumps(d, protocol=r + 2))
PY
"$CDDP" flight "$T/doc" >"$T/doc.out" 2>&1; rc=$?
if [ $rc = 1 ] && grep -q "^rank 1: last all_reduce #2 (6 Float) from train_step (train.py:22), completed" "$T/doc.out" &&
   grep -q "^desync at collective #3 of round 0: rank 0 called all_reduce #3 (6 Float), rank 2 called broadcast #3 (6 Float)" "$T/doc.out" &&
   grep -q "^rank 1 is behind: its last collective is all_reduce #2 (6 Float) (completed); others reached #3" "$T/doc.out"; then
  ok "dumps in torch's format: the rank behind and the desync named, exit 1"
else fail "torch's format" "rc $rc: $(tr '\n' ' ' <"$T/doc.out")"; fi

# 4. a pickle that would run code, and one cut short: refused with one line each, no crash
printf '\x80\x02cos\nsystem\n(S"true"\ntR.' >"$T/doc/torch-fr-3"
head -c 100 "$T/doc/torch-fr-0" >"$T/doc/torch-fr-4"
"$CDDP" flight "$T/doc" >"$T/bad.out" 2>&1; rc=$?
if [ $rc = 1 ] && grep -q "torch-fr-3 is not a torch flight-recorder dump (pickle opcode 0x63 at byte 2 .*); skipped" "$T/bad.out" &&
   grep -q "torch-fr-4 is not a torch flight-recorder dump (.*); skipped" "$T/bad.out" && grep -q "^# 3 ranks'" "$T/bad.out"; then
  ok "a hostile and a truncated dump: one line each, the others still read"
else fail "hostile dumps" "rc $rc: $(tr '\n' ' ' <"$T/bad.out")"; fi
finish
