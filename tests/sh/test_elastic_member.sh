#!/usr/bin/env bash
# test_elastic_member.sh - cddp run --restart-mode replace when a whole node goes: 3 agents x 1
# worker on this host. (1) an agent SIGKILLed mid-epoch (its worker dies with it): its will
# fires, the two survivors re-form with world 2 at once and finish; exactly-once and accuracy
# hold, one step is redone. (A frozen agent, declared lost and coming back: test_elastic_join.sh
# case c.) (3) below MIN (--nnodes 3:3): every process exits
# non-zero with one line "job stopped: ...".
cd "$(dirname "$0")/../.." && source tests/sh/lib.sh
T=$(mktemp -d /tmp/cddp-member-test.XXXXXX)
bg=()
cleanup() { for p in "${bg[@]}"; do kill -CONT "$p" 2>/dev/null; kill -KILL "$p" 2>/dev/null; done; wait 2>/dev/null; rm -rf "$T"; }
trap cleanup EXIT
CFG=configs/fmnist_mlp.yaml
# 192 = 32 x 3 ranks x 2 = 32 x 2 ranks x 3: the batch splits over 3 and over 2 ranks
ONE=(--set debug.sample_log=true --set train.epochs=1 --set checkpoint.every_steps=1000 --set ddp.threads=1
     --set batch.global=192 --set batch.micro=32 --set 'model.hidden=[256]')

acc_of() { grep '"eval"' "$1" | tail -1 | sed -n 's/.*"accuracy":\([0-9.]*\).*/\1/p'; }
RUNX=() # more `cddp run` options
# agents NAME NNODES: starts 3 agents (pids in A[1..3], outputs $T/NAME<i>.out); the first hosts the store
agents() {
  local name=$1 nn=$2 P; P=$(free_port); A=()
  for i in 1 2 3; do
    "$CDDP" run --nnodes "$nn" --nproc-per-node 1 --rdzv-backend c10d --rdzv-endpoint 127.0.0.1:$P --rdzv-id "$name$P" \
      --rdzv-last-call "$(scaled 1)" --max-restarts 3 --restart-mode replace "${RUNX[@]}" \
      "$CDDP" train --config $CFG --work-dir "$T" --name "$name" "${ONE[@]}" >"$T/$name$i.out" 2>&1 &
    A[$i]=$!; bg+=($!)
    [ $i = 1 ] && await "$name: agent 1 hosts the store" 10 port_listening "$P" # the others then join it
  done
}
worker_of() { pgrep -P "$1" | head -1; } # an agent's worker (its child)
rank_of() { tr '\0' '\n' <"/proc/$1/environ" 2>/dev/null | sed -n 's/^RANK=//p'; }
# exactly_once NAME: every sample of epoch 0 once across all files of samples/
exactly_once() {
  local seen uniqs
  seen=$(cat "$T/$1"/samples/rank*.txt | awk '$1 == 0' | wc -l)
  uniqs=$(cat "$T/$1"/samples/rank*.txt | awk '$1 == 0 { print $3 }' | sort -u | wc -l)
  [ "$seen" = 59904 ] && [ "$uniqs" = 59904 ] && ok "$1: sample logs ($(ls "$T/$1/samples" | tr '\n' ' ')): each of the epoch's 59904 samples exactly once" ||
    fail "$1: sample log" "$seen lines, $uniqs distinct"
}

# reference: the same job uninterrupted (world 3)
timeout 120 "$CDDP" run --standalone --nproc-per-node 3 "$CDDP" train --config $CFG --work-dir "$T" --name ref "${ONE[@]}" >"$T/ref.out" 2>&1
ref=$(acc_of "$T/ref/metrics.jsonl")
[ -n "$ref" ] && ok "reference run (world 3): test accuracy $ref" || fail "reference run" "$(tail -3 "$T/ref.out")"

