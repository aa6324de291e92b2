#!/usr/bin/env bash
# test_lightning_slurm.sh - Lightning's DDP Trainer (tests/torch/lit_train.py, .venv's torch 2.x)
# on the local Slurm cluster (tests/cluster/slurm-local.sh, 2 loopback nodes): one `cddp run`
# agent per node under srun (Lightning sees torchrun's variables); `srun -n` with cddp run as
# each task (it execs into the rank and must not get in the way); and Lightning's own
# task-per-rank mode with no launcher, on the same cluster. Uses the machine-global cluster: run it under flock /tmp/cddp-cluster.lock.
# suite: alone (the machine-global local Slurm cluster)
cd "$(dirname "$0")/../.." && source tests/sh/lib.sh
PY=$PWD/.venv/bin/python SL=$PWD/tests/cluster/slurm-local.sh
if ! "$PY" -c 'import lightning, torch.distributed' 2>/dev/null; then
  echo "ok 1 - $t_name # SKIP $PY has no lightning (scripts/install-deps.sh test)"; exit 0
fi
export CDDP_SLURM_STATE
CDDP_SLURM_STATE=$(mktemp -d /tmp/cddp-test-lslurm.XXXXXX)
trap 'timeout 30 "$SL" down >/dev/null 2>&1; rm -rf "$CDDP_SLURM_STATE"' EXIT
if ! timeout 900 "$SL" install >"$CDDP_SLURM_STATE/install.log" 2>&1 || ! command -v srun >/dev/null; then
  echo "ok 1 - $t_name # SKIP Slurm cannot be installed here: $(tail -1 "$CDDP_SLURM_STATE/install.log")"; exit 0
fi
timeout 60 "$SL" up 2 >"$CDDP_SLURM_STATE/up.log" 2>&1 || { fail cluster_up "$(tail -3 "$CDDP_SLURM_STATE/up.log" | tr '\n' ' ')"; finish; }
W=$CDDP_SLURM_STATE/work
mkdir -p "$W" && cp tests/torch/lit_train.py "$W/"
cd "$W" || exit 1
# loopback node names resolve nowhere: MASTER_ADDR overrides the step's first host
export MASTER_ADDR=127.0.0.1 CDDP_PYTHON=$PY PYTHONWARNINGS=ignore
# ranks LOG W ENV: W distinct ranks of W trained steps 1-4 with Lightning's environment ENV
ranks() {
  grep -o "lightning ok rank [0-9]* of $2 steps 1-4 .*launcher=$3" "$1" | sort -u -k4,4 | wc -l
}

log=$W/agents.log
MASTER_PORT=$(free_port) timeout 240 "$SL" run srun -N2 --ntasks-per-node=1 \
  "$CDDP" run --nproc-per-node 1 lit_train.py --nodes 2 --dir "$W/c1" >"$log" 2>&1; rc=$?
[ $rc = 0 ] && [ "$(ranks "$log" 2 TorchElasticEnvironment)" = 2 ] &&
  ok "srun -N2, one cddp run agent per node: num_nodes=2, Lightning's TorchElasticEnvironment" ||
  fail "srun agents" "rc $rc: $(grep -v '^\[rank [0-9]*\] *$' "$log" | tail -4 | tr '\n' ' ')"

log=$W/tasks.log
MASTER_PORT=$(free_port) timeout 240 "$SL" run srun -N2 -n2 "$CDDP" run lit_train.py --nodes 2 --dir "$W/c2" >"$log" 2>&1; rc=$?
[ $rc = 0 ] && [ "$(ranks "$log" 2 '[A-Za-z]*')" = 2 ] &&
  ok "srun -N2 -n2 cddp run (task per rank): Lightning trains, $(grep -o 'launcher=[A-Za-z]*' "$log" | sort -u | tr '\n' ' ')" ||
  fail "srun tasks" "rc $rc: $(grep -v '^\[rank [0-9]*\] *$' "$log" | tail -4 | tr '\n' ' ')"

# Lightning's own mode, no launcher at all: its SLURMEnvironment, ranks from SLURM_PROCID
log=$W/own.log
MASTER_PORT=$(free_port) timeout 240 "$SL" run srun -N2 --ntasks-per-node=1 "$PY" lit_train.py --nodes 2 --dir "$W/c3" >"$log" 2>&1; rc=$?
[ $rc = 0 ] && [ "$(ranks "$log" 2 SLURMEnvironment)" = 2 ] &&
  ok "srun -N2 --ntasks-per-node=1 python (Lightning's own task-per-rank mode, no cddp): SLURMEnvironment" ||
  fail "Lightning's own srun mode" "rc $rc: $(grep -v '^\[rank [0-9]*\] *$' "$log" | tail -4 | tr '\n' ' ')"
finish
