#!/usr/bin/env bash
# test_slurm.sh - `cddp bench` and `cddp train` on a real local Slurm cluster: srun tasks as ranks, one cddp run agent per node (loopback nodes), namespace hosts over TCP, and a 3-node step whose store follows its first live node when nodes are killed and started again.
# suite: alone (the machine-global local Slurm cluster)
set -u
cd "$(dirname "$0")/../.." || exit 1
. tests/sh/lib.sh
. tests/sh/lib_elastic.sh # wait_line, last_step
SL=tests/cluster/slurm-local.sh
T=${CDDP_SLURM_TEST_TIMEOUT:-120}
export CDDP_SLURM_STATE
CDDP_SLURM_STATE=$(mktemp -d /tmp/cddp-test-slurm.XXXXXX)
# a home of the test's own: the jobs' token files (launcher/slurm_token.h) of agents killed on
# purpose stay there, not in the user's home
export HOME=$CDDP_SLURM_STATE/home
mkdir -p "$HOME"
# our own namespace names: helpers running netns tests at the same time do not collide
export CDDP_NETNS_PREFIX=cddps$$
trap 'timeout 30 "$SL" down >/dev/null 2>&1; rm -rf "$CDDP_SLURM_STATE"' EXIT

# 0. bad input from a step's variables, no cluster needed: one line, non-zero exit, at once
STEP=(SLURM_JOB_ID=77 SLURM_STEP_ID=0 SLURM_PROCID=1 SLURM_LOCALID=1 SLURM_NODEID=0 SLURM_STEP_NUM_NODES=2
      SLURM_STEP_NUM_TASKS=4 SLURM_STEP_TASKS_PER_NODE='2(x2)' SLURM_JOB_NODELIST='node[1-3]')
one_line_error() { # NAME WANT CMD...: exit non-zero within 20 s, exactly one line on the output, naming WANT
  local name=$1 want=$2 out rc; shift 2
  out=$(timeout 20 "$@" 2>&1); rc=$?
  if [ $rc != 0 ] && [ $rc != 124 ] && [ "$(printf '%s\n' "$out" | wc -l)" = 1 ] && printf '%s' "$out" | grep -qF "$want"; then ok "$name"
  else fail "$name" "exit $rc: $(printf '%s' "$out" | head -3 | tr '\n' ' ')"; fi
}
one_line_error bad_unknown_master_host_run "cannot resolve host 'cddp-nohost8' (from SLURM_STEP_NODELIST)" \
  env -u MASTER_ADDR "${STEP[@]}" SLURM_STEP_NODELIST='cddp-nohost[8-9]' "$CDDP" run true
one_line_error bad_unknown_master_host_train "cannot resolve host 'cddp-nohost8' (from SLURM_STEP_NODELIST)" \
  env -u MASTER_ADDR "${STEP[@]}" SLURM_STEP_NODELIST='cddp-nohost[8-9]' "$CDDP" train --launcher slurm --config configs/fmnist_mlp.yaml
one_line_error bad_nodelist_run "malformed node list 'node[1-'" \
  env -u MASTER_ADDR "${STEP[@]}" SLURM_STEP_NODELIST='node[1-' "$CDDP" run true
one_line_error bad_nodelist_train "malformed node list 'node[3-1]'" \
  env -u MASTER_ADDR "${STEP[@]}" SLURM_STEP_NODELIST='node[3-1]' "$CDDP" train --launcher slurm --config configs/fmnist_mlp.yaml
# an agent of a replace-mode step whose store answers on none of the step's nodes (the step's
# first node, then the others in order: docs/store.md, "Under Slurm") names every one of them
P0=$(free_port)
one_line_error store_candidates_none_answer "cannot reach the rendezvous store at 127.0.0.1:$P0, nor through 127.0.0.2, 127.0.0.3 (the step's other nodes)" \
  env -u MASTER_ADDR SLURM_JOB_ID=77 SLURM_STEP_ID=0 SLURM_PROCID=1 SLURM_LOCALID=0 SLURM_NODEID=1 SLURM_STEP_NUM_NODES=3 \
  SLURM_STEP_NUM_TASKS=3 SLURM_STEP_NODELIST='127.0.0.[1-3]' MASTER_PORT=$P0 "$CDDP" run --restart-mode replace --rdzv-timeout 2 true

