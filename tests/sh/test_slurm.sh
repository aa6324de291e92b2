#!/usr/bin/env bash
# test_slurm.sh - `cddp bench` and `cddp train` on a real local Slurm cluster: srun tasks as ranks, one cddp run agent per node (loopback nodes), and two namespace hosts over TCP.
set -u
cd "$(dirname "$0")/../.." || exit 1
. tests/sh/lib.sh
SL=tests/cluster/slurm-local.sh
T=${CDDP_SLURM_TEST_TIMEOUT:-120}
export CDDP_SLURM_STATE
CDDP_SLURM_STATE=$(mktemp -d /tmp/cddp-test-slurm.XXXXXX)
trap 'timeout 30 "$SL" down >/dev/null 2>&1; rm -rf "$CDDP_SLURM_STATE"' EXIT

if ! timeout 900 "$SL" install >"$CDDP_SLURM_STATE/install.log" 2>&1 || ! command -v srun >/dev/null; then
  echo "ok 1 - test_slurm # SKIP Slurm cannot be installed here: $(tail -1 "$CDDP_SLURM_STATE/install.log")"
  exit 0
fi
if timeout 60 "$SL" up 2 >"$CDDP_SLURM_STATE/up.log" 2>&1; then ok cluster_up
else fail cluster_up "$(tail -3 "$CDDP_SLURM_STATE/up.log" | tr '\n' ' ')"; finish; fi

# Loopback node names (node1, node2) resolve nowhere, and must not be looked up through DNS:
# MASTER_ADDR overrides the first host of the step.
export MASTER_ADDR=127.0.0.1

# rows of a bench log (any "[rank N]" prefix removed): "checked NAME LOG RANKS"
checked() {
  local name=$1 log=$2 ranks=$3 rows wrong
  rows=$(sed -E 's/^\[[^]]*\] ?//' "$log" | awk '$1 ~ /^[0-9]+$/ && NF >= 9' | wc -l)
  wrong=$(sed -E 's/^\[[^]]*\] ?//' "$log" | awk '$1 ~ /^[0-9]+$/ && NF >= 9 { w += $9 } END { print w + 0 }')
  if [ "$rows" -gt 0 ] && [ "$wrong" = 0 ] && grep -q "Out of bounds values : 0 OK" "$log" &&
     grep -q ": $ranks ranks" "$log"; then ok "$name"
  else fail "$name" "$rows rows, $wrong wrong"; sed 's/^/# /' "$log" | tail -15; fi
}

# 1. every srun task is a rank: SLURM_PROCID / SLURM_NTASKS / SLURM_STEP_NODELIST
log=$CDDP_SLURM_STATE/srun-tasks.log
MASTER_PORT=$(free_port) timeout "$T" "$SL" run srun -N2 -n4 "$CDDP" bench allreduce -b 1K -e 1M -f 4 -c 1 >"$log" 2>&1
rc=$?
if [ $rc -eq 0 ]; then ok srun_tasks_exit; else fail srun_tasks_exit "exit $rc: $(tail -2 "$log" | tr '\n' ' ')"; fi
checked srun_tasks_4_ranks "$log" 4

# 2. one cddp run agent per node (--launcher slurm), each starting 2 workers
log=$CDDP_SLURM_STATE/srun-agents.log
MASTER_PORT=$(free_port) timeout "$T" "$SL" run srun -N2 --ntasks-per-node=1 \
  "$CDDP" run --launcher slurm --nproc-per-node 2 "$CDDP" bench allreduce -b 1K -e 1M -f 4 -c 1 >"$log" 2>&1
rc=$?
if [ $rc -eq 0 ]; then ok srun_agents_exit; else fail srun_agents_exit "exit $rc: $(tail -2 "$log" | tr '\n' ' ')"; fi
checked srun_agents_4_ranks "$log" 4

# 3. cddp train, 4 ranks over 2 nodes, both ways. Every rank must see the same run folder
# (rank 0 writes it): an absolute path on the file system all the nodes share.
W=$CDDP_SLURM_STATE/runs
TR=(--config configs/fmnist_mlp.yaml --work-dir "$W" --set model.hidden=[32] --set train.max_steps=20
    --set eval.every_epoch=false --set batch.global=256 --set batch.micro=64 --set ddp.threads=1)
