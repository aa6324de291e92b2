#!/usr/bin/env bash
# test_store_failover.sh - the job's store survives its host (cddp run, --nnodes 2:3, agents x 1
# worker on this host; docs/store.md, "Failover"). Replace mode: (m) the store's host, agent and worker, SIGKILLed mid-epoch: the next agent in line takes the store over, the
# two survivors drop the lost node and finish: one step redone at most, kill -> next step < 5 s,
# every sample once, the accuracy of an uninterrupted run. (n) 2 nodes, the host SIGKILLed: its
# port refuses, so the survivor alone takes the store over (one line) and finishes as world 1.
# (q) 2 nodes, the host frozen (its port still answers): no majority, no take-over; the survivor
# stops with one line, in bounded time. (f) the store's host frozen (SIGSTOP: a
# host cut off, not known dead): the others take the store over only after its lease; thawed,
# it stops (it hears from a minority, or its own store went unanswered) and writes nothing the
# others see: the run's metrics and sample logs hold every step and sample once. (o) CDDP_STORE_FAILOVER=0: the job ends with
# its store's host, as before. (j) a node started later with --rdzv-endpoint naming a member
# that does not host the store (its standby) is sent on to the store and taken in. (l) after the
# store moved: a node pointed at the lost host's endpoint fails with one line; two pointed at a
# standby reach the new host: one is taken in, the other waits as a spare (world 4 cannot split
# the batch), every step and sample once. (s) a spare waiting when the host is lost is taken in
# by the new host, and the restart budget used before the move still counts after it. Restart-all
# (--restart-mode all, every torch script's): (r) 3 agents of a checkpointing cddp train, (t) a
# checkpointing torch 1.13 script under 3 launchers, (u) 2 agents: the store's host SIGKILLed, the
# survivors move the store, restart their workers in the next round and resume from the checkpoint.
cd "$(dirname "$0")/../.." && source tests/sh/lib.sh
source tests/sh/lib_elastic.sh
elastic_setup cddp-store-failover
# kill_to_step NAME KT REDONE: seconds from the kill (wall clock KT) to the first step >= REDONE completed after it
kill_to_step() {
  grep -v '"eval"' "$T/$1/metrics.jsonl" | sed -n 's/.*"step":\([0-9]*\).*"time":\([0-9.]*\).*/\1 \2/p' |
    awk -v k="$2" -v s="${3:-0}" '$1 >= s && $2 > k { printf "%.2f", $2 - k; exit }'
}
# store_host: the index (1..3) of the agent that hosts the store: the one whose port is the endpoint
store_host() { local i; for i in "$@"; do ss -ltnp 2>/dev/null | grep ":$P " | grep -q "pid=${A[$i]}," && { echo "$i"; return; }; done; echo 1; }
# listen_port I: the port agent I's store server listens on (the store, or its standby)
listen_port() { ss -ltnp 2>/dev/null | grep "pid=${A[$1]}," | awk '{ print $4 }' | sed 's/.*://' | head -1; }

reference_run

case_m() {
  agents m 3 2:3
  progress m 40
  local h; h=$(store_host 1 2 3)
  local w; w=$(worker_of "${A[$h]}")
  local before kt; before=$(last_step "$T/m/metrics.jsonl"); kt=$(date +%s.%N)
  kill -KILL "${A[$h]}" $w; wait "${A[$h]}" 2>/dev/null
  local surv=() i; for i in 1 2 3; do [ "$i" != "$h" ] && surv+=("${A[$i]}"); done
  all_exit0 m 90 "the store's host (agent and worker) SIGKILLed at step $before: both survivors" "${surv[@]}"
  local took lost rline
  took=$(grep -m1 "^cddp run: the store's host (agent 0 at 127.0.0.1:$P) is lost; agent [12] took the store over at .* (epoch 1, [23] of the 3 nodes of generation 0 voted" "$T/m.out")
  lost=$(grep -m1 '^cddp run: node .* (agent 0) lost: its connection closed; generation 1: world 3 -> 2' "$T/m.out")
  rline=$(grep -m1 'cddp train: recovered from the loss of node .* (agent 0, its connection closed) in .* generation 1, world 3 -> 2 .* step [0-9]* redone' "$T/m.out")
  [ -n "$took" ] && ok "m: ${took#cddp run: }" || fail "m: no take-over line" "$(grep -h 'store' "$T/m.out" | head -3 | tr '\n' ' ')"
  [ -n "$lost" ] && [ -n "$rline" ] && ok "m: the lost host's node is dropped and the workers re-form: ${rline#*cddp train: }" ||
    fail "m: no re-forming" "$(grep -hE 'lost|recovered' "$T/m.out" | tr '\n' ' ')"
  local redone dt; redone=$(echo "$rline" | sed -n 's/.* step \([0-9]*\) redone.*/\1/p')
  dt=$(kill_to_step m "$kt" "${redone:-0}")
  [ -n "$dt" ] && awk -v d="$dt" -v b="$(scaled 5)" 'BEGIN { exit !(d < b) }' && ok "m: kill -> step $redone (redone) completed in $dt s (< 5 s)" ||
    fail "m: kill -> next step" "dt=$dt redone=$redone"
  steps_once m
  exactly_once m
  acc_near m
}