if ! timeout 900 "$SL" install >"$CDDP_SLURM_STATE/install.log" 2>&1 || ! command -v srun >/dev/null; then
  echo "ok $((t_n + 1)) - test_slurm # SKIP Slurm cannot be installed here: $(tail -1 "$CDDP_SLURM_STATE/install.log")"
  exit 0
fi
if timeout 60 "$SL" up 3 >"$CDDP_SLURM_STATE/up.log" 2>&1; then ok cluster_up
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

# 5. srun -N3 --ntasks-per-node=2: 6 ranks over 3 nodes, one task per rank. 256 does not split
# over 6 ranks: batch.global 384 = micro 64 x 6.
TR6=("${TR[@]}" --set batch.global=384)
trained6() { # NAME LOG RC RUN
  local name=$1 log=$2 rc=$3 run=$W/$4 steps
  steps=$(grep -v '"eval"' "$run/metrics.jsonl" 2>/dev/null | grep -c '"step"')
  if [ "$rc" = 0 ] && grep -q "cddp train: MLP.*; world 6 .*micro 64 x 6 ranks" "$log" && [ "$steps" = 20 ] &&
     grep -q "cddp train: done: 20 steps" "$log"; then ok "$name"
  else fail "$name" "exit $rc, $steps step lines: $(grep -m1 'cddp train' "$log") $(tail -2 "$log" | tr '\n' ' ')"; fi
}
log=$CDDP_SLURM_STATE/train-3x2.log
MASTER_PORT=$(free_port) timeout "$T" "$SL" run srun -N3 --ntasks-per-node=2 \
  "$CDDP" train --launcher slurm --name tasks6 "${TR6[@]}" >"$log" 2>&1
trained6 srun_train_3_nodes_x_2_tasks_world_6 "$log" $? tasks6

# 6. bad input under srun: a batch that does not split over the step's 6 ranks is one line for
# the job (rank 0 says it; every rank exits non-zero), not one per rank
log=$CDDP_SLURM_STATE/bad-split.log
MASTER_PORT=$(free_port) timeout "$T" "$SL" run srun -N3 --ntasks-per-node=2 \
  "$CDDP" train --launcher slurm --name badsplit "${TR[@]}" >"$log" 2>&1
rc=$?
n=$(grep -c "^cddp train: .*batch" "$log")
if [ $rc != 0 ] && [ $rc != 124 ] && [ "$n" = 1 ]; then ok srun_batch_split_impossible_one_line
else fail srun_batch_split_impossible_one_line "exit $rc, $n lines: $(head -3 "$log" | tr '\n' ' ')"; fi
# node names Slurm knows but the resolver does not (loopback nodes, no MASTER_ADDR): every
# task says so at once instead of retrying the store for minutes
log=$CDDP_SLURM_STATE/bad-host.log
t0=$(date +%s)
env -u MASTER_ADDR MASTER_PORT="$(free_port)" timeout "$T" "$SL" run srun -N2 -n4 \
  "$CDDP" train --launcher slurm --name badhost "${TR[@]}" >"$log" 2>&1
rc=$?
n=$(grep -c "cannot resolve host 'node1' (from SLURM_STEP_NODELIST)" "$log")
if [ $rc != 0 ] && [ $rc != 124 ] && [ "$n" -ge 1 ] && [ $(( $(date +%s) - t0 )) -lt 30 ]; then ok srun_unresolvable_master_fails_fast
else fail srun_unresolvable_master_fails_fast "exit $rc after $(( $(date +%s) - t0 )) s: $(head -2 "$log" | tr '\n' ' ')"; fi

