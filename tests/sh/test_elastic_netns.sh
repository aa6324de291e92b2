#!/usr/bin/env bash
# test_elastic_netns.sh - a namespace host cut off mid-epoch: 3 hosts x 1 worker, `cddp run
# --nnodes 2:3 --restart-mode replace` on each, the store on host 1. (cut) host 3's cable pulled
# (netns.sh linkdown): the other two declare it lost by its heartbeat, re-form with world 2 and
# finish; exactly-once and accuracy hold; host 3's processes end with one line each. (part) the
# same with host 3 partitioned from hosts 1 and 2 (nftables drops). (rejoin) the link restored:
# host 3 joins again (skipped until scale-up is on the branch). (storekill) host 1, the store's
# host, kill -9'd whole: host 2 takes the store over, hosts 2 and 3 finish. (storecut) host 1's
# cable pulled: taken over after its lease; host 1 stops by itself (docs/store.md, "Failover").
# (flap) host 1's cable pulled for 1, 3 and 8 s, then plugged back (`flap:S,...` for others;
# tests/cluster/flap_table.sh runs the whole table): the job completes, every step and sample
# once, and host 1's workers are gone when anyone takes the store over (docs/store.md, "A link
# flap"). Prints cut -> detection and cut -> the survivors' next completed step.
cd "$(dirname "$0")/../.." && source tests/sh/lib.sh
NS=tests/cluster/netns.sh
T=$(mktemp -d /tmp/cddp-elastic-netns.XXXXXX)
bg=()
cleanup() {
  local p
  for p in "${bg[@]}"; do kill -KILL "$p" 2>/dev/null; done
  wait 2>/dev/null
  netns_down
  [ -n "${CDDP_TEST_KEEP:-}" ] || rm -rf "$T"
}
trap cleanup EXIT

netns_up 3 "$T" e 77

ONLY=${1:-all} # cut | part | rejoin | storekill | storecut: that case alone
CFG=configs/fmnist_mlp.yaml
# 192 = 32 x 3 ranks x 2 = 32 x 2 ranks x 3: the batch splits over 3 and over 2 ranks; 312 steps
ONE=(--set debug.sample_log=true --set checkpoint.every_steps=1000 --set ddp.threads=1
     --set batch.global=192 --set batch.micro=32 --set 'model.hidden=[256]')
# --rdzv-last-call 5 (scaled): round 0 closes as host 3 joins; a host that starts late on a loaded
# machine must not miss it (it would be taken in later, so the case would cut off a host whose
# worker is not in the world yet). --rdzv-timeout 10: how long a cut-off node may try to come back. --grace-period 1: a cut-off host's workers, stuck in a collective with peers they cannot
# reach, ignore SIGTERM; they are killed 2 s after their agent knows it is cut off (default 5 + 5 s)
TRAIN=("${ONE[@]}" --set train.epochs=1) RUNX=(--grace-period 1) STEPS=312 BATCH=192

acc_of() { grep '"eval"' "$1" 2>/dev/null | tail -1 | sed -n 's/.*"accuracy":\([0-9.]*\).*/\1/p'; }
since() { awk -v a="$1" -v b="$(date +%s.%N)" 'BEGIN { printf "%.2f", b - a }'; }
# store_up PID: PID, host 1's agent once `ip netns exec` has become it, listens on 29500 there
store_up() { [ /proc/$1/exe -ef "$CDDP" ] && port_listening 29500 "$1"; }
# hosts NAME: one agent per host (pids in A[1..3], outputs $T/NAME<i>.out); host 1 holds the
# store and starts first, so its agent (and worker: rank 0, the metrics writer) comes first
# (the trainer's flags: TRAIN; more `cddp run` flags: RUNX)
hosts() {
  local name=$1 ep; ep=$("$NS" addr 1):29500; A=()
  for i in 1 2 3; do
    "$NS" exec $i "$CDDP" run --nnodes 2:3 --nproc-per-node 1 --rdzv-backend c10d --rdzv-endpoint "$ep" \
      --rdzv-id "$name" --rdzv-last-call "$(scaled 5)" --rdzv-timeout 10 --max-restarts 3 --restart-mode replace "${RUNX[@]}" \
      "$CDDP" train --config $CFG --work-dir "$T" --name "$name" "${TRAIN[@]}" >"$T/$name$i.out" 2>&1 &
    A[$i]=$!; bg+=($!)
    [ $i = 1 ] && await "$name: host 1 hosts the store" 10 store_up "${A[1]}"
  done
}
# the exactly-once verdict: lib.sh's samples_verdict when this tree has it, else counting epoch 0
samples() {
  if declare -F samples_verdict >/dev/null; then samples_verdict "$T/$1" $STEPS $BATCH; return; fi
  local n u
  n=$(cat "$T/$1"/samples/rank*.txt | wc -l)
  u=$(cat "$T/$1"/samples/rank*.txt | awk '{ print $1, $3 }' | sort -u | wc -l)
  [ "$n" = $((STEPS * BATCH)) ] && [ "$u" = "$n" ] && echo clean || echo "$n sample lines, $u distinct"
}

