#!/usr/bin/env bash
# test_lightning.sh - PyTorch Lightning's Trainer(accelerator="cpu", devices=N, num_nodes=M,
# strategy="ddp") under `cddp run` (tests/torch/lit_train.py, torch 2.x and Lightning from .venv,
# made by scripts/install-deps.sh test): standalone; c10d with two launchers; torchrun's static
# line; XTuner's variables; and a worker SIGKILLed under --max-restarts, the job resuming from
# Lightning's last checkpoint. Lightning must see torchrun's environment (TorchElasticEnvironment).
cd "$(dirname "$0")/../.." && source tests/sh/lib.sh
PY=$PWD/.venv/bin/python
if ! "$PY" -c 'import lightning, torch.distributed' 2>/dev/null; then
  echo "ok 1 - $t_name # SKIP $PY has no lightning (scripts/install-deps.sh test)"; exit 0
fi
T=$(mktemp -d /tmp/cddp-lightning.XXXXXX)
trap 'kill $(jobs -p) 2>/dev/null; rm -rf "$T"' EXIT
cp tests/torch/lit_train.py "$T/"
cd "$T" || exit 1
export CDDP_PYTHON=$PY PYTHONWARNINGS=ignore
two() { # "ENV0" "ENV1" ARGS...: two launchers (two nodes) at once, outputs in n0.out n1.out
  local e0=$1 e1=$2; shift 2
  env $e0 timeout 150 "$CDDP" run "$@" >"$T/n0.out" 2>&1 & local p0=$!
  env $e1 timeout 150 "$CDDP" run "$@" >"$T/n1.out" 2>&1 & local p1=$!
  wait $p0; rc0=$?; wait $p1; rc1=$?
}
# trained NAME W FROM: both launchers exited 0 and W distinct ranks of W trained steps FROM-4
# with Lightning's TorchElasticEnvironment
trained() {
  local n; n=$(cat "$T/n0.out" "$T/n1.out" | grep -o "lightning ok rank [0-9]* of $2 steps $3-4 .*launcher=TorchElasticEnvironment" |
               sort -u -k4,4 | wc -l)
  if [ "$rc0" = 0 ] && [ "$rc1" = 0 ] && [ "$n" = "$2" ]; then ok "$1"
  else fail "$1" "exits $rc0/$rc1, $n of $2 ranks: $(cat "$T/n0.out" "$T/n1.out" | grep -v '^\[rank [0-9]*\] *$' | tail -4 | tr '\n' ' ')"; fi
}

# 1. standalone, 2 devices
timeout 150 "$CDDP" run --standalone --nproc-per-node 2 lit_train.py --devices 2 --dir "$T/c1" >"$T/n0.out" 2>&1; rc0=$?
: >"$T/n1.out"; rc1=0
trained "standalone: devices=2, num_nodes=1" 2 1

# 2. c10d, two launchers: devices=1, num_nodes=2
P=$(free_port)
two "X=0" "X=1" --nnodes 2 --nproc-per-node 1 --rdzv-backend c10d --rdzv-endpoint 127.0.0.1:$P --rdzv-id L$P \
  lit_train.py --nodes 2 --dir "$T/c2"
trained "c10d, 2 launchers: devices=1, num_nodes=2" 2 1

# 3. torchrun's static line (no --rdzv-* flag), two launchers
P=$(free_port)
env timeout 150 "$CDDP" run --nnodes 2 --nproc_per_node 1 --master_addr 127.0.0.1 --master_port $P --node_rank 0 \
  lit_train.py --nodes 2 --dir "$T/c3" >"$T/n0.out" 2>&1 & p0=$!
env timeout 150 "$CDDP" run --nnodes 2 --nproc_per_node 1 --master_addr 127.0.0.1 --master_port $P --node_rank 1 \
  lit_train.py --nodes 2 --dir "$T/c3" >"$T/n1.out" 2>&1 & p1=$!
wait $p0; rc0=$?; wait $p1; rc1=$?
trained "static (torchrun's default line), 2 launchers: num_nodes=2" 2 1

# 4. XTuner's variables, two launchers
P=$(free_port)
two "NPROC_PER_NODE=1 NNODES=2 NODE_RANK=0 ADDR=127.0.0.1 PORT=$P" "NPROC_PER_NODE=1 NNODES=2 NODE_RANK=1 ADDR=127.0.0.1 PORT=$P" \
  lit_train.py --nodes 2 --dir "$T/c4"
trained "XTuner's NPROC_PER_NODE NNODES NODE_RANK ADDR PORT: num_nodes=2" 2 1

# 5. rank 1 SIGKILLed at step 2 under --max-restarts 1: every worker restarts and Lightning
# resumes from last.ckpt (step 1 or 2, whichever rank 0 saved before the kill)
timeout 150 "$CDDP" run --standalone --nproc-per-node 2 --max-restarts 1 lit_train.py --devices 2 --dir "$T/c5" \
  --die-at 2 >"$T/n0.out" 2>&1; rc0=$?
n=$(grep -Ec "lightning ok rank [01] of 2 steps [23]-4 resumed=1" "$T/n0.out")
if [ $rc0 = 0 ] && [ "$n" = 2 ] && grep -q "was killed by signal 9 (SIGKILL); restarting the workers (restart 1 of 1)" "$T/n0.out"; then
  ok "a worker SIGKILLed under --max-restarts: restarted, Lightning resumed from its last checkpoint"
else fail "restart + resume" "exit $rc0, $n ranks resumed: $(grep -v '^\[rank [0-9]*\] *$' "$T/n0.out" | tail -4 | tr '\n' ' ')"; fi
finish