# 7. two jobs at once on the same nodes, no MASTER_PORT: each job's store port comes from its
# job and step ids (20000 + (job * 64 + step % 64) % 12768), so they do not collide
PORTSH='echo "PORT $SLURM_JOB_ID $SLURM_STEP_ID $MASTER_PORT"; exec "$@"'
jpids=()
for j in a b; do
  env -u MASTER_PORT timeout "$T" "$SL" run srun -N2 -n4 "$CDDP" run --launcher slurm \
    sh -c "$PORTSH" sh "$CDDP" bench allreduce -b 1K -e 4M -f 4 -c 1 >"$CDDP_SLURM_STATE/job-$j.log" 2>&1 &
  jpids+=($!)
done
wait "${jpids[0]}"; rc_a=$?; wait "${jpids[1]}"; rc_b=$?
pa=$(awk '/^PORT/ { print $2, $3, $4; exit }' "$CDDP_SLURM_STATE/job-a.log")
pb=$(awk '/^PORT/ { print $2, $3, $4; exit }' "$CDDP_SLURM_STATE/job-b.log")
formula() { set -- $1; [ -n "${3:-}" ] && [ "$3" = $((20000 + ($1 * 64 + $2 % 64) % 12768)) ]; }
if [ $rc_a = 0 ] && [ $rc_b = 0 ] && formula "$pa" && formula "$pb" && [ "${pa##* }" != "${pb##* }" ]; then
  ok two_jobs_at_once_ports_from_job_ids
else fail two_jobs_at_once_ports_from_job_ids "exits $rc_a $rc_b, job/step/port: $pa | $pb"; fi
checked two_jobs_at_once_first_4_ranks "$CDDP_SLURM_STATE/job-a.log" 4
checked two_jobs_at_once_second_4_ranks "$CDDP_SLURM_STATE/job-b.log" 4

# 8. sbatch: examples/slurm/train.sbatch (one `cddp run --launcher slurm` agent per node) and
# examples/slurm/train_tasks.sh (one task per rank), waited for (sbatch --wait, bounded)
sbatched() { # NAME OUTFILE RC RUN WORLD: the job completed, its output says so, the run trained
  local name=$1 out=$2 rc=$3 run=$W/$4 world=$5 id state
  id=$(sed -n 's/^Submitted batch job \([0-9]*\).*/\1/p' "$CDDP_SLURM_STATE/$4.submit")
  state=$("$SL" run scontrol show job "$id" 2>/dev/null | grep -o 'JobState=[A-Z]* .*' | head -1)
  if [ "$rc" = 0 ] && grep -q "; world $world " "$out" && grep -q "cddp train: done: 20 steps" "$out" &&
     grep -q "done$" "$out" && [ -s "$run/checkpoints/step-000000020/model.safetensors" ] &&
     { [ -z "$state" ] || printf '%s' "$state" | grep -q "JobState=COMPLETED"; }; then ok "$name"
  else fail "$name" "sbatch exit $rc, job $id ${state%% *}: $(tail -3 "$out" 2>/dev/null | tr '\n' ' ')"; fi
}
XTRA=(--set model.hidden=[32] --set train.max_steps=20 --set eval.every_epoch=false --set batch.micro=64 --set ddp.threads=1)
MASTER_PORT=$(free_port) CDDP=$CDDP WORK_DIR=$W RUN_NAME=sbatch timeout "$T" "$SL" run sbatch --wait -N3 \
  -o "$CDDP_SLURM_STATE/sbatch-%j.out" examples/slurm/train.sbatch --set batch.global=384 "${XTRA[@]}" \
  >"$CDDP_SLURM_STATE/sbatch.submit" 2>&1
rc=$?
sbatched sbatch_agents_3_nodes_x_2 "$(ls "$CDDP_SLURM_STATE"/sbatch-*.out 2>/dev/null | head -1)" $rc sbatch 6
MASTER_PORT=$(free_port) CDDP=$CDDP WORK_DIR=$W RUN_NAME=sbatch_tasks timeout "$T" "$SL" run sbatch --wait -N2 \
  --ntasks-per-node=2 -o "$CDDP_SLURM_STATE/tasks-%j.out" examples/slurm/train_tasks.sh --set batch.global=256 "${XTRA[@]}" \
  >"$CDDP_SLURM_STATE/sbatch_tasks.submit" 2>&1