# reference: the same job uninterrupted, world 3 on host 1
# reference NAME: the same job uninterrupted, world 3 on host 1; its accuracy in $ref
reference() {
  timeout 120 "$NS" exec 1 "$CDDP" run --standalone --nproc-per-node 3 "$CDDP" train --config $CFG --work-dir "$T" \
    --name "$1" "${TRAIN[@]}" >"$T/$1.out" 2>&1
  ref=$(acc_of "$T/$1/metrics.jsonl")
  [ -n "$ref" ] && ok "$1: reference run (world 3, $STEPS steps): test accuracy $ref" || fail "$1: reference run" "$(tail -3 "$T/$1.out")"
}
want() { [ "$ONLY" = all ] || [ "$ONLY" = "$1" ]; }
want cut || want part || want storekill || want storecut && reference ref

# after_fault NAME T0 WHAT BOUND RLINE: the checks after a fault at wall clock T0: the survivors'
# recovery line (pattern RLINE) and the redone step completed within BOUND s (in DT), every step
# line once, every sample once, the accuracy of the uninterrupted reference
after_fault() {
  local name=$1 t0=$2 what=$3 bound=$4 m=$T/$1/metrics.jsonl rline redone first dt
  rline=$(grep -h -m1 "$5" "$T/$name.out")
  redone=$(echo "$rline" | sed -n 's/.* step \([0-9]*\) redone.*/\1/p')
  read -r first dt < <(grep -v '"eval"' "$m" | sed -n 's/.*"step":\([0-9]*\).*"time":\([0-9.]*\).*/\1 \2/p' |
    awk -v k="$t0" -v s="${redone:-0}" '$1 >= s && $2 > k { printf "%d %.2f\n", $1, $2 - k; exit }')
  DT=$dt
  if [ -n "$rline" ] && [ -n "$dt" ] && awk -v d="$dt" -v b="$(scaled "$bound")" 'BEGIN { exit !(d <= b) }'; then
    ok "$name: $what -> step $first completed by world 2 in $dt s (<= $bound s): ${rline#*cddp train: }"
  else fail "$name: $what -> next step" "first=$first dt=$dt; $(grep -h 'recovered\|lost' "$T/$name.out" | tr '\n' ' '); kept in $(keep_failed elastic-netns "$T/$name"*.out "$m")"; fi
  local steps uniq
  steps=$(grep -vc '"eval"' "$m"); uniq=$(grep -v '"eval"' "$m" | sed -n 's/.*"step":\([0-9]*\).*/\1/p' | sort -u | wc -l)
  [ "$steps" = $STEPS ] && [ "$uniq" = $STEPS ] && ok "$name: $STEPS step lines, none twice (step $redone redone)" ||
    fail "$name: steps" "lines=$steps unique=$uniq redone=$redone"
  local v; v=$(samples "$name")
  [ "$v" = clean ] && ok "$name: every sample of the epoch exactly once ($(ls "$T/$name/samples" | tr '\n' ' '))" ||
    fail "$name: samples" "$v"
  local acc; acc=$(acc_of "$m")
  if [ -n "$acc" ] && [ -n "$ref" ] && awk -v a="$acc" -v b="$ref" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d <= 0.005) }'; then
    ok "$name: test accuracy $acc vs $ref uninterrupted (within 0.5 points)"
  else fail "$name: accuracy" "$acc vs $ref"; fi
}

