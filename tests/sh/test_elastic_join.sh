#!/usr/bin/env bash
# test_elastic_join.sh - scale-up under cddp run --nnodes MIN:MAX --restart-mode replace, agents
# x 1 worker on this host. (a) a 3rd agent started mid-epoch under --nnodes 2:3 is taken in at
# a step boundary: no step redone, the run completes, exactly-once, accuracy of an
# uninterrupted run. (b) a spare: --nnodes 2:2 with 3 agents, the 3rd waits; a member agent
# SIGKILLed -> the spare takes its place in one generation (world kept). (c) freeze/thaw: an
# agent and its worker SIGSTOPped -> dropped; SIGCONT -> the agent comes back as a pending node
# and is taken in again; exactly-once holds across both changes. (d) below MIN: --nnodes 2:2, one of
# 2 agents SIGKILLed, --rdzv-timeout 4: the survivor waits ~4 s for a node, then every process
# exits non-zero with the stop line. (e) the same, a new agent started once the survivor waits: it
# is taken in, the interrupted step is redone, the run completes, exactly-once.
cd "$(dirname "$0")/../.." && source tests/sh/lib.sh
source tests/sh/lib_elastic.sh
elastic_setup cddp-join-test

reference_run

case_a() {
  # (a) a node joins mid-epoch: 2 agents under --nnodes 2:3, a 3rd started at step 60
  agents j 2 2:3
  progress j 60
  local t0; t0=$(date +%s.%N)
  agent j 3 2:3
  all_exit0 j 90 "all three agents" "${A[1]}" "${A[2]}" "${A[3]}"
  join_seen j "the agent and rank 0 log the join"
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

case_b() {
  # (b) a spare: --nnodes 2:2 with 3 agents; the 3rd waits; the agent of rank 1 SIGKILLed -> the
  # spare takes its place in the same generation (world kept at 2)
  agents s 2 2:2
  progress s 20
  agent s 3 2:2
  wait_line 20 'waits to be taken into the running job' "$T/s3.out" && wait_step "$T/s/metrics.jsonl" 80 &&
    ok "s: the 3rd agent waits as a spare: $(grep -h 'waits' "$T"/s?.out | head -2 | sed 's/^cddp run: //' | tr '\n' '/')" ||
    fail "s: the spare" "$(tail -2 "$T/s3.out" | tr '\n' ' ')"
  local before kt; before=$(last_step "$T/s/metrics.jsonl"); kt=$(date +%s.%N)
  kill -KILL "${A[2]}"; wait "${A[2]}" 2>/dev/null
  all_exit0 s 90 "the 2nd agent SIGKILLed at step $before: the member left and the spare" "${A[1]}" "${A[3]}"
  local line rline
  line=$(grep -m1 'cddp run: node .* (agent 1) lost: its connection closed; spare node .* (agent 2) takes its place; generation 1: world 2 -> 2, ranks 0 -> 0, new 1' "$T/s.out")
  rline=$(grep -m1 'cddp train: recovered from the loss of node .* takes its place in .* generation 1, state from rank 0, step [0-9]* redone' "$T/s.out")
  [ -n "$line" ] && [ -n "$rline" ] && ok "s: one generation drops the lost node and takes the spare: ${line#*cddp run: } / ${rline#*cddp train: }" ||
    fail "s: event lines" "$(grep -E 'lost|recovered|spare' "$T/s.out" | tr '\n' ' ')"
  local redone; redone=$(echo "$rline" | sed -n 's/.* step \([0-9]*\) redone.*/\1/p')
  steps_once s "step $redone redone"
  exactly_once s
  acc_near s
}

case_c() {
  # (c) freeze/thaw (3 epochs, so the job still runs when the thawed node is back): the agent of rank 1 and its worker SIGSTOPped -> dropped; SIGCONT -> the
  # agent comes back (a new agent id) and is taken in again (--nnodes 2:3 has room)
  agents f 3 2:3 --set train.epochs=3
  progress f 30
  local victim= i w
  for i in 2 3; do w=$(worker_of "${A[$i]}"); [ -n "$w" ] && [ "$(rank_of "$w")" = 1 ] && victim=$i; done
  [ -n "$victim" ] || victim=2
  w=$(worker_of "${A[$victim]}")
  kill -STOP "${A[$victim]}" $w; local t0; t0=$(date +%s.%N)
  local surv=() det=
  for i in 1 2 3; do [ $i != "$victim" ] && surv+=("$T/f$i.out"); done
  wait_line 10 'lost: no heartbeat for\|lost; generation' "${surv[@]}" &&
    det=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.2f", b - a }')
  if [ -n "$det" ] && awk -v d="$det" -v b="$(scaled 5)" 'BEGIN { exit !(d < b) }'; then
    ok "f: frozen node declared lost ${det} s after SIGSTOP (< 5 s): $(grep -h '^cddp run: .*no heartbeat' "${surv[@]}" | head -1 | sed 's/^cddp run: //')"
  else fail "f: frozen node not declared lost within 5 s" "det=$det"; fi
  wait_line 10 "cddp train: recovered from the loss of node .* no heartbeat for .*world 3 -> 2" "$T"/f?.out &&
    ok "f: the survivors re-formed with world 2" || fail "f: no re-forming" "$(grep -h recovered "$T"/f?.out)"
  kill -CONT "${A[$victim]}" $w
  local vo=$T/f$victim.out
  wait_all 90 "${A[1]}" "${A[2]}" "${A[3]}"
  cat "$T"/f?.out >"$T/f.out"
  [ "${RC[*]}" = "0 0 0" ] && ok "f: all three agents finish (exit 0), the thawed one included" ||
    fail "f: exit codes" "${RC[*]}; $(tail -4 "$vo" | tr '\n' ' ')"
  if grep -q 'cddp train: rank [0-9]*: dropped from the job' "$vo" && grep -q '^cddp run: node .* was dropped from the job' "$vo" &&
     grep -q '^cddp run: node .* (agent [0-9]*) comes back as agent [0-9]*' "$vo"; then
    ok "f: thawed: its worker exits with the dropped line, the agent $(grep -h -m1 'comes back' "$vo" | sed 's/^cddp run: node //')"
  else fail "f: the thawed agent" "$(tail -4 "$vo" | tr '\n' ' ')"; fi
  grep -q 'cddp train: node .* joined: generation 2, world 2 -> 3, accumulation 3 -> 2 (global batch 192 kept).*no step redone' "$T/f.out" &&
    ok "f: taken in again: $(grep -h -m1 'joined: generation 2' "$T/f.out" | sed 's/.*cddp train: //')" ||
    fail "f: not taken in again" "$(grep -h 'join\|taken' "$T/f.out" | tr '\n' ' ')"
  exactly_once f 3
}

case_d() {
  # (d) below MIN and nobody comes: --nnodes 2:2, the agent of rank 1 SIGKILLed, --rdzv-timeout 4
  local RUNX=(--rdzv-timeout 4)
  agents d 2 2:2
  progress d 40
  local t0 el; t0=$(date +%s.%N)
  kill -KILL "${A[2]}"; wait "${A[2]}" 2>/dev/null
  wait_all 40 "${A[1]}"
  el=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
  local o=$T/d1.out
  if [ "${RC[0]}" != 0 ] && [ "${RC[0]}" != 137 ] && awk -v e="$el" 'BEGIN { exit !(e >= 3.5 && e < 30) }' &&
     [ "$(grep -c '^cddp run: job below MIN: 1 of at least 2 nodes after losing .* (agent 1, its connection closed); waiting up to 4.0 s for a node to join' "$o")" = 1 ] &&
     [ "$(grep -c '^cddp run: job stopped: 1 of at least 2 nodes left after losing .* (agent 1, its connection closed); no node joined within 4.0 s (--rdzv-timeout)$' "$o")" = 1 ] &&
     [ "$(grep -c '^\[rank 0\] cddp train: job stopped: 1 of at least 2 nodes left' "$o")" = 1 ]; then
    ok "d: below MIN, nobody joins: the survivor and its worker exit non-zero (${RC[0]}) ${el} s after the kill: $(grep -h '^cddp run: job stopped' "$o" | sed 's/^cddp run: //')"
  else fail "d: below MIN" "rc=${RC[*]} el=$el $(grep -h 'job\|cddp run' "$o" | tr '\n' ' ')"; fi
}

case_f() {
  # (f) SIGTERM to the survivor while it waits below MIN (--rdzv-timeout 60): everything ends
  # within a second, nothing left behind, exit 128+15. Its run folder is t: case c's f holds a
  # run, and a fresh start into it is refused
  local RUNX=(--rdzv-timeout 60)
  agents t 2 2:2
  progress t 40
  local w; w=$(worker_of "${A[1]}")
  kill -KILL "${A[2]}"; wait "${A[2]}" 2>/dev/null
  wait_line 20 '^cddp run: job below MIN' "$T/t1.out" || fail "f: no wait line" "$(tail -3 "$T/t1.out")"
  local t0 el; t0=$(date +%s.%N)
  kill -TERM "${A[1]}"
  wait_all 30 "${A[1]}"
  el=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.2f", b - a }')
  if [ "${RC[0]}" = 143 ] && awk -v e="$el" -v b="$(scaled 2)" 'BEGIN { exit !(e < b) }' && ! kill -0 "$w" 2>/dev/null &&
     [ "$(grep -c '^cddp run: the agent on .* received SIGTERM' "$T/t1.out")" = 1 ]; then
    ok "f: SIGTERM while waiting below MIN: agent and worker gone in ${el} s (exit ${RC[0]})"
  else fail "f: SIGTERM while waiting" "rc=${RC[*]} el=$el worker $w $(kill -0 "$w" 2>/dev/null && echo alive) $(grep -h 'cddp run' "$T/t1.out" | tr '\n' ' ')"; fi
}

case_e() {
  # (e) below MIN and a node comes in time: as (d), a 3rd agent started once the survivor waits
  local RUNX=(--rdzv-timeout 8)
  agents e 2 2:2
  progress e 60
  local before kt; before=$(last_step "$T/e/metrics.jsonl"); kt=$(date +%s.%N)
  kill -KILL "${A[2]}"; wait "${A[2]}" 2>/dev/null
  wait_line 10 '^cddp run: job below MIN' "$T/e1.out" || fail "e: no wait line" "$(tail -3 "$T/e1.out" | tr '\n' ' ')"
  agent e 3 2:2
  wait_all 90 "${A[1]}" "${A[3]}"
  cat "$T"/e?.out >"$T/e.out"
  [ "${RC[*]}" = "0 0" ] && ok "e: the 2nd agent SIGKILLed at step $before, a 3rd started as the survivor waited: both finish (exit 0)" ||
    fail "e: exit codes" "${RC[*]}; $(grep -v 'epoch 1/1' "$T/e.out" | tail -5 | tr '\n' ' ')"
  local wline line rline
  wline=$(grep -m1 '^cddp run: job below MIN: 1 of at least 2 nodes after losing .* (agent 1, its connection closed); waiting up to 8.0 s' "$T/e.out")
  line=$(grep -m1 '^cddp run: node .* (agent 1, its connection closed); node .* (agent 2) joined in time: generation 2: world 1 -> 2, ranks 0 -> 0, new 1 (the job goes on)' "$T/e.out")
  rline=$(grep -m1 'cddp train: recovered from the loss of node .* (agent 2) joined in time in .* generation 2, state from rank 0, step [0-9]* redone' "$T/e.out")
  [ -n "$wline" ] && [ -n "$line" ] && [ -n "$rline" ] &&
    ok "e: the survivor waits, then one generation takes the newcomer: ${line#*cddp run: } / ${rline#*cddp train: }" ||
    fail "e: event lines" "$(grep -E 'MIN|lost|recovered|joined|stopped' "$T/e.out" | tr '\n' ' ')"
  local redone first dt; redone=$(echo "$rline" | sed -n 's/.* step \([0-9]*\) redone.*/\1/p')
  read -r first dt < <(grep -v '"eval"' "$T/e/metrics.jsonl" | sed -n 's/.*"step":\([0-9]*\).*"time":\([0-9.]*\).*/\1 \2/p' |
    awk -v k="$kt" -v s="${redone:-0}" '$1 >= s && $2 > k { printf "%d %.2f\n", $1, $2 - k; exit }')
  [ -n "$dt" ] && ok "e: kill -> redone step $first completed in $dt s (the newcomer started once the survivor waited)" || fail "e: no step after the kill" "redone=$redone"
  steps_once e "step $redone redone"
  exactly_once e
  acc_near e
}

case "${1:-all}" in
  a) case_a ;; b) case_b ;; c) case_c ;; d) case_d ;; e) case_e ;; f) case_f ;;
  *) case_a; case_b; case_c; case_d; case_e; case_f ;;
esac
finish