rc=$?
sbatched sbatch_tasks_2_nodes_x_2 "$(ls "$CDDP_SLURM_STATE"/tasks-*.out 2>/dev/null | head -1)" $rc sbatch_tasks 4

# 8b. torch scripts under Slurm, on the loopback nodes (Debian's python3-torch): one cddp run agent per node, and one
# task per rank; each forms a gloo world over env:// that all-reduces correctly; with agents, the
# workers' MASTER_PORT is the one given, where the agents' store serves their TCPStore too
if /usr/bin/python3 -c 'import torch.distributed' 2>/dev/null; then
  torch_world() { # NAME LOG RC: 4 distinct ranks reported a correct all_reduce
    local n; n=$(grep -o 'allreduce ok rank [0-3] of 4' "$2" | sort -u | wc -l)
    if [ "$3" = 0 ] && [ "$n" = 4 ]; then ok "$1"; else fail "$1" "exit $3, $n of 4 ranks: $(tail -3 "$2" | tr '\n' ' ')"; fi
  }
  log=$CDDP_SLURM_STATE/torch-agents.log; mp=$(free_port)
  MASTER_PORT=$mp CDDP_PYTHON=/usr/bin/python3 timeout "$T" "$SL" run srun -N2 --ntasks-per-node=1 \
    "$CDDP" run --launcher slurm --nproc-per-node 2 "$PWD/tests/torch/allreduce.py" >"$log" 2>&1
  torch_world torch_srun_agent_per_node_4_ranks "$log" $?
  wp=$(grep -o 'MASTER_PORT=[0-9]*' "$log" | sort -u); sp=$(grep -o 'CDDP_STORE=[^ ]*' "$log" | sed 's/.*://' | sort -u)
  if [ "$sp" = "$mp" ] && [ "$wp" = "MASTER_PORT=$mp" ]; then ok "torch_agent_per_node_workers_port_is_the_store_port ($wp, store $sp)"
  else fail torch_agent_per_node_workers_port_is_the_store_port "workers '$wp', store '$sp', MASTER_PORT given $mp"; fi
  log=$CDDP_SLURM_STATE/torch-tasks.log
  MASTER_PORT=$(free_port) CDDP_PYTHON=/usr/bin/python3 timeout "$T" "$SL" run srun -N2 -n4 \
    "$CDDP" run --launcher slurm "$PWD/tests/torch/allreduce.py" >"$log" 2>&1
  torch_world torch_srun_task_per_rank_4_ranks "$log" $?
  [ "$(grep -c 'CDDP_STORE=- ' "$log")" = 4 ] && ok "torch_task_per_rank: no cddp store, rank 0's TCPStore alone on MASTER_PORT" ||
    fail torch_task_per_rank_no_store "$(grep -o 'CDDP_STORE=[^ ]*' "$log" | sort | uniq -c | tr '\n' ' ')"
else
  echo "ok $((t_n += 1)) - test_slurm:torch # SKIP /usr/bin/python3 has no torch"
fi

if timeout 30 "$SL" down >/dev/null 2>&1 && ! "$SL" status | grep -q "pid [0-9]"; then ok cluster_down
else fail cluster_down "daemons still running: $("$SL" status | tr '\n' ' ')"; fi

# 4. two hosts for real: each node in its own network namespace (own address, hostname and
# /etc/hosts naming node1, node2), so the ranks meet over TCP between the namespaces
if ! timeout 60 "$SL" up-netns 3 >"$CDDP_SLURM_STATE/up-netns.log" 2>&1; then
  if grep -qi "operation not permitted" "$CDDP_SLURM_STATE/up-netns.log"; then
    echo "ok $((t_n + 1)) - test_slurm:netns_hosts # SKIP network namespaces are not allowed here"
  else fail netns_up "$(tail -3 "$CDDP_SLURM_STATE/up-netns.log" | tr '\n' ' ')"; fi
  finish
fi
log=$CDDP_SLURM_STATE/srun-netns.log
env -u MASTER_ADDR MASTER_PORT="$(free_port)" timeout "$T" "$SL" run srun -N2 -n4 \
  "$CDDP" bench allreduce -b 1K -e 1M -f 16 -c 1 >"$log" 2>&1