# cut_case NAME HOW: host 3 cut off at step ~80 by HOW (linkdown | partition); the checks
cut_case() {
  local name=$1 how=$2 m=$T/$1/metrics.jsonl
  hosts "$name"
  wait_step "$m" 80 || fail "$name: no progress" "$(tail -3 "$T/${name}1.out" | tr '\n' ' ')"
  local before; before=$(last_step "$m")
  local t0; t0=$(date +%s.%N)
  if [ "$how" = linkdown ]; then "$NS" linkdown 3; else "$NS" partition 1,2 3; fi
  local det='' line
  # the agent's line: "node H (agent A) lost: no heartbeat for N ms; ..." (or "... (agent A, no heartbeat for N ms) lost; ...")
  local lost='lost: no heartbeat for\|no heartbeat for [0-9]* ms) lost'
  poll_every=0.02 wait_for 10 grep -q "$lost" "$T/${name}1.out" "$T/${name}2.out" && det=$(since "$t0")
  line=$(grep -h -m1 "$lost" "$T/${name}1.out" "$T/${name}2.out")
  wait_all 60 "${A[1]}" "${A[2]}"
  local r1=${RC[0]} r2=${RC[1]} t_surv; t_surv=$(since "$t0")
  # host 3 cannot hear anything any more: it must end on its own, each process with one line
  wait_all 60 "${A[3]}"
  local r3=${RC[0]} t3; t3=$(since "$t0")
  cat "$T/$name"?.out >"$T/$name.out"
  [ "$r1" = 0 ] && [ "$r2" = 0 ] && ok "$name: host 3 cut ($how) at step $before: hosts 1 and 2 finish (exit 0) $t_surv s later" ||
    fail "$name: survivors' exit codes" "$r1 $r2; $(grep -hv 'epoch 1/1' "$T/${name}1.out" "$T/${name}2.out" | tail -4 | tr '\n' ' ')"
  if [ -n "$det" ] && awk -v d="$det" -v b="$(scaled 5)" 'BEGIN { exit !(d < b) }'; then
    ok "$name: host 3 declared lost ${det} s after the cut (< 5 s): ${line#*cddp run: }"
  else fail "$name: host 3 not declared lost within 5 s" "det=$det $(tail -2 "$T/${name}1.out" | tr '\n' ' ')"; fi
  after_fault "$name" "$t0" cut 5 'cddp train: recovered from the loss of node .* no heartbeat for .*world 3 -> 2'
  local dt=$DT
  local o3=$T/${name}3.out
  # cut off: its monitor says so, or (the store may move) it finds nobody to take the store over with
  if [ "$r3" != 0 ] && [ "$r3" != 137 ] &&
     [ "$(grep -c '^cddp run: node .* is cut off from the job\|^cddp run: node .* carrying on needs a majority' "$o3")" = 1 ]; then
    ok "$name: host 3 ends by itself (exit $r3) $t3 s after the cut: $(grep -h '^cddp run: ' "$o3" | tail -1 | cut -c1-120)"
  else fail "$name: host 3" "rc=$r3 after $t3 s: $(tail -3 "$o3" | tr '\n' ' ')"; fi
  echo "# $name: cut ($how) at step $before: declared lost after $det s, next step after $dt s, survivors done after $t_surv s, host 3 out after $t3 s (exit $r3); test time so far ${SECONDS} s"
}