# (1) the agent of rank 1 (not the store's host) SIGKILLed mid-epoch
agents k 2:3
wait_step "$T/k/metrics.jsonl" 80 || fail "k: no progress" "$(tail -3 "$T/k1.out")"
victim=
for i in 2 3; do w=$(worker_of "${A[$i]}"); [ -n "$w" ] && [ "$(rank_of "$w")" = 1 ] && victim=$i; done
[ -n "$victim" ] || victim=2
before=$(last_step "$T/k/metrics.jsonl"); kt=$(date +%s.%N)
kill -KILL "${A[$victim]}"
surv=(); for i in 1 2 3; do [ $i != "$victim" ] && surv+=("${A[$i]}"); done
wait_all 60 "${surv[@]}"
cat "$T"/k?.out >"$T/k.out"
m=$T/k/metrics.jsonl
[ "${RC[0]}" = 0 ] && [ "${RC[1]}" = 0 ] && ok "k: agent $victim SIGKILLed at step $before: the two survivors finish (exit 0)" ||
  fail "k: survivors' exit codes" "${RC[*]}; $(grep -v 'epoch 1/1' "$T/k.out" | tail -4 | tr '\n' ' ')"
line=$(grep -m1 'cddp run: node .* lost: its connection closed; generation 1: world 3 -> 2' "$T/k.out")
rline=$(grep -m1 'cddp train: recovered from the loss of node' "$T/k.out")
[ -n "$line" ] && echo "$rline" | grep -q "world 3 -> 2 (accumulation 2 -> 3" &&
  ok "k: the agent and rank 0 log the event: ${line#*cddp run: } / ${rline#*cddp train: }" ||
  fail "k: event lines" "$(grep -E 'lost|recovered' "$T/k.out" | tr '\n' ' ')"
redone=$(echo "$rline" | sed -n 's/.* step \([0-9]*\) redone.*/\1/p')
steps=$(grep -vc '"eval"' "$m"); uniq=$(grep -v '"eval"' "$m" | sed -n 's/.*"step":\([0-9]*\).*/\1/p' | sort -u | wc -l)
if [ -n "$redone" ] && [ "$redone" -ge $((before + 1)) ] && [ "$steps" = 312 ] && [ "$uniq" = 312 ]; then
  ok "k: 1 step redone (step $redone; $before logged before the kill); 312 step lines, none twice"
else fail "k: steps" "redone=$redone before=$before lines=$steps unique=$uniq"; fi
read -r first dt < <(grep -v '"eval"' "$m" | sed -n 's/.*"step":\([0-9]*\).*"time":\([0-9.]*\).*/\1 \2/p' |
  awk -v k="$kt" -v s="${redone:-0}" '$1 >= s && $2 > k { printf "%d %.3f\n", $1, $2 - k; exit }')
if [ -n "$dt" ] && awk -v d="$dt" -v b="$(scaled 15)" 'BEGIN { exit !(d < b) }'; then ok "k: kill -> step $first completed in $dt s"
else fail "k: no step after the kill" "first=$first dt=$dt"; fi
exactly_once k
acc=$(acc_of "$m")
if [ -n "$acc" ] && awk -v a="$acc" -v b="$ref" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d <= 0.005) }'; then
  ok "k: test accuracy $acc vs $ref uninterrupted (within 0.5 points)"
else fail "k: accuracy" "$acc vs $ref"; fi

# (3) below MIN: --nnodes 3:3 and one agent killed, nobody joins within --rdzv-timeout 3: every
# process exits non-zero with one line (test_elastic_join.sh d/e: the wait itself)
RUNX=(--rdzv-timeout 3)
agents s 3:3
wait_step "$T/s/metrics.jsonl" 80 || fail "s: no progress" "$(tail -3 "$T/s1.out")"
kill -KILL "${A[3]}"; t0=$(date +%s)
wait_all 40 "${A[1]}" "${A[2]}"; el=$(( $(date +%s) - t0 ))
good=0
for i in 1 2; do
  o=$T/s$i.out
  [ "${RC[i - 1]}" != 0 ] && [ "${RC[i - 1]}" != 137 ] &&
    [ "$(grep -c '^cddp run: job stopped: 2 of at least 3 nodes left after losing .* (agent [0-9]*, its connection closed); no node joined within 3.0 s (--rdzv-timeout)$' "$o")" = 1 ] &&
    [ "$(grep -c '^\[rank [0-9]*\] cddp train: job stopped: 2 of at least 3 nodes left' "$o")" = 1 ] && good=$((good + 1))
done
[ $good = 2 ] && ok "s: below MIN: both survivors and their workers exit non-zero (${RC[*]}) in ${el} s, one line each: $(grep -h '^cddp run: job stopped' "$T/s1.out")" ||
  fail "s: below MIN" "rc=${RC[*]} $(grep -h 'job stopped\|cddp run' "$T"/s?.out | tr '\n' ' ')"
finish
