# lib_elastic.sh - helpers of the tests that run agents x 1 worker of `cddp run --restart-mode
# replace` on this host (test_elastic_join.sh, test_store_failover.sh). Source after lib.sh, then
# call elastic_setup; `agent` puts its pid in A[I] (killed at exit); reference_run sets $ref.

# elastic_setup NAME: the work folder T (/tmp/NAME.XXXXXX; KEEP=1 keeps it), its cleanup, the
# job (CFG, ONE: 192 = 32 x 2 ranks x 3 = 32 x 3 ranks x 2, so the batch splits over 2 and 3
# ranks) and fast heartbeats
elastic_setup() {
  T=$(mktemp -d "/tmp/$1.XXXXXX")
  bg=()
  trap 'for p in "${bg[@]}"; do kill -CONT "$p" 2>/dev/null; kill -KILL "$p" 2>/dev/null; done; wait 2>/dev/null; [ -n "$KEEP" ] || rm -rf "$T"' EXIT
  CFG=configs/fmnist_mlp.yaml
  ONE=(--set debug.sample_log=true --set train.epochs=1 --set checkpoint.every_steps=1000 --set ddp.threads=1
       --set batch.global=192 --set batch.micro=32 --set 'model.hidden=[256]')
  export CDDP_HEARTBEAT_MS=250 CDDP_HEARTBEAT_TIMEOUT_MS=2000
}
acc_of() { grep '"eval"' "$1" | tail -1 | sed -n 's/.*"accuracy":\([0-9.]*\).*/\1/p'; }
wait_line() { local secs=$1; shift; poll_every=0.02 wait_for "$secs" grep -qs "$@"; } # SECS PATTERN FILE...
RUNX=() # more `cddp run` options
MODE=replace # --restart-mode of the agents started next (replace, all)
# agent NAME I NNODES [--set ...]: starts agent I (pid in A[I], output $T/NAME<I>.out); port in
# $P, the endpoint 127.0.0.1:$P unless EP names another (a member's standby)
agent() {
  "$CDDP" run --nnodes "$3" --nproc-per-node 1 --rdzv-backend c10d --rdzv-endpoint "${EP:-127.0.0.1:$P}" --rdzv-id "$1$P" \
    --rdzv-last-call "$(scaled 1)" --max-restarts 3 --restart-mode "$MODE" "${RUNX[@]}" \
    "$CDDP" train --config $CFG --work-dir "$T" --name "$1" "${ONE[@]}" "${@:4}" >"$T/$1$2.out" 2>&1 &
  A[$2]=$!; bg+=($!)
}
# agents NAME COUNT NNODES [--set ...]: a fresh port P, then agents 1..COUNT of job NAME (the
# others once the first listens on P: it hosts the store)
agents() {
  local name=$1 count=$2 nn=$3 i; shift 3
  P=$(free_port); A=()
  agent "$name" 1 "$nn" "$@"; await "$name: agent 1 hosts the store" 10 port_listening "$P"
  for i in $(seq 2 "$count"); do agent "$name" "$i" "$nn" "$@"; done
}
# progress NAME STEP: until job NAME's metrics reach STEP; else a failure with agent 1's last lines
progress() { wait_step "$T/$1/metrics.jsonl" "$2" || fail "$1: no progress" "$(tail -3 "$T/${1}1.out")"; }
# all_exit0 NAME SECS WHAT PID...: waits for those agents (wait_all), gathers the outputs of
# NAME's agents in $T/NAME.out, and checks that each exited 0 ("NAME: WHAT finish (exit 0)")
all_exit0() {
  local name=$1 secs=$2 what=$3 want; shift 3
  wait_all "$secs" "$@"
  cat "$T/$name"?.out >"$T/$name.out"
  want=$(printf '0 %.0s' "$@")
  [ "${RC[*]}" = "${want% }" ] && ok "$name: $what finish (exit 0)" ||
    fail "$name: exit codes" "${RC[*]}; $(grep -v 'epoch [0-9]*/[0-9]* ' "$T/$name.out" | tail -5 | tr '\n' ' ')"
}
# join_seen NAME WHAT: the agent's and rank 0's lines of agent 2's join (generation 1, world 2 ->
# 3, no step redone) in $T/NAME.out ("NAME: WHAT: ..."); rank 0's line left in $rline
join_seen() {
  local line
  line=$(grep -m1 'cddp run: join node .* (agent 2): generation 1: world 2 -> 3, ranks 0 -> 0, 1 -> 1, new 2' "$T/$1.out")
  rline=$(grep -m1 'cddp train: node .* (agent 2) joined: generation 1, world 2 -> 3, accumulation 3 -> 2 (global batch 192 kept), state from rank 0, no step redone' "$T/$1.out")
  [ -n "$line" ] && [ -n "$rline" ] && ok "$1: $2: ${line#*cddp run: } / ${rline#*cddp train: }" ||
    fail "$1: $2" "$(grep -hE 'join|joined|taken|store' "$T/$1.out" | head -5 | tr '\n' ' ')"
}
worker_of() { pgrep -P "$1" | head -1; }
rank_of() { tr '\0' '\n' <"/proc/$1/environ" 2>/dev/null | sed -n 's/^RANK=//p'; }
# exactly_once NAME [EPOCHS]: every sample of each epoch once across all files of samples/
exactly_once() {
  local e seen uniqs bad=
  for e in $(seq 0 $((${2:-1} - 1))); do
    seen=$(cat "$T/$1"/samples/rank*.txt | awk -v e=$e '$1 == e' | wc -l)
    uniqs=$(cat "$T/$1"/samples/rank*.txt | awk -v e=$e '$1 == e { print $3 }' | sort -u | wc -l)
    [ "$seen" = 59904 ] && [ "$uniqs" = 59904 ] || bad="$bad epoch $e: $seen lines, $uniqs distinct;"
  done
  [ -z "$bad" ] && ok "$1: sample logs ($(ls "$T/$1/samples" | tr '\n' ' ')): each of the ${2:-1} epoch(s)' 59904 samples exactly once" ||
    fail "$1: sample log" "$bad"
}
# steps_once NAME [NOTE [STEPS]]: STEPS (312) step lines in metrics.jsonl, none twice (no step redone)
steps_once() {
  local m=$T/$1/metrics.jsonl steps uniq n=${3:-312}
  steps=$(grep -vc '"eval"' "$m"); uniq=$(grep -v '"eval"' "$m" | sed -n 's/.*"step":\([0-9]*\).*/\1/p' | sort -u | wc -l)
  [ "$steps" = "$n" ] && [ "$uniq" = "$n" ] && ok "$1: $n step lines, none twice${2:+ ($2)}" || fail "$1: steps" "lines=$steps unique=$uniq"
}
acc_near() { # NAME: the accuracy within 0.5 points of the reference
  local acc; acc=$(acc_of "$T/$1/metrics.jsonl")
  if [ -n "$acc" ] && awk -v a="$acc" -v b="$ref" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d <= 0.005) }'; then
    ok "$1: test accuracy $acc vs $ref uninterrupted (within 0.5 points)"
  else fail "$1: accuracy" "$acc vs $ref"; fi
}

# reference_run: the same job uninterrupted (world 2); its accuracy in $ref
reference_run() {
  timeout 120 "$CDDP" run --standalone --nproc-per-node 2 "$CDDP" train --config $CFG --work-dir "$T" --name ref "${ONE[@]}" >"$T/ref.out" 2>&1
  ref=$(acc_of "$T/ref/metrics.jsonl")
  [ -n "$ref" ] && ok "reference run (world 2): test accuracy $ref" || fail "reference run" "$(tail -3 "$T/ref.out")"
}