# store_case NAME HOW: host 1, the store's host (and rank 0, the metrics writer), lost at step ~60
# by HOW: crash (kill -9 of everything on it: its port refuses, so the next host takes over at
# once) or linkdown (a host that may be alive: the others take over after its lease; it finds
# it hears from a minority and stops; its link back, nobody goes back to it)
store_case() {
  local name=$1 how=$2 m=$T/$1/metrics.jsonl
  hosts "$name"
  wait_step "$m" 60 || fail "$name: no progress" "$(tail -3 "$T/${name}1.out" | tr '\n' ' ')"
  local before; before=$(last_step "$m")
  local t0; t0=$(date +%s.%N)
  if [ "$how" = crash ]; then "$NS" crash 1; else "$NS" linkdown 1; fi
  wait_all 90 "${A[2]}" "${A[3]}"
  local r2=${RC[0]} r3=${RC[1]} t_surv; t_surv=$(since "$t0")
  [ "$how" = linkdown ] && { wait_all 60 "${A[1]}"; "$NS" linkup 1; }
  local r1=${RC[0]}
  cat "$T/$name"?.out >"$T/$name.out"
  [ "$r2" = 0 ] && [ "$r3" = 0 ] && ok "$name: the store's host ($how) at step $before: hosts 2 and 3 finish (exit 0) $t_surv s later" ||
    fail "$name: survivors' exit codes" "$r2 $r3; $(grep -hv 'epoch 1/1' "$T/${name}2.out" "$T/${name}3.out" | tail -4 | tr '\n' ' ')"
  local took; took=$(grep -h -m1 "^cddp run: the store's host (agent 0 at .*) is lost; agent [12] took the store over" "$T/$name.out")
  [ -n "$took" ] && ok "$name: ${took#cddp run: }" || fail "$name: no take-over" "$(grep -h 'store' "$T/$name.out" | head -3 | tr '\n' ' ')"
  local bound=5; [ "$how" = linkdown ] && bound=20 # a silent host: two heartbeat timeouts to tell, then its lease
  after_fault "$name" "$t0" "$how" $bound 'cddp train: recovered from the loss of node .* (agent 0, .*world 3 -> 2'
  local dt=$DT
  if [ "$how" = linkdown ]; then # the old host, cut off, ends by itself and never goes on alone
    local o1=$T/${name}1.out
    if [ "$r1" != 0 ] && [ "$r1" != 137 ] && grep -q "hears from only 1 of its 3 nodes: it stops\|is cut off from the job" "$o1"; then
      ok "$name: the old host ends by itself (exit $r1): $(grep -h '^cddp run: ' "$o1" | tail -1 | cut -c1-140)"
    else fail "$name: the old host" "rc=$r1: $(tail -3 "$o1" | tr '\n' ' ')"; fi
  fi
  echo "# $name: store's host $how at step $before: next step after $dt s, survivors done after $t_surv s; test time so far ${SECONDS} s"
}

