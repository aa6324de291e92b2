#!/usr/bin/env bash
# test_run_multi.sh - two launchers on 127.0.0.1 form one job (c10d, static, XTuner's
# variables, restart across agents), and every bad input exits non-zero with one line.
cd "$(dirname "$0")/../.." && source tests/sh/lib.sh
W=$PWD/build/tests/helpers/run_worker
T=$(mktemp -d /tmp/cddp-run-multi.XXXXXX)
bg=()
cleanup() { for p in "${bg[@]}"; do kill "$p" 2>/dev/null; done; wait 2>/dev/null; rm -rf "$T"; }
trap cleanup EXIT

# check_job NAME: both agents exit 0, 4 ranks 0..3 distinct, all see WORLD_SIZE=4, barrier passed
check_job() {
  local name=$1 rc1=$2 rc2=$3
  local ranks world bar
  ranks=$(cat "$T/a1.out" "$T/a2.out" | sed -n 's/^\[rank \([0-9]\)\] rank=\1 world=4 .*/\1/p' | sort | tr -d '\n')
  world=$(cat "$T/a1.out" "$T/a2.out" | grep -c '^\[rank [0-3]\] rank=[0-3] world=4 ')
  bar=$(cat "$T/a1.out" "$T/a2.out" | grep -c 'barrier passed rank=[0-3] world=4')
  if [ "$rc1" = 0 ] && [ "$rc2" = 0 ] && [ "$ranks" = 0123 ] && [ "$world" = 4 ] && [ "$bar" = 4 ]; then ok "$name"
  else fail "$name" "rc=$rc1/$rc2 ranks=$ranks $(cat "$T/a1.out" "$T/a2.out" | head -20)"; fi
}

# two launchers: ENV1 / ENV2 are env assignments, the rest are flags
two() {
  local e1=$1 e2=$2; shift 2
  env $e1 timeout 30 "$CDDP" run "$@" >"$T/a1.out" 2>&1 & local p1=$!
  env $e2 timeout 30 "$CDDP" run "$@" >"$T/a2.out" 2>&1 & local p2=$!
  wait $p1; rc1=$?; wait $p2; rc2=$?
}

P=$(free_port)
two "X=1" "X=2" --nnodes 2 --nproc-per-node 2 --rdzv-backend c10d --rdzv-endpoint 127.0.0.1:$P --rdzv-id J1 "$W" barrier
check_job "c10d: two launchers form one job of 4 ranks" $rc1 $rc2

P=$(free_port)
env timeout 30 "$CDDP" run --nnodes 2 --nproc_per_node 2 --rdzv_backend static --node_rank 1 --master_addr 127.0.0.1 --master_port $P "$W" barrier >"$T/a1.out" 2>&1 & p1=$!
env timeout 30 "$CDDP" run --nnodes 2 --nproc-per-node 2 --rdzv-backend static --node-rank 0 --master-addr 127.0.0.1 --master-port $P "$W" barrier >"$T/a2.out" 2>&1 & p2=$!
wait $p1; rc1=$?; wait $p2; rc2=$?
check_job "static: --node-rank 0 and 1 form one job of 4 ranks" $rc1 $rc2
grep -q '^\[rank 0\] rank=0 world=4 local=0/2 node=0/2' "$T/a2.out" && ok "static: node rank 0 holds ranks 0-1" || fail "static node order"

P=$(free_port)
two "NPROC_PER_NODE=2 NNODES=2 NODE_RANK=0 ADDR=127.0.0.1 PORT=$P" "NPROC_PER_NODE=2 NNODES=2 NODE_RANK=1 ADDR=127.0.0.1 PORT=$P" "$W" barrier
check_job "XTuner variables: two launchers form one job of 4 ranks" $rc1 $rc2

