#!/usr/bin/env bash
# test_hier.sh - 3 namespace hosts x 2 ranks: the hierarchical transport is chosen, `cddp bench
# allreduce -c 1` is exact for every dtype and op, and `cddp train` follows the flat TCP run.
cd "$(dirname "$0")/../.." && source tests/sh/lib.sh
T=$(mktemp -d /tmp/cddp-hier.XXXXXX)
export CDDP_NETNS_PREFIX=cddphier CDDP_NETNS_SUBNET=10.84.0 CDDP_NETNS_STATE=$T/netns
NS=tests/cluster/netns.sh
cleanup() { "$NS" down >/dev/null 2>&1; rm -rf "$T"; }
trap cleanup EXIT

if ! "$NS" up 3 >"$T/up.log" 2>&1; then
  if grep -qi "operation not permitted" "$T/up.log"; then
    echo "ok 1 - test_hier:netns_hosts # SKIP network namespaces are not allowed here"; exit 0
  fi
  fail netns_up "$(tail -3 "$T/up.log" | tr '\n' ' ')"; finish
fi
MASTER=$("$NS" addr 1)

# job NAME [VAR=VALUE...] -- CMD...: one `cddp run` agent per host (2 ranks each), c10d
# rendezvous on host 1; output in $T/NAME.<host>; rc = the first non-zero agent exit
job() {
  local name=$1; shift
  local envs=()
  while [ "$1" != -- ]; do envs+=("$1"); shift; done
  shift
  local port pids=() i r
  port=$(free_port)
  for i in 1 2 3; do
    "$NS" exec $i env "${envs[@]}" timeout 40 "$CDDP" run --nnodes 3 --nproc-per-node 2 --rdzv-backend c10d \
      --rdzv-endpoint "$MASTER:$port" --rdzv-id "$name" "$@" >"$T/$name.$i" 2>&1 & pids+=($!)
  done
  rc=0
  for i in "${pids[@]}"; do wait "$i"; r=$?; [ $rc != 0 ] || rc=$r; done
}

# bench NAME TRANSPORT BENCH-ARGS...: exact results on all 6 ranks and the header names TRANSPORT
bench() {
  local name=$1 tp=$2 v; shift 2
  job "$name" CDDP_DEBUG=INFO CDDP_DEBUG_SUBSYS=COMM ${SEG:+CDDP_HIER_SEGMENT_BYTES=$SEG} -- \
    "$CDDP" bench allreduce -c 1 -n 2 "$@"
  v=$(bench_verdict 6 "$T/$name".[123]) # rank 0 is on whichever host c10d made node 0
  if [ $rc = 0 ] && [ "$v" = clean ] && cat "$T/$name".[123] | grep -q "6 ranks .*, transport $tp,"; then ok "$name"
  else fail "$name" "exit $rc, $v, $(cat "$T/$name".[123] | grep -m1 '# cddp bench')"; fi
}
bench hier_float_sum hier -b 4 -e 4M -f 8 -d float -o sum
# 64 KiB segments: the pipelined path (15 segments at 2 MiB) with every host's helper thread
SEG=65536 bench hier_double_avg_pipelined hier -b 8 -e 2M -f 8 -d double -o avg
bench hier_bf16_max hier -b 2 -e 1M -f 8 -d bfloat16 -o max
bench hier_f16_avg hier -b 2 -e 1M -f 8 -d half -o avg
bench hier_int32_min hier -b 4 -e 1M -f 8 -d int32 -o min
bench hier_int64_avg hier -b 8 -e 1M -f 8 -d int64 -o avg
# an odd element count above the latency threshold: the slices plus a left-over element
bench hier_float_odd_count hier -b 262156 -e 262156 -d float -o sum
bench hier_ring_forced hier -b 4 -e 64K -f 16 -d float -o avg --algo ring
# every rank logs its place: local rank l of host x talks to local rank l elsewhere
n=$(cat "$T"/hier_float_sum.* | grep -c "hier: rank [0-5] is local rank [01] of 2 on host [012] of 3")
if [ "$n" = 6 ]; then ok "six ranks log their host and local rank"; else fail "hier log lines" "$n of 6"; fi
bench flat_when_asked tcp -b 4 -e 64K -f 16 -d float -o sum --transport tcp
# (CDDP_TRANSPORT=tcp, the knob form, is the flat train run below)