case_n() { # 2 nodes (--nnodes 1:2): the lost host's port refuses, so the survivor alone takes over
  agents n 2 1:2
  progress n 20
  local h o; h=$(store_host 1 2); o=$((3 - h))
  local w; w=$(worker_of "${A[$h]}")
  local t0; t0=$(date +%s.%N)
  kill -KILL "${A[$h]}" $w; wait "${A[$h]}" 2>/dev/null
  all_exit0 n 90 "the store's host SIGKILLed: the survivor" "${A[$o]}"
  local el; el=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
  local took; took=$(grep -c "took the store over" "$T/n.out")
  local line; line=$(grep -m1 "^cddp run: the store's host (agent 0 at 127.0.0.1:$P) is lost; agent 1 took the store over at .* (epoch 1, 1 of the 2 nodes of generation 0 voted, and the lost host's port refuses: its store is gone" "$T/n.out")
  [ -n "$line" ] && [ "$took" = 1 ] && ok "n: 2 nodes, one line: ${line#cddp run: }" ||
    fail "n: the lone survivor" "$took take-overs; $(grep -v 'epoch 1/1' "$T/n.out" | grep -i store | tail -3 | tr '\n' ' ')"
  grep -q 'cddp train: recovered from the loss of node .* world 2 -> 1' "$T/n.out" && ok "n: the survivor trains on as world 1 ($el s from the kill to its exit)" ||
    fail "n: no re-forming to world 1" "$(grep -hE 'lost|recovered' "$T/n.out" | tr '\n' ' ')"
  steps_once n
  exactly_once n
}

case_q() { # 2 nodes, the store's host frozen (it answers on its port, so it is not known dead): no majority, no take-over
  RUNX=(--rdzv-timeout 5) # the survivor, cut from a store it cannot prove dead, tries to come back that long
  agents q 2 1:2
  RUNX=()
  progress q 20
  local h o; h=$(store_host 1 2); o=$((3 - h))
  local w; w=$(worker_of "${A[$h]}")
  local t0; t0=$(date +%s.%N)
  kill -STOP "${A[$h]}" $w
  local line; wait_line 40 "carrying on needs a majority" "$T/q$o.out"
  line=$(grep -m1 "lost the store at 127.0.0.1:$P, and only 1 of the 2 nodes of generation 0 reached agent 1, next in line to host it: carrying on needs a majority" "$T/q$o.out")
  local el; el=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
  [ -n "$line" ] && ! grep -q "took the store over" "$T/q$o.out" && ok "q: a frozen host of 2 is not known dead: no take-over, one line in $el s: ${line#*cddp run: }" ||
    fail "q: the survivor of a frozen host" "$(grep -v 'epoch 1/1' "$T/q$o.out" | tail -3 | tr '\n' ' ')"
  kill -KILL "${A[$h]}" $w; kill -CONT "${A[$h]}" $w 2>/dev/null; wait "${A[$h]}" 2>/dev/null
  wait_all 60 "${A[$o]}"
  [ "${RC[0]}" != 0 ] && [ "${RC[0]}" != 137 ] && [ "${RC[0]}" != 124 ] && ok "q: the survivor stops (exit ${RC[0]}), bounded" ||
    fail "q: the survivor's exit" "rc=${RC[0]}; $(tail -2 "$T/q$o.out" | tr '\n' ' ')"
}

