#!/usr/bin/env bash
# test_elastic_join.sh - scale-up under cddp run --nnodes MIN:MAX --restart-mode replace, agents
# x 1 worker on this host. (a) a 3rd agent started mid-epoch under --nnodes 2:3 is taken in at
# a step boundary: no step redone, the run completes, exactly-once, accuracy of an
# uninterrupted run. (b) a spare: --nnodes 2:2 with 3 agents, the 3rd waits; a member agent
# SIGKILLed -> the spare takes its place in one generation (world kept). (c) freeze/thaw: an
# agent and its worker SIGSTOPped -> dropped; SIGCONT -> the agent comes back as a pending node
# and is taken in again; exactly-once holds across both changes.
cd "$(dirname "$0")/../.." && source tests/sh/lib.sh
T=$(mktemp -d /tmp/cddp-join-test.XXXXXX)
bg=()
cleanup() { for p in "${bg[@]}"; do kill -CONT "$p" 2>/dev/null; kill -KILL "$p" 2>/dev/null; done; wait 2>/dev/null; rm -rf "$T"; }
trap cleanup EXIT
CFG=configs/fmnist_mlp.yaml
# 192 = 32 x 2 ranks x 3 = 32 x 3 ranks x 2: the batch splits over 2 and over 3 ranks
ONE=(--set debug.sample_log=true --set train.epochs=1 --set checkpoint.every_steps=1000 --set ddp.threads=1
     --set batch.global=192 --set batch.micro=32 --set 'model.hidden=[256]')
export CDDP_HEARTBEAT_MS=250 CDDP_HEARTBEAT_TIMEOUT_MS=2000

acc_of() { grep '"eval"' "$1" | tail -1 | sed -n 's/.*"accuracy":\([0-9.]*\).*/\1/p'; }
last_step() { grep -v '"eval"' "$1" 2>/dev/null | tail -1 | sed -n 's/.*"step":\([0-9]*\).*/\1/p'; }
wait_step() { # FILE N: until metrics FILE reaches step N (bounded: 60 s)
  for _ in $(seq 3000); do [ "$(last_step "$1")" -ge "$2" ] 2>/dev/null && return 0; sleep 0.02; done; return 1
}
wait_line() { # SECS PATTERN FILE...: until a line matches (bounded)
  local secs=$1 pat=$2; shift 2
  for _ in $(seq $((secs * 50))); do grep -q "$pat" "$@" 2>/dev/null && return 0; sleep 0.02; done; return 1
}
# agent NAME I NNODES: starts agent I (pid in A[I], output $T/NAME<I>.out); port in $P
agent() {
  "$CDDP" run --nnodes "$3" --nproc-per-node 1 --rdzv-backend c10d --rdzv-endpoint 127.0.0.1:$P --rdzv-id "$1$P" \
    --rdzv-last-call 1 --max-restarts 3 --restart-mode replace \
    "$CDDP" train --config $CFG --work-dir "$T" --name "$1" "${ONE[@]}" >"$T/$1$2.out" 2>&1 &
  A[$2]=$!; bg+=($!)
}
# wait_all SECS PID...: waits for each (killing what is left after SECS); codes in RC[]
wait_all() {
  local secs=$1; shift; local p; RC=()
  ( sleep "$secs"; for p in "$@"; do kill -KILL "$p" 2>/dev/null; done ) & local dog=$!
  for p in "$@"; do wait "$p"; RC+=($?); done
  kill "$dog" 2>/dev/null; wait "$dog" 2>/dev/null
}
worker_of() { pgrep -P "$1" | head -1; }
rank_of() { tr '\0' '\n' <"/proc/$1/environ" 2>/dev/null | sed -n 's/^RANK=//p'; }
# exactly_once NAME: every sample of epoch 0 once across all files of samples/
exactly_once() {
  local seen uniqs
  seen=$(cat "$T/$1"/samples/rank*.txt | awk '$1 == 0' | wc -l)
  uniqs=$(cat "$T/$1"/samples/rank*.txt | awk '$1 == 0 { print $3 }' | sort -u | wc -l)
  [ "$seen" = 59904 ] && [ "$uniqs" = 59904 ] && ok "$1: sample logs ($(ls "$T/$1/samples" | tr '\n' ' ')): each of the epoch's 59904 samples exactly once" ||
    fail "$1: sample log" "$seen lines, $uniqs distinct"
}
# steps_once NAME: 312 step lines in metrics.jsonl, none twice (no step redone)
steps_once() {
  local m=$T/$1/metrics.jsonl steps uniq
  steps=$(grep -vc '"eval"' "$m"); uniq=$(grep -v '"eval"' "$m" | sed -n 's/.*"step":\([0-9]*\).*/\1/p' | sort -u | wc -l)
  [ "$steps" = 312 ] && [ "$uniq" = 312 ] && ok "$1: 312 step lines, none twice${2:+ ($2)}" || fail "$1: steps" "lines=$steps unique=$uniq"
}
acc_near() { # NAME: the accuracy within 0.5 points of the reference
  local acc; acc=$(acc_of "$T/$1/metrics.jsonl")
  if [ -n "$acc" ] && awk -v a="$acc" -v b="$ref" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d <= 0.005) }'; then
    ok "$1: test accuracy $acc vs $ref uninterrupted (within 0.5 points)"
  else fail "$1: accuracy" "$acc vs $ref"; fi
}

