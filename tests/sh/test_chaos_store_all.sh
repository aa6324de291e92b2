#!/usr/bin/env bash
# test_chaos_store_all.sh - the chaos loop's store-host kills in restart-all mode (every torch
# script's; docs/store.md, "Failover"): each run is 3 agents x 1 worker of a checkpointing `cddp
# train` under `cddp run --nnodes 2:3 --restart-mode all --resume-from latest`, the checkpoint
# interval and the step of the kill drawn at random; the store's host (agent and worker) is
# SIGKILLed. A survivor takes the store over, both restart their workers on the new store and
# resume from the last checkpoint. Each run must complete (both survivors exit 0), train every
# step and sample once, and leave only checkpoints that verify. CHAOS_ALL_RUNS runs (1 here, to
# keep the suite short; CHAOS_ALL_RUNS=20 for the full loop), CHAOS_SEED the draw.
cd "$(dirname "$0")/../.." && source tests/sh/lib.sh
source tests/sh/lib_elastic.sh
elastic_setup cddp-chaos-store-all
# store_host: the index (1..3) of the agent whose server listens on the endpoint's port
store_host() { local i; for i in 1 2 3; do ss -ltnp 2>/dev/null | grep ":$P " | grep -q "pid=${A[$i]}," && { echo "$i"; return; }; done; }
RUNS=${CHAOS_ALL_RUNS:-1} SEED=${CHAOS_SEED:-$$}
RANDOM=$SEED
completed=0 corrupt=0 ckpts=0
for i in $(seq "$RUNS"); do
  name=c$i every=$((3 + RANDOM % 18)) at=$((15 + RANDOM % 260))
  MODE=all
  agents "$name" 3 2:3 --set checkpoint.every_steps=$every --set checkpoint.keep=1000 --resume-from latest
  MODE=replace
  why=()
  progress "$name" "$at"
  h=$(store_host)
  [ -n "$h" ] || { fail "run $i: no agent listens on the store's port $P" "$(tail -2 "$T/${name}1.out" | tr '\n' ' ')"; continue; }
  before=$(last_step "$T/$name/metrics.jsonl")
  kill -KILL "${A[$h]}" $(worker_of "${A[$h]}"); wait "${A[$h]}" 2>/dev/null
  surv=(); for j in 1 2 3; do [ "$j" != "$h" ] && surv+=("${A[$j]}"); done
  wait_all 90 "${surv[@]}"
  cat "$T/$name"?.out >"$T/$name.out"
  [ "${RC[*]}" = "0 0" ] || why+=("survivors exit ${RC[*]}: $(grep -hv '^\[rank\|epoch 1/1' "$T/$name.out" | tail -2 | tr '\n' ' ')")
  grep -q "^cddp run: the store's host (agent 0 at 127.0.0.1:$P) is lost; agent [12] took the store over" "$T/$name.out" ||
    why+=("no take-over line")
  m=$T/$name/metrics.jsonl
  steps=$(grep -vc '"eval"' "$m"); uniq=$(grep -v '"eval"' "$m" | sed -n 's/.*"step":\([0-9]*\).*/\1/p' | sort -u | wc -l)
  [ "$steps" = 312 ] && [ "$uniq" = 312 ] || why+=("$steps step lines, $uniq distinct (want 312)")
  v=$(samples_verdict "$T/$name" 312 192)
  [ "$v" = clean ] || why+=("samples: $v")
  verify_checkpoints "$T/$name"
  ckpts=$((ckpts + nc)) corrupt=$((corrupt + nbad))
  from=$(grep -m1 -o 'cddp train: resuming from .* (step [0-9]*' "$T/$name.out" | sed 's/.*(step //')
  if [ ${#why[@]} = 0 ]; then
    completed=$((completed + 1))
    ok "run $i (checkpoint every $every steps, store's host killed at step $before): both survivors exit 0, resumed from step ${from:-?}, 312 steps and every sample once, $nc checkpoints verified"
  else fail "run $i (checkpoint every $every steps, store's host killed at step $before)" "${why[*]}"; fi
done
echo "# chaos restart-all: $completed of $RUNS runs completed, $corrupt corrupt checkpoints ($ckpts verified) (seed $SEED)"
finish