rc=$?
# 2 hosts x 2 ranks: the automatic choice is the hierarchical transport (shm within, tcp across)
if [ $rc -eq 0 ] && grep -q "4 ranks on 2 hosts" "$log" && grep -q "transport hier" "$log"; then ok netns_hosts_tcp
else fail netns_hosts_tcp "exit $rc: $(grep -m1 'cddp bench' "$log") $(tail -2 "$log" | tr '\n' ' ')"; fi
checked netns_hosts_4_ranks "$log" 4
# cddp train across the two hosts: TCP between them, the same bits as 4 ranks over TCP on one
# host (the transport, not the launcher, decides the order of the sums: shm's and hier's differ,
# so the flat tcp transport is asked for; and the tuner is off in both, since the algorithm it
# picks by timing, recursive doubling or the ring, also decides the order)
log=$CDDP_SLURM_STATE/train-netns.log
env -u MASTER_ADDR CDDP_TRANSPORT=tcp CDDP_TUNE=0 MASTER_PORT="$(free_port)" timeout "$T" "$SL" run srun -N2 -n4 \
  "$CDDP" train --launcher slurm --name netns "${TR[@]}" >"$log" 2>&1
rc=$?
if grep -q "; world 4 (tcp)" "$log"; then trained netns_train_tcp_world_4 "$log" $rc netns
else fail netns_train_tcp_world_4 "exit $rc: $(grep -m1 'cddp train' "$log") $(tail -2 "$log" | tr '\n' ' ')"; fi
CDDP_TUNE=0 timeout "$T" "$CDDP" run --standalone --nproc-per-node 4 "$CDDP" train --transport tcp --name tcp1 "${TR[@]}" >"$W/tcp1.log" 2>&1
rc=$?
if [ $rc = 0 ] && [ -s "$W/netns/$w" ] && cmp -s "$W/netns/$w" "$W/tcp1/$w"; then ok netns_train_same_bits_as_one_host_tcp
else fail netns_train_same_bits_as_one_host_tcp "exit $rc: $(cmp "$W/netns/$w" "$W/tcp1/$w" 2>&1)"; fi
# a step on fewer nodes than its job (sbatch -N3, srun -N2 --relative=1: node2, node3): the
# master is the first host of SLURM_STEP_NODELIST (node2), not of the job's list (node1);
# names resolve in the namespace hosts, so no MASTER_ADDR
cat >"$CDDP_SLURM_STATE/step.sh" <<EOF
#!/bin/sh
echo "JOB \$SLURM_JOB_NODELIST"
srun -N2 --relative=1 -n4 "$CDDP" run --launcher slurm sh -c 'echo "MASTER \$SLURM_STEP_NODELIST \$MASTER_ADDR"'
srun -N2 --relative=1 -n4 "$CDDP" train --launcher slurm --name subset $(printf "'%s' " "${TR[@]}")
EOF
env -u MASTER_ADDR -u MASTER_PORT timeout "$T" "$SL" run sbatch --wait -N3 --ntasks-per-node=2 -o "$CDDP_SLURM_STATE/subset.out" \
  "$CDDP_SLURM_STATE/step.sh" >"$CDDP_SLURM_STATE/subset.submit" 2>&1
rc=$?
out=$CDDP_SLURM_STATE/subset.out
if grep -q "^JOB node\[1-3\]" "$out" && [ "$(grep -c "^MASTER node\[2-3\] node2$" "$out")" = 4 ]; then ok step_master_first_host_of_step_not_job
else fail step_master_first_host_of_step_not_job "$(grep "^JOB\|^MASTER" "$out" | sort -u | tr '\n' ' ')"; fi
trained step_subset_train_world_4 "$out" $rc subset