case_f() {
  agents f 3 2:3
  progress f 40
  local h; h=$(store_host 1 2 3)
  local w; w=$(worker_of "${A[$h]}")
  local kt; kt=$(date +%s.%N)
  kill -STOP "${A[$h]}" $w
  local surv=() outs=() i; for i in 1 2 3; do [ "$i" != "$h" ] && surv+=("${A[$i]}") && outs+=("$T/f$i.out"); done
  if wait_line 20 "took the store over" "${outs[@]}"; then
    local took dt; took=$(grep -h "took the store over" "${outs[@]}" | head -1)
    dt=$(echo "$took" | sed -n 's/.*, \([0-9.]*\) s after the loss.*/\1/p')
    # lost = the first call unanswered for the heartbeat timeout (2 s); then the lease (2 s + 1 s)
    awk -v d="$dt" 'BEGIN { exit !(d >= 2.9) }' && ok "f: a frozen host is not known dead: taken over after its lease ($dt s after the loss was seen)" ||
      fail "f: taken over before the lease ran out" "$took"
  else fail "f: nobody took the store over" "$(tail -2 "${outs[0]}" | tr '\n' ' ')"; fi
  wait_line 20 'cddp train: recovered from the loss' "${outs[@]}" || fail "f: no re-forming" ""
  kill -CONT "${A[$h]}" $w
  wait_all 90 "${surv[@]}" "${A[$h]}"
  cat "$T"/f?.out >"$T/f.out"
  [ "${RC[0]} ${RC[1]}" = "0 0" ] && ok "f: both survivors finish (exit 0)" || fail "f: exit codes" "${RC[*]}"
  # thawed, the old host finds it hears from a minority, or that its own calls to its store went
  # unanswered (it was frozen): either way it stops, and its workers never act on the old store
  local stop; stop=$(grep -m1 "hosts the job's store but hears from only 1 of its 3 nodes: it stops\|hosted the job's store but its own calls to it went unanswered\|hosts the job's store but stood still for" "$T/f$h.out")
  if [ -n "$stop" ] && [ "${RC[2]}" != 0 ] && [ "${RC[2]}" != 137 ]; then ok "f: thawed, the old host stops (exit ${RC[2]}): ${stop#cddp run: }"
  else fail "f: the thawed host" "rc=${RC[2]}; $(grep -v 'epoch 1/1' "$T/f$h.out" | tail -3 | tr '\n' ' ')"; fi
  steps_once f
  exactly_once f
}

case_o() {
  export CDDP_STORE_FAILOVER=0; RUNX=(--rdzv-timeout 5) # a cut-off node tries to come back that long
  agents o 3 2:3
  unset CDDP_STORE_FAILOVER; RUNX=()
  progress o 20
  local h; h=$(store_host 1 2 3)
  kill -KILL "${A[$h]}" $(worker_of "${A[$h]}"); wait "${A[$h]}" 2>/dev/null
  local surv=() i; for i in 1 2 3; do [ "$i" != "$h" ] && surv+=("${A[$i]}"); done
  wait_all 60 "${surv[@]}"
  local n; n=$(grep -l "127.0.0.1:$P" "$T"/o?.out | wc -l)
  [ "${RC[0]}" != 0 ] && [ "${RC[1]}" != 0 ] && [ "${RC[*]}" != "137 137" ] && [ "$n" = 2 ] && ! grep -q "took the store over" "$T"/o?.out &&
    ok "o: CDDP_STORE_FAILOVER=0: both survivors end with the store (exit ${RC[*]}), naming it, as before" ||
    fail "o: off switch" "${RC[*]}; $n files name the store"
}

# (j) a node started later names a member that does not host the store (its standby's port, not
# the store's: on one host the store holds that port, so the standby took another): the standby
# sends it on to the store's host, and it is taken into the running job like any late node
case_j() {
  agents j 2 2:3
  progress j 20
  local h o s; h=$(store_host 1 2); o=$((3 - h)); s=$(listen_port "$o")
  [ -n "$s" ] && [ "$s" != "$P" ] && ok "j: agent $o (not the store's host, at :$P) serves a standby at :$s" ||
    fail "j: no standby port" "agent $o listens on '$s'"
  EP=127.0.0.1:$s agent j 3 2:3
  all_exit0 j 90 "all three agents" "${A[1]}" "${A[2]}" "${A[3]}"
  join_seen j "the node pointed at the standby is taken in"
  steps_once j "0 redone"
  exactly_once j
  acc_near j
}