trained() { # NAME LOG RC RUN: exit 0, rank 0 says world 4 and finished, 20 step lines, a verified checkpoint
  local name=$1 log=$2 rc=$3 run=$W/$4 steps
  steps=$(grep -v '"eval"' "$run/metrics.jsonl" 2>/dev/null | grep -c '"step"')
  if [ "$rc" = 0 ] && grep -q "cddp train: MLP.*; world 4 .*micro 64 x 4 ranks" "$log" && [ "$steps" = 20 ] &&
     grep -q "cddp train: done: 20 steps" "$log" && "$CDDP" ckpt verify "$run/checkpoints" >/dev/null 2>&1; then ok "$name"
  else fail "$name" "exit $rc, $steps step lines: $(tail -3 "$log" | tr '\n' ' ')"; fi
}
log=$CDDP_SLURM_STATE/train-tasks.log
MASTER_PORT=$(free_port) timeout "$T" "$SL" run srun -N2 -n4 "$CDDP" train --launcher slurm --name tasks "${TR[@]}" >"$log" 2>&1
trained srun_train_tasks_world_4 "$log" $? tasks
log=$CDDP_SLURM_STATE/train-agents.log
MASTER_PORT=$(free_port) timeout "$T" "$SL" run srun -N2 --ntasks-per-node=1 \
  "$CDDP" run --launcher slurm --nproc-per-node 2 "$CDDP" train --name agents "${TR[@]}" >"$log" 2>&1
trained srun_train_agents_world_4 "$log" $? agents
w=checkpoints/step-000000020/model.safetensors
if [ -s "$W/tasks/$w" ] && cmp -s "$W/tasks/$w" "$W/agents/$w"; then ok srun_train_tasks_and_agents_same_bits
else fail srun_train_tasks_and_agents_same_bits "$(cmp "$W/tasks/$w" "$W/agents/$w" 2>&1)"; fi

if timeout 30 "$SL" down >/dev/null 2>&1 && ! "$SL" status | grep -q "pid [0-9]"; then ok cluster_down
else fail cluster_down "daemons still running: $("$SL" status | tr '\n' ' ')"; fi

# 4. two hosts for real: each node in its own network namespace (own address, hostname and
# /etc/hosts naming node1, node2), so the ranks meet over TCP between the namespaces
if ! timeout 60 "$SL" up-netns 2 >"$CDDP_SLURM_STATE/up-netns.log" 2>&1; then
  if grep -qi "operation not permitted" "$CDDP_SLURM_STATE/up-netns.log"; then
    echo "ok $((t_n + 1)) - test_slurm:netns_hosts # SKIP network namespaces are not allowed here"
  else fail netns_up "$(tail -3 "$CDDP_SLURM_STATE/up-netns.log" | tr '\n' ' ')"; fi
  finish
fi
log=$CDDP_SLURM_STATE/srun-netns.log
env -u MASTER_ADDR MASTER_PORT="$(free_port)" timeout "$T" "$SL" run srun -N2 -n4 \
  "$CDDP" bench allreduce -b 1K -e 1M -f 16 -c 1 >"$log" 2>&1
rc=$?
if [ $rc -eq 0 ] && grep -q "4 ranks on 2 hosts" "$log" && grep -q "transport tcp" "$log"; then ok netns_hosts_tcp
else fail netns_hosts_tcp "exit $rc: $(grep -m1 'cddp bench' "$log") $(tail -2 "$log" | tr '\n' ' ')"; fi
checked netns_hosts_4_ranks "$log" 4
# cddp train across the two hosts: TCP between them, the same bits as 4 ranks over TCP on one
# host (the transport, not the launcher, decides the order of the sums: shm's differs)
log=$CDDP_SLURM_STATE/train-netns.log
env -u MASTER_ADDR MASTER_PORT="$(free_port)" timeout "$T" "$SL" run srun -N2 -n4 \
  "$CDDP" train --launcher slurm --name netns "${TR[@]}" >"$log" 2>&1
rc=$?
if grep -q "; world 4 (tcp)" "$log"; then trained netns_train_tcp_world_4 "$log" $rc netns
else fail netns_train_tcp_world_4 "exit $rc: $(grep -m1 'cddp train' "$log") $(tail -2 "$log" | tr '\n' ' ')"; fi
timeout "$T" "$CDDP" run --standalone --nproc-per-node 4 "$CDDP" train --transport tcp --name tcp1 "${TR[@]}" >"$W/tcp1.log" 2>&1
rc=$?
if [ $rc = 0 ] && [ -s "$W/netns/$w" ] && cmp -s "$W/netns/$w" "$W/tcp1/$w"; then ok netns_train_same_bits_as_one_host_tcp
else fail netns_train_same_bits_as_one_host_tcp "exit $rc: $(cmp "$W/netns/$w" "$W/tcp1/$w" 2>&1)"; fi
if timeout 30 "$SL" down >/dev/null 2>&1 && ! ip netns list | grep -q "^cddp-h"; then ok netns_down
else fail netns_down "namespaces left: $(ip netns list | tr '\n' ' ')"; fi
finish