# flap_case NAME S: host 1's cable (the store's host, rank 0) pulled at step ~60 for S s, then
# plugged back (docs/store.md, "A link flap"). Short flaps are ridden out; long ones end in a
# take-over after the old host fenced itself. Either way the job completes, every step and
# sample once, and the old host's workers are gone by the time anyone takes the store over.
flap_case() {
  local name=$1 s=$2 m=$T/$1/metrics.jsonl
  hosts "$name"
  wait_step "$m" 60 || fail "$name: no progress" "$(tail -3 "$T/${name}1.out" | tr '
' ' ')"
  local w1 before t0 up=0 took='' t_took='' alive='' el p
  w1=$(pgrep -P "${A[1]}" | tr '\n' ' ') before=$(last_step "$m") t0=$(date +%s.%N)
  "$NS" linkdown 1
  while :; do # 90 s at most: the link back after S s, the take-over seen
    el=$(since "$t0")
    awk -v e="$el" 'BEGIN { exit !(e >= 90) }' && break
    [ $up = 0 ] && awk -v e="$el" -v s="$s" 'BEGIN { exit !(e >= s) }' && { "$NS" linkup 1; up=$el; }
    if [ -z "$took" ] && grep -q "^cddp run: the store's host .* took the store over" "$T/${name}2.out" "$T/${name}3.out"; then
      took=1 t_took=$(since "$t0")
      for p in $w1; do # a deposed worker still running (a zombie has stopped) when the others go on
        [ -n "$(ps -o stat= -p "$p" 2>/dev/null | grep -v Z)" ] && alive+=" $p"
      done
    fi
    kill -0 "${A[1]}" 2>/dev/null || kill -0 "${A[2]}" 2>/dev/null || kill -0 "${A[3]}" 2>/dev/null || break
    sleep 0.02
  done
  [ $up = 0 ] && "$NS" linkup 1
  wait_all 5 "${A[1]}" "${A[2]}" "${A[3]}"
  local r1=${RC[0]} r2=${RC[1]} r3=${RC[2]} t_end; t_end=$(since "$t0")
  cat "$T/$name"?.out >"$T/$name.out"
  # taken over: both others finish. Not: the old host kept its majority and finishes, and so does
  # one other at least; a host whose calls went unanswered past the heartbeat timeout took itself
  # for cut off (its vote led nowhere), was dropped, and ended by itself with one line
  local left='' r how
  [ "$r2" = 0 ] || left=2
  [ "$r3" = 0 ] || left+=3
  r=$([ "$left" = 2 ] && echo "$r2" || echo "$r3")
  if [ -n "$took" ] && [ -z "$left" ]; then
    ok "$name: host 1's link down $s s at step $before: hosts 2 and 3 finish (exit 0) $t_end s after the cut"
  elif [ -z "$took" ] && [ "$r1" = 0 ] && [ ${#left} -le 1 ] && [ "$r" != 137 ]; then
    how=$([ -n "$left" ] && echo "; host $left ended by itself (exit $r): $(grep -h '^cddp run: ' "$T/${name}$left.out" | tail -1 | cut -c11-130)")
    ok "$name: host 1's link down $s s at step $before: no take-over, the old host kept its majority and the job finished $t_end s after the cut$how"
  else fail "$name: exit codes" "$r1 $r2 $r3 (taken over: ${took:-no}); $(grep -h '^cddp run: \|recovered' "$T/$name.out" | tail -5 | tr '\n' ' ')"; fi
  if [ -z "$took" ]; then
    ok "$name: no take-over, so no host was deposed"
  elif [ -z "$alive" ] && [ "$r1" != 0 ] && [ "$r1" != 137 ]; then
    ok "$name: taken over $t_took s after the cut; the old host's workers had stopped by then; it ended (exit $r1)"
  else fail "$name: the fence" "taken over after $t_took s; old host's workers still running then:${alive:- none}; rc=$r1: $(grep -h '^cddp run: ' "$T/${name}1.out" | tail -2 | tr '\n' ' ')"; fi
  local steps uniq v
  steps=$(grep -vc '"eval"' "$m"); uniq=$(grep -v '"eval"' "$m" | sed -n 's/.*"step":\([0-9]*\).*/\1/p' | sort -u | wc -l)
  [ "$steps" = $STEPS ] && [ "$uniq" = $STEPS ] && ok "$name: $STEPS step lines, none twice" || fail "$name: steps" "lines=$steps unique=$uniq"
  v=$(samples "$name")
  [ "$v" = clean ] && ok "$name: every sample of the epoch exactly once" || fail "$name: samples" "$v"
  echo "# $name: link down $s s at step $before: taken over after ${t_took:-never} s, all ended after $t_end s; test time so far ${SECONDS} s"
}

want cut && { cut_case cut linkdown; "$NS" linkup 3; }
want storekill && store_case storekill crash
want storecut && store_case storecut linkdown
want part && { cut_case part partition; "$NS" heal; }
# flap[:S,S...]: host 1's link flapped for each S s (default: 1, 3 and 8: a ride-out, the lease's
# edge and a take-over; tests/cluster/flap_table.sh runs the whole table)
if [ "${ONLY%%:*}" = flap ] || [ "$ONLY" = all ]; then
  cuts=1,3,8; [ "${ONLY#flap:}" != "$ONLY" ] && cuts=${ONLY#flap:}
  for s in ${cuts//,/ }; do flap_case "flap${s/./_}" "$s"; done
fi

# rejoin NAME: host 3 cut at step ~40, dropped; its link restored: its agent comes back as a
# pending node and is taken in again at a step boundary (world 2 -> 3); all three finish;
# every sample of the 8 epochs (CDDP_REJOIN_EPOCHS) exactly once across both changes, the
# accuracy of an uninterrupted run.
rejoin_case() {
  local name=$1 m=$T/$1/metrics.jsonl
  local ne=${CDDP_REJOIN_EPOCHS:-8}
  TRAIN=("${ONE[@]}" --set "train.epochs=$ne") STEPS=$((312 * ne))
  reference "${name}_ref"
  hosts "$name"
  wait_step "$m" 40 || fail "$name: no progress" "$(tail -3 "$T/${name}1.out" | tr '\n' ' ')"
  local t0; t0=$(date +%s.%N)
  "$NS" linkdown 3
  local o3=$T/${name}3.out t_off='' t1 t_in='' line
  # host 3 knows it is out (cut off, or told it was dropped)
  poll_every=0.02 await "$name: host 3 knows it is out" 15 grep -q '^cddp run: node .* \(is cut off from the job\|was dropped from the job\)' "$o3" &&
    t_off=$(since "$t0")
  grep -q 'cddp train: recovered from the loss of node .*world 3 -> 2' "$T/${name}1.out" &&
    ok "$name: host 3 cut at step ~40: the others re-formed with world 2; host 3 knows it is out after $t_off s" ||
    fail "$name: the cut" "t_off=$t_off; $(grep -h 'lost\|recovered\|cut off\|dropped' "$T/$name"?.out | tr '\n' ' ')"
  "$NS" linkup 3; t1=$(date +%s.%N)
  local t_back=
  back_in() { # host 3 back (t_back) and taken in (0), or the job over (0 too)
    [ -z "$t_back" ] && grep -q '^cddp run: node .* comes back as agent' "$o3" && t_back=$(since "$t1")
    grep -q 'cddp train: .* joined: generation [0-9]*, world 2 -> 3' "$T/${name}1.out" && { t_in=$(since "$t1"); return 0; }
    ! kill -0 "${A[1]}" 2>/dev/null
  }
  poll_every=0.02 wait_for 60 back_in # the check below says which
  line=$(grep -h -m1 'cddp train: .* joined: generation [0-9]*, world 2 -> 3' "$T/${name}1.out")
  [ -n "$t_in" ] && ok "$name: link restored -> host 3 taken in again after $t_in s: ${line#*cddp train: }" ||
    fail "$name: host 3 not taken in again" "$(tail -3 "$o3" | tr '\n' ' ')"
  wait_all 90 "${A[1]}" "${A[2]}" "${A[3]}"
  [ "${RC[*]}" = "0 0 0" ] && ok "$name: all three hosts finish (exit 0), host 3 included" ||
    fail "$name: exit codes" "${RC[*]}; $(tail -3 "$o3" | tr '\n' ' ')"
  local steps uniq v acc
  steps=$(grep -vc '"eval"' "$m"); uniq=$(grep -v '"eval"' "$m" | sed -n 's/.*"step":\([0-9]*\).*/\1/p' | sort -u | wc -l)
  [ "$steps" = $STEPS ] && [ "$uniq" = $STEPS ] && ok "$name: $STEPS step lines, none twice" ||
    fail "$name: steps" "lines=$steps unique=$uniq"
  v=$(samples "$name")
  [ "$v" = clean ] && ok "$name: every sample of the $ne epochs exactly once across the cut and the rejoin" || fail "$name: samples" "$v"
  acc=$(acc_of "$m")
  if [ -n "$acc" ] && [ -n "$ref" ] && awk -v a="$acc" -v b="$ref" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d <= 0.005) }'; then
    ok "$name: test accuracy $acc vs $ref uninterrupted (within 0.5 points)"
  else fail "$name: accuracy" "$acc vs $ref"; fi
  echo "# $name: cut at step ~40: host 3 out after $t_off s; link restored -> its agent back after $t_back s, taken in after $t_in s"
}

# the rejoin: a dropped agent comes back and is taken in again (docs/elastic.md)
if want rejoin; then rejoin_case rejoin; fi
finish