# (l) late nodes after the store moved (--nnodes 2:4, 3 agents, 8 epochs so that the job still
# runs): the store's host SIGKILLed, a survivor took the store over; a node pointed at the lost
# host's endpoint (as a client: is_host=false, as on another host) fails with one line in
# bounded time; two pointed at the survivor that does not host the store (its standby keeps a
# copy of the new list) are sent on to the new host: the first makes world 3 and is taken in,
# the second would make world 4, which the batch (192 = 32 x 6) cannot split: it waits as a
# spare (the world sizes, published again after the move, say so) and exits 0 at the end
case_l() {
  local e8=(--set train.epochs=8)
  RUNX=(--rdzv-last-call 5) # 3 of at most 4: the round closes after its last call
  agents l 3 2:4 "${e8[@]}"
  RUNX=()
  progress l 20
  grep -q 'cddp train: MLP, .* world 3 ' "$T"/l?.out || fail "l: the job did not start with world 3" "$(grep -h 'cddp train: MLP' "$T"/l?.out)"
  local h; h=$(store_host 1 2 3)
  kill -KILL "${A[$h]}" $(worker_of "${A[$h]}"); wait "${A[$h]}" 2>/dev/null
  local surv=() outs=() i nh= ot= np; for i in 1 2 3; do [ "$i" != "$h" ] && surv+=("$i") && outs+=("$T/l$i.out"); done
  wait_line 30 'cddp train: recovered from the loss' "${outs[@]}" || fail "l: no re-forming" "$(tail -2 "${outs[0]}" | tr '\n' ' ')"
  np=$(grep -h "took the store over at" "${outs[@]}" | sed -n 's/.* took the store over at 127.0.0.1:\([0-9]*\) .*/\1/p' | head -1)
  for i in "${surv[@]}"; do if [ "$(listen_port "$i")" = "$np" ]; then nh=$i; else ot=$i; fi; done
  local s; s=$(listen_port "$ot")
  [ -n "$np" ] && [ -n "$nh" ] && [ -n "$s" ] && ok "l: agent $nh took the store over at :$np; agent $ot's standby is at :$s" ||
    fail "l: who hosts the store now" "new port '$np', host '$nh', other '$ot' at '$s'"
  local t0; t0=$(date +%s.%N)
  RUNX=(--rdzv-conf is_host=false --rdzv-timeout 5); EP=127.0.0.1:$P agent l 4 2:4 "${e8[@]}"; RUNX=()
  EP=127.0.0.1:$s agent l 5 2:4 "${e8[@]}"; EP=127.0.0.1:$s agent l 6 2:4 "${e8[@]}"
  wait_all 60 "${A[4]}"
  local el; el=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
  local why; why=$(grep -v '^\[rank' "$T/l4.out" | grep -m1 "127.0.0.1:$P")
  [ "${RC[0]}" != 0 ] && [ "${RC[0]}" != 137 ] && [ -n "$why" ] && ok "l: a node pointed at the lost host fails (exit ${RC[0]}, $el s): ${why#cddp run: }" ||
    fail "l: the node pointed at the lost host" "rc=${RC[0]} after $el s; $(tail -3 "$T/l4.out" | tr '\n' ' ')"
  all_exit0 l 120 "both survivors and both nodes pointed at a standby" "${A[${surv[0]}]}" "${A[${surv[1]}]}" "${A[5]}" "${A[6]}"
  local line spare joins
  line=$(grep -m1 'cddp run: join node .*: generation [0-9]*: world 2 -> 3' "$T/l.out")
  joins=$(grep -c 'cddp run: join node' "$T/l.out")
  [ -n "$line" ] && [ "$joins" = 1 ] && grep -q "cddp train: node .* joined: generation [0-9]*, world 2 -> 3" "$T/l.out" &&
    ok "l: after the move, a node pointed at a standby is taken in: ${line#*cddp run: }" ||
    fail "l: not taken in after the move" "$joins join lines: $(grep -hE 'join|joined|taken|spare' "$T/l.out" | head -5 | tr '\n' ' ')"
  spare=$(grep -m1 'waits as a spare: a world of 4 ranks cannot split the global batch (world sizes that work: 1 2 3 6)' "$T/l.out")
  [ -n "$spare" ] && grep -q 'the job finished while node .* waited to be taken in' "$T/l5.out" "$T/l6.out" &&
    ok "l: the other waits (the world sizes outlived the move): ${spare#cddp run: }" ||
    fail "l: the second late node" "$(grep -hE 'spare|waits|finished' "$T/l5.out" "$T/l6.out" | head -4 | tr '\n' ' ')"
  steps_once l "one step redone at most, the cut-back metrics" $((8 * 312))
  exactly_once l 8
}