# a failure on one node restarts the workers of both (--max-restarts 1)
P=$(free_port)
two "X=1" "X=2" --nnodes 2 --nproc-per-node 1 --rdzv-endpoint 127.0.0.1:$P --rdzv-id J2 --max-restarts 1 "$W" exit=5@1/0 barrier
n=$(cat "$T/a1.out" "$T/a2.out" | grep -c 'barrier passed rank=[01] world=2')
r=$(cat "$T/a1.out" "$T/a2.out" | grep -c 'restart=1 ')
[ "$rc1" = 0 ] && [ "$rc2" = 0 ] && [ "$n" = 2 ] && [ "$r" = 2 ] && ok "failure on one node restarts both nodes' workers" || fail "multi-node restart" "rc=$rc1/$rc2 $(cat "$T/a1.out" "$T/a2.out")"

# a failure without restarts: both agents exit with the worker's code
P=$(free_port)
two "X=1" "X=2" --nnodes 2 --nproc-per-node 1 --rdzv-endpoint 127.0.0.1:$P --rdzv-id J3 "$W" exit=6@0 sleep=20
[ "$rc1" = 6 ] && [ "$rc2" = 6 ] && [ "$(cat "$T/a1.out" "$T/a2.out" | grep -c 'cddp run: rank 0 (host .*, pid [0-9]*) exited with code 6')" = 2 ] &&
  ok "failure without restarts stops every node with the worker's code" || fail "multi-node failure" "rc=$rc1/$rc2 $(cat "$T/a1.out" "$T/a2.out")"

# ---- bad input: one line naming the problem, non-zero exit, no hang
# bad NAME EXPECT_REGEX CMD...: non-zero exit within the timeout, first stderr line matches
bad() {
  local name=$1 re=$2; shift 2
  local t0 dt
  t0=$(date +%s.%N)
  timeout 20 "$@" >/dev/null 2>"$T/bad.err"
  local rc=$?
  dt=$(echo "$(date +%s.%N) - $t0" | bc)
  if [ $rc != 0 ] && [ $rc != 124 ] && head -1 "$T/bad.err" | grep -Eq "$re"; then ok "bad input: $name (exit $rc, ${dt}s)"
  else fail "bad input: $name" "rc=$rc $(head -3 "$T/bad.err")"; fi
}
bad "NODE_RANK >= NNODES (flags)" "^cddp run: --node-rank 2 is not below --nnodes 2$" \
  "$CDDP" run --rdzv-backend static --nnodes 2 --node-rank 2 true
bad "NODE_RANK >= NNODES (XTuner)" "^cddp run: NODE_RANK=3 is not below NNODES=2$" \
  env NNODES=2 NODE_RANK=3 ADDR=127.0.0.1 PORT=1 "$CDDP" run true
bad "--nproc-per-node 0" "^cddp run: --nproc-per-node must be a positive integer .*got '0'$" "$CDDP" run --nproc-per-node 0 true
bad "--nproc-per-node -1" "got '-1'$" "$CDDP" run --nproc-per-node -1 true
bad "--nproc-per-node garbage" "got 'lots'$" "$CDDP" run --nproc-per-node lots true
bad "malformed node list" "^cddp run: malformed node list 'node\[1-': .* at position [0-9]+$" \
  env SLURM_JOB_ID=5 SLURM_STEP_ID=0 SLURM_PROCID=0 SLURM_LOCALID=0 SLURM_NODEID=0 SLURM_STEP_NUM_NODES=2 \
  SLURM_STEP_NUM_TASKS=2 'SLURM_STEP_NODELIST=node[1-' "$CDDP" run true
bad "unknown flag" "^cddp run: unknown flag '--frobnicate'$" "$CDDP" run --frobnicate true
grep -q '^usage: cddp run' "$T/bad.err" && ok "unknown flag prints the usage" || fail "usage after unknown flag"
bad "missing PROGRAM" "^cddp run: missing PROGRAM" "$CDDP" run --nproc-per-node 2
P=$(free_port)
bad "unreachable endpoint (after --rdzv-timeout, names it)" "^cddp run: cannot reach the rendezvous store at 127.0.0.1:$P .*1.0 s" \
  "$CDDP" run --rdzv-backend static --nnodes 2 --node-rank 1 --master-addr 127.0.0.1 --master-port $P --rdzv-timeout 1 true
