#!/usr/bin/env bash
# test_multi_bench.sh - the issue's "Done when" for several launchers: two `cddp run` agents on
# 127.0.0.1 form one job of 4 ranks whose collectives give exact results (c10d, static, XTuner),
# over shared memory and with TCP forced; a stranger without the token does not disturb the job.
cd "$(dirname "$0")/../.." && source tests/sh/lib.sh
T=$(mktemp -d /tmp/cddp-multi-bench.XXXXXX)
trap 'kill $(jobs -p) 2>/dev/null; wait 2>/dev/null; rm -rf "$T"' EXIT
B=("$CDDP" bench allreduce -b 1K -e 4M -f 16 -c 1)

# two ENV1 ENV2 ARGS...: both agents run ARGS (flags then program); rc1 rc2 set
two() {
  local e1=$1 e2=$2; shift 2
  env $e1 timeout 60 "$CDDP" run "$@" >"$T/a1.out" 2>&1 & local p1=$!
  env $e2 timeout 60 "$CDDP" run "$@" >"$T/a2.out" 2>&1 & local p2=$!
  wait $p1; rc1=$?; wait $p2; rc2=$?
}
verdict() { # NAME [NP]: both agents exited 0 and the NP-rank (default 4) bench is exact
  local v; v=$(bench_verdict "${2:-4}" "$T/a1.out" "$T/a2.out")
  if [ "$rc1" = 0 ] && [ "$rc2" = 0 ] && [ "$v" = clean ]; then ok "$1"; else fail "$1" "rc=$rc1/$rc2 $v"; fi
}

P=$(free_port)
two "X=1" "X=2" --nnodes 2 --nproc-per-node 2 --rdzv-backend c10d --rdzv-endpoint 127.0.0.1:$P --rdzv-id J1 "${B[@]}"
verdict "c10d: 2 launchers x 2 workers, allreduce exact"

P=$(free_port)
two "CDDP_TRANSPORT=tcp" "CDDP_TRANSPORT=tcp" --nnodes 2 --nproc-per-node 2 --rdzv-endpoint 127.0.0.1:$P --rdzv-id J2 "${B[@]}"
verdict "c10d with TCP forced: allreduce exact"
grep -q "transport tcp" "$T/a1.out" "$T/a2.out" && ok "TCP forced is reported" || fail "TCP forced is reported"

P=$(free_port)
# static needs distinct node ranks, so this pair is started by hand
env timeout 60 "$CDDP" run --nnodes 2 --nproc-per-node 2 --rdzv-backend static --node-rank 0 --master-addr 127.0.0.1 --master-port "$P" "${B[@]}" >"$T/a1.out" 2>&1 & p1=$!
env timeout 60 "$CDDP" run --nnodes 2 --nproc-per-node 2 --rdzv-backend static --node-rank 1 --master-addr 127.0.0.1 --master-port "$P" "${B[@]}" >"$T/a2.out" 2>&1 & p2=$!
wait $p1; rc1=$?; wait $p2; rc2=$?
verdict "static --node-rank 0/1: allreduce exact"

P=$(free_port)
two "NPROC_PER_NODE=2 NNODES=2 NODE_RANK=0 ADDR=127.0.0.1 PORT=$P" "NPROC_PER_NODE=2 NNODES=2 NODE_RANK=1 ADDR=127.0.0.1 PORT=$P" "${B[@]}"
verdict "XTuner variables: allreduce exact"

# a stranger with the wrong token knocks on the job's store while it runs: refused, job fine
P=$(free_port)
CDDP_TOKEN=s3cret timeout 60 "$CDDP" run --nnodes 1 --nproc-per-node 2 --rdzv-endpoint 127.0.0.1:$P --rdzv-id J5 \
  "$CDDP" bench allreduce -b 1K -e 16M -f 4 -n 50 -c 1 >"$T/a1.out" 2>&1 & p1=$!
# the stranger comes only once the job's store is up and its bench runs: before, it would host a
# store of its own on the port and the job would be the one refused
wait_for 30 grep -q "(B)" "$T/a1.out" || fail "the job's bench started within 30 s" "$(tail -3 "$T/a1.out" | tr '\n' ' ')"
CDDP_TOKEN=wrong timeout 20 "$CDDP" run --nnodes 2 --nproc-per-node 1 --rdzv-endpoint 127.0.0.1:$P --rdzv-id J5 --rdzv-timeout 5 true >"$T/stranger.out" 2>&1
src=$?
wait $p1; rc1=$?; rc2=0; : >"$T/a2.out"
verdict "a wrong token does not disturb the job" 2
if [ $src -ne 0 ] && grep -q "refused our token" "$T/stranger.out"; then ok "the stranger is refused with one line"
else fail "the stranger is refused with one line" "exit $src: $(cat "$T/stranger.out")"; fi
finish
