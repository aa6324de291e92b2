#!/usr/bin/env bash
# test_elastic_one.sh - a world of one grows back in place: 2 agents x 1 worker under `cddp run
# --nnodes 1:2 --restart-mode replace`; node 1 is lost (SIGKILL of its agent, or SIGSTOP of the
# agent and its worker for FREEZE_S, 10 by default) and the job goes on as a world of one; then
# node 1 comes back (started again, or thawed) and is taken in as a join: the survivor sends it
# the state, no step is redone, no restart spent, nothing read from disk. With
# checkpoint.every_steps=200 and with 0 (no checkpoint at all: the disk has nothing to give).
cd "$(dirname "$0")/../.." && source tests/sh/lib.sh
source tests/sh/lib_elastic.sh
elastic_setup cddp-one-test
# The freeze must outlast the heartbeat timeout (2 s here, lib_elastic) so that node 1 is dropped
# while frozen and comes back as a new agent: the shrink is awaited before the freeze's time
# starts, so any FREEZE_S covers that; 10 s (5 timeouts) keeps the job short (40 s: 30 s longer)
FREEZE_S=${FREEZE_S:-10}

# grown NAME: the lines of the shrink to one and of the join back, in place, in $T/NAME.out
grown() {
  local shrink join rjoin
  shrink=$(grep -m1 'cddp train: recovered from the loss of node .* world 2 -> 1' "$T/$1.out")
  join=$(grep -m1 'cddp run: join node .*: generation 2: world 1 -> 2, ranks 0 -> 0, new 1' "$T/$1.out")
  rjoin=$(grep -m1 'cddp train: node .* joined: generation 2, world 1 -> 2, accumulation 6 -> 3 (global batch 192 kept), state from rank 0, no step redone' "$T/$1.out")
  [ -n "$shrink" ] && [ -n "$join" ] && [ -n "$rjoin" ] && ok "$1: shrunk to one, grown back in place: ${rjoin#*cddp train: }" ||
    fail "$1: grown back" "$(grep -hE 'world|joined|recovery|restored' "$T/$1.out" | grep -v 'MLP' | head -6 | tr '\n' ' ')"
  ! grep -qE 'no in-place recovery|restored step|restarting|from disk' "$T/$1.out" && ok "$1: no restart spent, nothing read from disk" ||
    fail "$1: went to disk" "$(grep -hE 'no in-place|restored step|restarting|from disk' "$T/$1.out" | head -3 | tr '\n' ' ')"
}

# kill_back NAME EVERY: node 1's agent SIGKILLed at step 40, started again 20 steps later
kill_back() {
  agents "$1" 2 1:2 --set checkpoint.every_steps="$2"
  progress "$1" 40
  kill -KILL "${A[2]}"; wait "${A[2]}" 2>/dev/null
  wait_line 30 'world 2 -> 1' "$T/${1}1.out" || fail "$1: no shrink to one" "$(tail -2 "$T/${1}1.out" | tr '\n' ' ')"
  await "$1: 20 steps alone" 60 step_reached "$T/$1/metrics.jsonl" $(($(last_step "$T/$1/metrics.jsonl") + 20))
  agent "$1" 2 1:2 --set checkpoint.every_steps="$2"
  all_exit0 "$1" 120 "SIGKILLed at step 40 and started again: both agents" "${A[1]}" "${A[2]}"
  grown "$1"
  steps_once "$1" "checkpoint.every_steps=$2"
  exactly_once "$1"
}
kill_back k200 200
kill_back k0 0

# freeze: node 1's agent and worker SIGSTOPped for FREEZE_S: dropped after the heartbeat timeout,
# thawed: it comes back as a new agent and is taken in. Rank 0 sleeps FREEZE_S + 20 ms a step (3
# epochs, 936 steps: about 28 s for a 10 s freeze) so the job still runs when the node is back.
SLOW=(--set train.epochs=3 --set debug.slow_rank=0 --set debug.slow_ms=$((FREEZE_S + 20)) --set checkpoint.every_steps=0)
agents fz 2 1:2 "${SLOW[@]}"
progress fz 20
w=$(worker_of "${A[2]}")
kill -STOP "${A[2]}" $w
wait_line 20 'world 2 -> 1' "$T/fz1.out" || fail "fz: no shrink to one" "$(tail -2 "$T/fz1.out" | tr '\n' ' ')"
sleep "$FREEZE_S"
before=$(last_step "$T/fz/metrics.jsonl")
kill -CONT "${A[2]}" $w
all_exit0 fz 180 "node 1 frozen ${FREEZE_S} s at step 20 (the job at step $before when thawed): both agents" "${A[1]}" "${A[2]}"
grown fz
steps_once fz "frozen" 936
exactly_once fz 3
finish