P=$(free_port)
python3 -c 'import socket,sys,time;s=socket.socket();s.setsockopt(socket.SOL_SOCKET,socket.SO_REUSEADDR,1);s.bind(("",int(sys.argv[1])));s.listen();time.sleep(15)' $P & bg+=($!)
await "port in use: the holder listens" 5 port_listening "$P"
t0=$(date +%s.%N)
bad "port in use for a store we host (names the port)" "^cddp run: cannot host the store on port $P: " \
  "$CDDP" run --rdzv-backend static --nnodes 2 --node-rank 0 --master-port $P true
[ "$(echo "$(date +%s.%N) - $t0 <= $(scaled 2)" | bc)" = 1 ] && ok "port in use reported within 2 s" || fail "port in use took too long"
# a store that refuses our token: node 0 hosts with one token, node 1 brings another
P=$(free_port)
CDDP_TOKEN=right timeout 20 "$CDDP" run --rdzv-backend static --nnodes 2 --node-rank 0 --master-port $P --rdzv-timeout 3 true >/dev/null 2>&1 & bg+=($!)
bad "the store refuses our token" "^cddp run: the store at 127.0.0.1:$P refused our token" \
  env CDDP_TOKEN=wrong "$CDDP" run --rdzv-backend static --nnodes 2 --node-rank 1 --master-port $P --rdzv-timeout 3 true
# nodes started with different --nnodes: one line on every node naming both values, exit 2, at
# once (c10d: the second node says so and wakes the first through the round; static: through the
# node records; XTuner's NNODES the same way)
disagree() { # NAME SETTING "ARGS of node 0" "ARGS of node 1" [ENV0 ENV1]: both end within 5 s, exit 2, the same line
  local name=$1 what=$2 a0=$3 a1=$4 e0=${5:-X=0} e1=${6:-X=1} t0 rc0 rc1 l0 l1
  t0=$(date +%s.%N)
  env $e0 timeout 20 "$CDDP" run $a0 true >"$T/d0.out" 2>&1 & local p0=$!
  await "$name: node 0 hosts the store" 5 port_listening "$P" # node 1 joins it as a client
  env $e1 timeout 20 "$CDDP" run $a1 true >"$T/d1.out" 2>&1 & local p1=$!
  wait $p0; rc0=$?; wait $p1; rc1=$?
  local dt; dt=$(echo "$(date +%s.%N) - $t0" | bc)
  l0=$(cat "$T/d0.out"); l1=$(cat "$T/d1.out")
  if [ $rc0 = 2 ] && [ $rc1 = 2 ] && [ "$(grep -c . <<<"$l0")" = 1 ] && [ "$(grep -c . <<<"$l1")" = 1 ] &&
     grep -q "^cddp run: the nodes disagree on $what: node .* was started with [^ ]*, node .* with [^ ]*[;,] .*every node" <<<"$l0" &&
     [ "$l0" = "$l1" ] && [ "$(echo "$dt < $(scaled 5)" | bc)" = 1 ]; then
    ok "$name: one line on both nodes, exit 2, in ${dt}s"
  else fail "$name" "exits $rc0/$rc1 after ${dt}s: '$l0' / '$l1'"; fi
}
P=$(free_port)
disagree "c10d, --nnodes 2 vs 3" --nnodes "--nnodes 2 --rdzv-backend c10d --rdzv-endpoint 127.0.0.1:$P --rdzv-id D" \
  "--nnodes 3 --rdzv-backend c10d --rdzv-endpoint 127.0.0.1:$P --rdzv-id D"
P=$(free_port)
disagree "static, --nnodes 3 vs 2" --nnodes "--nnodes 3 --rdzv-backend static --node-rank 0 --master-port $P" \
  "--nnodes 2 --rdzv-backend static --node-rank 1 --master-port $P"