# uneven hosts (2 + 2 + 1 ranks): the flat ring, and an INFO line saying why
port=$(free_port) pids=()
for i in 1 2 3; do
  "$NS" exec $i env CDDP_DEBUG=INFO CDDP_DEBUG_SUBSYS=COMM timeout 40 "$CDDP" run --nnodes 3 \
    --nproc-per-node $(( i < 3 ? 2 : 1 )) --rdzv-backend c10d --rdzv-endpoint "$MASTER:$port" --rdzv-id uneven \
    "$CDDP" bench allreduce -c 1 -n 2 -b 1K -e 1M -f 32 >"$T/uneven.$i" 2>&1 & pids+=($!)
done
rc=0
for p in "${pids[@]}"; do wait "$p" || rc=$?; done
n=$(cat "$T"/uneven.[123] | grep -c "hierarchical collectives not used (hosts run different numbers of ranks): flat tcp over 3 hosts")
if [ $rc = 0 ] && [ "$(bench_verdict 5 "$T"/uneven.[123])" = clean ] && [ "$n" = 5 ] &&
   cat "$T"/uneven.[123] | grep -q "5 ranks .*, transport tcp,"; then ok "uneven hosts (2+2+1): flat tcp, said at INFO by every rank"
else fail "uneven hosts" "exit $rc, $n INFO lines, $(bench_verdict 5 "$T"/uneven.[123])"; fi

# the MLP for 30 steps, hierarchical vs flat TCP: the same losses up to float rounding
TR=(--config configs/fmnist_mlp.yaml --work-dir "$T/runs" --set model.hidden=[64] --set train.max_steps=30
    --set eval.every_epoch=false --set batch.global=384 --set batch.micro=64 --set ddp.threads=1)
job train_hier -- "$CDDP" train --name hier "${TR[@]}"
rc_h=$rc
job train_flat CDDP_TRANSPORT=tcp -- "$CDDP" train --name flat "${TR[@]}"
rc_f=$rc
losses() { grep -v '"eval"' "$T/runs/$1/metrics.jsonl" 2>/dev/null | sed -n 's/.*"loss":\([-0-9.e+]*\).*/\1/p'; }
if [ $rc_h = 0 ] && cat "$T"/train_hier.[123] | grep -q "world 6 (hier)" && [ $rc_f = 0 ] &&
   cat "$T"/train_flat.[123] | grep -q "world 6 (tcp)"; then
  ok "train: 30 steps on 3 hosts x 2 ranks, hier and flat tcp"
else fail "train runs" "exit $rc_h/$rc_f: $(cat "$T"/train_hier.[123] "$T"/train_flat.[123] | grep 'cddp train' | tail -3 | tr '\n' ' ')"; fi
cmp=$(paste <(losses hier) <(losses flat) | awk '
  NF == 2 { n++; d = $1 - $2; if (d < 0) d = -d; r = d / ($2 < 0 ? -$2 : $2); if (r > m) m = r }
  END { printf "%d %.3g", n, m + 0 }')
steps=${cmp% *} rel=${cmp#* }
echo "# train: $steps steps compared, largest relative loss difference hier vs flat tcp: $rel"
if [ "$steps" = 30 ] && awk -v r="$rel" 'BEGIN { exit !(r <= 1e-4) }'; then ok "train: hier losses equal flat tcp's within 1e-4 relative ($rel)"
else fail "train: hier vs flat losses" "$steps steps, largest relative difference $rel"; fi
finish