# 4b. the store follows the first live node of the step (docs/store.md, "Failover"): 3 agents,
# --restart-mode replace --nnodes 2:3. Kill -9 node1's agent and worker (the store's host): node2,
# next in the step's node order, takes the store over and the job goes on. Kill node3 too: node2
# alone is below MIN and waits. Then the user starts both agents again into the same job and step
# (srun --jobid --overlap, the step's variables as the killed agents had them): node3's endpoint
# (node1) is dead, so it reaches the store through node2; node1, the step's first node, finds the
# store alive on node2 and joins there instead of hosting a new one. Both are taken in; all exit 0.
F=$CDDP_SLURM_STATE/follow; mkdir -p "$F"
FRUN=(run --launcher slurm --restart-mode replace --nnodes 2:3 --nproc-per-node 1 "$CDDP" train --config configs/fmnist_mlp.yaml
      --work-dir "$W" --name follow --set train.epochs=8 --set checkpoint.every_steps=1000 --set ddp.threads=1
      --set batch.global=192 --set batch.micro=32 --set 'model.hidden=[256]' --set eval.every_epoch=false)
export CDDP_HEARTBEAT_MS=250 CDDP_HEARTBEAT_TIMEOUT_MS=2000
env -u MASTER_ADDR -u MASTER_PORT timeout "$T" "$SL" run srun -N3 --ntasks-per-node=1 \
  sh -c '"$@"; rc=$?; echo "EXIT $(hostname) $rc"' sh "$CDDP" "${FRUN[@]}" >"$F/job.out" 2>&1 &
fjob=$!
fm=$W/follow/metrics.jsonl
host_agent() { # I: host I's agent of the job (AG) and every cddp process of it there (PIDS)
  PIDS=$(ip netns pids "$(tests/cluster/netns.sh name "$1")" | while read -r p; do
    [ "$(tr '\0' '\n' <"/proc/$p/cmdline" 2>/dev/null | head -1)" = "$CDDP" ] && echo "$p"; done)
  AG=$(for p in $PIDS; do [ "$(tr '\0' '\n' <"/proc/$p/cmdline" | sed -n 2p)" = run ] && echo "$p"; done | head -1)
}
thirty() { [ "$(grep -vc '"eval"' "$fm" 2>/dev/null)" -ge 30 ] 2>/dev/null; }
await "follow: 30 steps before the kills" 120 thirty
for i in 1 3; do host_agent $i; tr '\0' '\n' <"/proc/$AG/environ" 2>/dev/null | grep '^SLURM_' >"$F/step$i.env"; done
host_agent 1
kt=$(date +%s.%N)
kill -KILL $PIDS
n2=$(tests/cluster/netns.sh addr 2)
if wait_line 60 "recovered from the loss of node node1" "$F/job.out"; then
  host_agent 3; kill -KILL $PIDS
  wait_line 60 "job below MIN: 1 of at least 2 nodes after losing node3" "$F/job.out" ||
    fail store_follows_step_below_min "$(tail -3 "$F/job.out" | tr '\n' ' ')"
fi
J=$(sed -n 's/^SLURM_JOB_ID=//p' "$F/step1.env")
mapfile -t ov < <(grep -E '^SLURM_(STEP_ID|STEP_NODELIST|STEP_NUM_NODES|STEP_NUM_TASKS|STEP_TASKS_PER_NODE|NODEID|PROCID|LOCALID|JOB_ID|CLUSTER_NAME)=' "$F/step3.env")
# another job's agent on the same port (run id "other"): node2's store is not its job's, so it is
# not taken; the one line names the nodes tried. It is of the same Slurm job (and cluster), so it
# holds the job's token (launcher/slurm_token.h) and gets as far as the run id
env -u MASTER_ADDR -u MASTER_PORT timeout 60 "$SL" run env "${ov[@]}" "$CDDP" run --launcher slurm --restart-mode replace \
  --nnodes 2:3 --rdzv-id other --rdzv-timeout 3 true >"$F/other.out" 2>&1
rc=$?
if [ $rc = 1 ] && [ "$(wc -l <"$F/other.out")" = 1 ] &&
   grep -q "cannot reach the rendezvous store at node1:[0-9]*, nor through node2, node3 (the step's other nodes)" "$F/other.out"; then
  ok store_follows_step_not_another_jobs_store