# (s) what the survivors hold moves with the store: a worker replaced before the move counts
# against --max-restarts after it too (the votes carry the count), and a spare that waited to be
# taken in when the host was lost is taken in by the new host (it lists itself again).
case_s() {
  local slow=(--set debug.slow_rank=0 --set debug.slow_ms=40) # ~13 s of steps: room for three faults
  agents s 3 2:3 "${slow[@]}"
  progress s 10
  agent s 4 2:3 "${slow[@]}"
  wait_line 20 'waits as a spare' "$T"/s?.out || fail "s: the 4th agent is no spare" "$(tail -2 "$T/s4.out" | tr '\n' ' ')"
  local h; h=$(store_host 1 2 3)
  local o=() i; for i in 1 2 3; do [ "$i" != "$h" ] && o+=("$i"); done
  kill -KILL "$(worker_of "${A[${o[0]}]}")"
  wait_line 20 'replaced in place .* (restart 1 of 3)' "$T"/s?.out || fail "s: the first replacement" ""
  await "s: 20 steps after the first replacement" 60 step_reached "$T/s/metrics.jsonl" $(( $(last_step "$T/s/metrics.jsonl") + 20 ))
  kill -KILL "${A[$h]}" $(worker_of "${A[$h]}"); wait "${A[$h]}" 2>/dev/null
  if wait_line 30 'taken into the job in generation' "$T/s4.out"; then
    ok "s: the spare waiting when the store's host was lost is taken in by the new host: $(grep -m1 -o 'node .* taken into the job in generation .*' "$T/s4.out")"
  else fail "s: the spare was forgotten" "$(grep -v 'epoch 1/1' "$T/s4.out" | tail -3 | tr '\n' ' ')"; fi
  await "s: 20 steps after the store moved" 60 step_reached "$T/s/metrics.jsonl" $(( $(last_step "$T/s/metrics.jsonl") + 20 ))
  kill -KILL "$(worker_of "${A[${o[1]}]}")"
  local second
  if wait_line 20 'replaced in place .* (restart [0-9]* of 3)' "$T/s${o[1]}.out"; then
    second=$(grep -h -o 'replaced in place .* (restart [0-9]* of 3)' "$T/s${o[1]}.out" | tail -1)
    case "$second" in *"(restart 2 of 3)"*) ok "s: after the move the budget goes on: $second" ;;
      *) fail "s: the restart budget started over after the move" "$second" ;; esac
  else fail "s: the second replacement" "$(tail -3 "$T/s${o[1]}.out" | tr '\n' ' ')"; fi
  wait_all 90 "${A[${o[0]}]}" "${A[${o[1]}]}" "${A[4]}"
  [ "${RC[*]}" = "0 0 0" ] && ok "s: the two survivors and the spare finish (exit 0)" || fail "s: exit codes" "${RC[*]}"
  steps_once s
  exactly_once s
}