# reference: the same job uninterrupted (world 2)
timeout 120 "$CDDP" run --standalone --nproc-per-node 2 "$CDDP" train --config $CFG --work-dir "$T" --name ref "${ONE[@]}" >"$T/ref.out" 2>&1
ref=$(acc_of "$T/ref/metrics.jsonl")
[ -n "$ref" ] && ok "reference run (world 2): test accuracy $ref" || fail "reference run" "$(tail -3 "$T/ref.out")"

case_a() {
  # (a) a node joins mid-epoch: 2 agents under --nnodes 2:3, a 3rd started at step 60
  P=$(free_port); A=()
  agent j 1 2:3; sleep 0.3; agent j 2 2:3
  wait_step "$T/j/metrics.jsonl" 60 || fail "j: no progress" "$(tail -3 "$T/j1.out")"
  local t0; t0=$(date +%s.%N)
  agent j 3 2:3
  wait_all 90 "${A[1]}" "${A[2]}" "${A[3]}"
  cat "$T"/j?.out >"$T/j.out"
  [ "${RC[*]}" = "0 0 0" ] && ok "j: all three agents finish (exit 0)" ||
    fail "j: exit codes" "${RC[*]}; $(grep -v 'epoch 1/1' "$T/j.out" | tail -5 | tr '\n' ' ')"
  local line rline
  line=$(grep -m1 'cddp run: join node .* (agent 2): generation 1: world 2 -> 3, ranks 0 -> 0, 1 -> 1, new 2' "$T/j.out")
  rline=$(grep -m1 'cddp train: node .* (agent 2) joined: generation 1, world 2 -> 3, accumulation 3 -> 2 (global batch 192 kept), state from rank 0, no step redone' "$T/j.out")
  [ -n "$line" ] && [ -n "$rline" ] && ok "j: the agent and rank 0 log the join: ${line#*cddp run: } / ${rline#*cddp train: }" ||
    fail "j: event lines" "$(grep -E 'join|joined|taken' "$T/j.out" | tr '\n' ' ')"
  # join -> first step completed in the new world (the step after the one it re-formed at)
  local at dt
  at=$(echo "$rline" | sed -n 's/.*re-formed at step \([0-9]*\).*/\1/p')
  dt=$(grep -v '"eval"' "$T/j/metrics.jsonl" | sed -n 's/.*"step":\([0-9]*\).*"time":\([0-9.]*\).*/\1 \2/p' |
    awk -v s="$at" -v k="$t0" '$1 == s + 1 { printf "%.2f", $2 - k; exit }')
  [ -n "$dt" ] && ok "j: 3rd agent started -> step $((at + 1)) completed by a world of 3 in $dt s" || fail "j: no step after the join" "at=$at"
  steps_once j "0 redone"
  exactly_once j
  acc_near j
}

case_a
finish