else fail store_follows_step_not_another_jobs_store "exit $rc: $(head -3 "$F/other.out" | tr '\n' ' ')"; fi
for i in 3 1; do # the step's view of node i again: its node id, the step's node list and counts
  mapfile -t ov < <(grep -E '^SLURM_(STEP_ID|STEP_NODELIST|STEP_NUM_NODES|STEP_NUM_TASKS|STEP_TASKS_PER_NODE|NODEID|PROCID|LOCALID)=' "$F/step$i.env")
  env -u MASTER_ADDR -u MASTER_PORT timeout "$T" "$SL" run srun --jobid="$J" --overlap -N1 -n1 -w node$i env "${ov[@]}" \
    "$CDDP" "${FRUN[@]}" >"$F/again$i.out" 2>&1 &
  again[$i]=$!
done
wait "${again[3]}"; rc3=$?; wait "${again[1]}"; rc1=$?; wait $fjob
took=$(grep -m1 "the store's host (agent [0-9]* at node1:[0-9]*) is lost; agent [0-9]* took the store over at $n2:" "$F/job.out")
regen=$(grep -m1 "node node1 (agent [0-9]*) lost: .*generation 1: world 3 -> 2, ranks 1 -> 0, 2 -> 1" "$F/job.out")
if [ -n "$took" ] && [ -n "$regen" ]; then ok "store_follows_step_next_node: ${took#cddp run: }"
else fail store_follows_step_next_node "$(grep -hE 'store|lost' "$F/job.out" | head -4 | tr '\n' ' ')"; fi
redone=$(grep -m1 -o 'step [0-9]* redone' "$F/job.out" | grep -o '[0-9]*')
dt=$(grep -v '"eval"' "$fm" | sed -n 's/.*"step":\([0-9]*\).*"time":\([0-9.]*\).*/\1 \2/p' |
     awk -v k="$kt" -v s="${redone:-0}" '$1 >= s && $2 > k { printf "%.2f", $2 - k; exit }')
if [ -n "$dt" ] && awk -v d="$dt" -v b="$(scaled 30)" 'BEGIN { exit !(d < b) }'; then ok "store_follows_step_kill_to_step: kill -> step $redone (redone) done in $dt s"
else fail store_follows_step_kill_to_step "dt='$dt' redone='$redone'"; fi
if [ "$rc3" = 0 ] && grep -q "the store's endpoint node1:[0-9]* does not answer: reached the job's store through node2" "$F/again3.out" &&
   grep -q "node node3 (agent [0-9]*) taken into the job" "$F/again3.out"; then ok store_follows_step_late_node_through_next_node
else fail store_follows_step_late_node_through_next_node "exit $rc3: $(grep -v 'epoch ./' "$F/again3.out" | head -4 | tr '\n' ' ')"; fi
if [ "$rc1" = 0 ] && grep -q "node node1 is the step's first node, but the job's store lives on at $n2:[0-9]*: it joins there" "$F/again1.out" &&
   grep -q "node node1 (agent [0-9]*) taken into the job" "$F/again1.out"; then ok store_follows_step_first_node_back_joins
else fail store_follows_step_first_node_back_joins "exit $rc1: $(grep -v 'epoch ./' "$F/again1.out" | head -4 | tr '\n' ' ')"; fi
steps=$(grep -vc '"eval"' "$fm" 2>/dev/null); last=$(last_step "$fm")
if grep -q "^EXIT node2 0$" "$F/job.out" && grep -q "cddp train: done: 2496 steps" "$F"/*.out && [ "$last" = 2496 ] &&
   "$CDDP" ckpt verify "$W/follow/checkpoints" >/dev/null 2>&1; then ok "store_follows_step_job_finishes: node2 exit 0, 2496 steps ($steps step lines), checkpoint verified"
else fail store_follows_step_job_finishes "last step $last, $(grep '^EXIT' "$F/job.out" | tr '\n' ' ')"; fi
unset CDDP_HEARTBEAT_MS CDDP_HEARTBEAT_TIMEOUT_MS

if timeout 30 "$SL" down >/dev/null 2>&1 && ! ip netns list | grep -q "^$CDDP_NETNS_PREFIX-"; then ok netns_down
else fail netns_down "namespaces left: $(ip netns list | tr '\n' ' ')"; fi
finish