P=$(free_port)
disagree "XTuner's NNODES 2 vs 3" --nnodes "" "" "NNODES=2 NODE_RANK=0 ADDR=127.0.0.1 PORT=$P" "NNODES=3 NODE_RANK=1 ADDR=127.0.0.1 PORT=$P"
# different --rdzv-id at one store: neither job would ever fill; after 2 s both end with one line
P=$(free_port)
disagree "c10d, --rdzv-id A vs B" --rdzv-id "--nnodes 2 --rdzv-backend c10d --rdzv-endpoint 127.0.0.1:$P --rdzv-id A" \
  "--nnodes 2 --rdzv-backend c10d --rdzv-endpoint 127.0.0.1:$P --rdzv-id B"
P=$(free_port)
disagree "static, --rdzv-id A vs B" --rdzv-id "--nnodes 2 --rdzv-backend static --node-rank 0 --master-port $P --rdzv-id A" \
  "--nnodes 2 --rdzv-backend static --node-rank 1 --master-port $P --rdzv-id B"
# another token: the node that brings it is refused, and the node that hosts the store says so too
P=$(free_port)
CDDP_TOKEN=right timeout 20 "$CDDP" run --nnodes 2 --rdzv-endpoint 127.0.0.1:$P --rdzv-id K --rdzv-timeout 4 true \
  >"$T/k0.out" 2>&1 & k0=$!
await "another token: node 0 hosts the store" 5 port_listening "$P" # the stranger must not host it
CDDP_TOKEN=wrong timeout 20 "$CDDP" run --nnodes 2 --rdzv-endpoint 127.0.0.1:$P --rdzv-id K true >"$T/k1.out" 2>&1; rc1=$?
wait_for 4 grep -q "the store refused a node" "$T/k0.out" # the check below names a miss
kill $k0 2>/dev/null; wait $k0 2>/dev/null
if [ $rc1 = 1 ] && [ "$(grep -c . "$T/k1.out")" = 1 ] && grep -q "^cddp run: the store at 127.0.0.1:$P refused our token" "$T/k1.out" &&
   grep -q "^cddp run: the store refused a node at 127.0.0.1:[0-9]*: its job token differs from this node's (CDDP_TOKEN / CDDP_TOKEN_FILE" "$T/k0.out"; then
  ok "another token: refused on its node (exit 1), and said on the node that hosts the store"
else fail "token refused, both sides" "rc=$rc1: '$(cat "$T/k1.out")' / '$(grep -v WARN "$T/k0.out")'"; fi
# different --nproc-per-node: allowed (ranks follow node order), said in one line on every node
P=$(free_port)
timeout 30 "$CDDP" run --nnodes 2 --nproc-per-node 1 --rdzv-endpoint 127.0.0.1:$P --rdzv-id N "$W" barrier >"$T/a1.out" 2>&1 & p1=$!
timeout 30 "$CDDP" run --nnodes 2 --nproc-per-node 2 --rdzv-endpoint 127.0.0.1:$P --rdzv-id N "$W" barrier >"$T/a2.out" 2>&1 & p2=$!
wait $p1; rc1=$?; wait $p2; rc2=$?
n=$(cat "$T/a1.out" "$T/a2.out" | grep -c 'barrier passed rank=[0-2] world=3')
l=$(cat "$T/a1.out" "$T/a2.out" | grep -c "^cddp run: the nodes run different numbers of workers (--nproc-per-node): node .* [12], node .* [12]; allowed")
[ $rc1 = 0 ] && [ $rc2 = 0 ] && [ "$n" = 3 ] && [ "$l" = 2 ] && ok "--nproc-per-node 1 and 2: the job runs (world 3), one line on each node" ||
  fail "different --nproc-per-node" "rc=$rc1/$rc2 n=$n l=$l $(cat "$T/a1.out" "$T/a2.out")"
finish