# (r) restart-all (every torch script's mode) moves the store too: 3 agents of a checkpointing C
# program, the store's host (agent and worker) SIGKILLed: a survivor takes the store over, the
# two restart their workers in the next round on the new store (a restart spent, as torchrun
# counts one), resume from the last checkpoint and finish: every step and sample once in the logs
case_r() {
  MODE=all
  agents r 3 2:3 --set checkpoint.every_steps=20 --resume-from latest
  MODE=replace
  progress r 50
  local h; h=$(store_host 1 2 3)
  local kt; kt=$(date +%s.%N)
  kill -KILL "${A[$h]}" $(worker_of "${A[$h]}"); wait "${A[$h]}" 2>/dev/null
  local surv=() i; for i in 1 2 3; do [ "$i" != "$h" ] && surv+=("${A[$i]}"); done
  all_exit0 r 90 "restart-all, the store's host SIGKILLed: both survivors" "${surv[@]}"
  local took re
  took=$(grep -m1 "^cddp run: the store's host (agent 0 at 127.0.0.1:$P) is lost; agent [12] took the store over at .* (epoch 1, [23] of the 3 nodes of generation 0 voted" "$T/r.out")
  re=$(grep -m1 'restarting the workers (restart 1 of 3)' "$T/r.out")
  [ -n "$took" ] && [ -n "$re" ] && ok "r: restart-all: ${took#cddp run: }; ${re#cddp run: }" ||
    fail "r: no take-over and restart" "$(grep -hE 'store|restart' "$T/r.out" | head -4 | tr '\n' ' ')"
  grep -q 'cddp train: MLP, .* world 2 ' "$T/r.out" && grep -q 'resum' "$T/r.out" &&
    ok "r: the survivors resume as world 2 from the checkpoint: $(grep -m1 -o 'cddp train: resum.*' "$T/r.out")" ||
    fail "r: no resume as world 2" "$(grep -hE 'cddp train' "$T/r.out" | tail -4 | tr '\n' ' ')"
  local from dt; from=$(grep -m1 -o 'cddp train: resuming from .* (step [0-9]*' "$T/r.out" | sed 's/.*(step //')
  dt=$(kill_to_step r "$kt" $((${from:-0} + 1))) # the old world may finish the step in flight and checkpoint it
  [ -n "$dt" ] && ok "r: kill -> step $((${from:-0} + 1)), the first after the resume: $dt s" || fail "r: no step after the resume" "from=$from"
  steps_once r "after the resume"
  exactly_once r
}

# (t) a checkpointing torch script (tests/torch/tools/train.py, Debian's torch 1.13) under 3
# launchers, restart-all by default: the store's host SIGKILLed (agent and worker); the other two
# restart their workers on the new store, which resume from the script's own checkpoint and finish
case_t() {
  local py=/usr/bin/python3
  if ! $py -c 'import torch.distributed' 2>/dev/null; then
    echo "ok $((t_n += 1)) - $t_name:t # SKIP $py has no torch (scripts/install-deps.sh test)"; return
  fi
  P=$(free_port); A=()
  echo "steps=40" >"$T/tcfg.py"
  tagent() {
    CDDP_PYTHON=$py "$CDDP" run --nnodes 2:3 --nproc-per-node 1 --rdzv-backend c10d --rdzv-endpoint "127.0.0.1:$P" \
      --rdzv-id "t$P" --rdzv-last-call "$(scaled 1)" --max-restarts 3 tests/torch/tools/train.py --config_path="$T/tcfg.py" \
      --work_dir="$T" --name=t --resume_from=latest --step_ms=100 >"$T/t$1.out" 2>&1 &
    A[$1]=$!; bg+=($!)
  }
  tagent 1; await "t: agent 1 hosts the store" 10 port_listening "$P"; tagent 2; tagent 3
  wait_for 60 test -e "$T/t/step-0005.pt" || fail "t: no progress" "$(tail -3 "$T/t1.out" | tr '\n' ' ')"
  local h; h=$(store_host 1 2 3)
  kill -KILL "${A[$h]}" $(worker_of "${A[$h]}"); wait "${A[$h]}" 2>/dev/null
  local surv=() i; for i in 1 2 3; do [ "$i" != "$h" ] && surv+=("${A[$i]}"); done
  all_exit0 t 90 "a torch 1.13 script, the store's host SIGKILLed: both survivors" "${surv[@]}"
  local took res done
  took=$(grep -m1 "^cddp run: the store's host (agent 0 at 127.0.0.1:$P) is lost; agent [12] took the store over" "$T/t.out")
  res=$(grep -c "resumed from step-00[0-3][0-9].pt" "$T/t.out")
  done=$(grep -c "train ok rank [01] of 2 steps [0-9]*-40" "$T/t.out")
  [ -n "$took" ] && [ "$res" = 2 ] && [ "$done" = 2 ] &&
    ok "t: ${took#cddp run: }; both ranks of world 2 $(grep -m1 -o 'resumed from step-[0-9]*.pt' "$T/t.out") and finish" ||
    fail "t: torch script after the move" "took='$took' resumed=$res done=$done; $(grep -v '^\[rank' "$T/t.out" | tail -4 | tr '\n' ' ')"
}

# (u) 2 launchers in restart-all: the store's host SIGKILLed; its port refuses, so the survivor
# alone takes the store over, restarts its worker as world 1 from the checkpoint and finishes
case_u() {
  MODE=all
  agents u 2 1:2 --set checkpoint.every_steps=20 --resume-from latest
  MODE=replace
  progress u 30
  local h o; h=$(store_host 1 2); o=$((3 - h))
  kill -KILL "${A[$h]}" $(worker_of "${A[$h]}"); wait "${A[$h]}" 2>/dev/null
  all_exit0 u 90 "restart-all, 2 nodes, the store's host SIGKILLed: the survivor" "${A[$o]}"
  local line; line=$(grep -m1 "^cddp run: the store's host (agent 0 at 127.0.0.1:$P) is lost; agent 1 took the store over at .* (epoch 1, 1 of the 2 nodes of generation 0 voted, and the lost host's port refuses: its store is gone" "$T/u.out")
  [ -n "$line" ] && grep -q 'cddp train: MLP, .* world 1 ' "$T/u.out" && ok "u: ${line#cddp run: }; it restarts as world 1" ||
    fail "u: the lone survivor" "$(grep -v 'epoch 1/1' "$T/u.out" | grep -iE 'store|world' | tail -3 | tr '\n' ' ')"
  steps_once u "after the resume"
  exactly_once u
}

# (w) the store's host lost while the others wait for the job's end (their workers are done, the
# host's still runs), in each mode: replace (the done marks went with the old store: the
# survivors mark again on the new one and the job ends) and restart-all (the round ends in a
# restart on the new store). 3 agents of a shell program; both survivors exit 0 within 20 s.
case_w() {
  local mode n i h t0 el hold prog='if [ -n "$HOLD" ] && [ "$TORCHELASTIC_RESTART_COUNT" = 0 ]; then echo holding; sleep 60; fi; echo "done $GROUP_RANK"'
  for mode in replace all; do
    n=w$mode P=$(free_port) A=()
    for i in 1 2 3; do
      hold=(); [ $i = 1 ] && hold=(HOLD=1) # agent 1 hosts the store; its worker holds the job open
      env "${hold[@]}" CDDP_DEBUG=INFO CDDP_DEBUG_SUBSYS=RUN "$CDDP" run --nnodes 2:3 --nproc-per-node 1 --rdzv-backend c10d \
        --rdzv-endpoint "127.0.0.1:$P" \
        --rdzv-id "$n$P" --rdzv-last-call "$(scaled 1)" --max-restarts 3 --restart-mode $mode sh -c "$prog" >"$T/$n$i.out" 2>&1 &
      A[$i]=$!; bg+=($!)
      [ $i = 1 ] && wait_for 10 port_listening "$P"
    done
    # the two others' workers ended and their agents marked it: they wait for the job's end
    wait_line 30 holding "$T/${n}1.out" && wait_line 30 "workers are done" "$T/${n}2.out" &&
      wait_line 30 "workers are done" "$T/${n}3.out" || fail "$n: workers" "$(tail -2 "$T/$n"?.out | tr '\n' ' ')"
    h=$(store_host 1 2 3) t0=$(date +%s.%N)
    kill -KILL "${A[$h]}" $(worker_of "${A[$h]}"); wait "${A[$h]}" 2>/dev/null
    all_exit0 "$n" 20 "$mode: the store's host SIGKILLed (host $h) while the others waited for the job's end: both others" \
      $(for i in 1 2 3; do [ "$i" != "$h" ] && echo "${A[$i]}"; done)
    el=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
    [ "${RC[*]}" = "0 0" ] && grep -q "took the store over" "$T/$n.out" && ok "$n: the store moved, and the job ended $el s after the kill" ||
      fail "$n: no take-over" "$(grep -h 'store' "$T/$n.out" | tail -3 | tr '\n' ' ')"
  done
}

case "${1:-all}" in
  m) case_m ;; n) case_n ;; q) case_q ;; f) case_f ;; o) case_o ;; j) case_j ;; l) case_l ;; s) case_s ;;
  r) case_r ;; t) case_t ;; u) case_u ;; w) case_w ;;
  *) case_m; case_n; case_q; case_f; case_o; case_j; case_l; case_s; case_r; case_t; case_u; case_w ;;
esac
finish
