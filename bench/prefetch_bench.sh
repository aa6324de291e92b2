#!/usr/bin/env bash
# prefetch_bench.sh - data.prefetch false against true, in one run: data_ms per step (the time the
# step waits for its micro-batches) and its share of the step, for the MLP (configs/fmnist_mlp.yaml)
# and the GPT (configs/gpt_kjv.yaml), the two settings taking turns round after round.
#
# Usage: bench/prefetch_bench.sh [--mlp-steps N] [--gpt-steps N] [--rounds R] [--ranks P] [--out DIR]
# Defaults: 234 MLP steps, 30 GPT steps, 2 rounds, 2 ranks x 1 BLAS thread (cddp run).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
NAME=prefetch_bench.sh MLP_STEPS=234 GPT_STEPS=30 ROUNDS=2 RANKS=2 OUT=""
source bench/train_runs.sh
while [ $# -gt 0 ]; do
  case "$1" in
    --mlp-steps) num "$1" "${2:-}"; MLP_STEPS=$2; shift 2 ;;
    --gpt-steps) num "$1" "${2:-}"; GPT_STEPS=$2; shift 2 ;;
    --rounds) num "$1" "${2:-}"; ROUNDS=$2; shift 2 ;;
    --ranks) num "$1" "${2:-}"; RANKS=$2; shift 2 ;;
    --out) OUT=${2:?--out needs a directory}; shift 2 ;;
    -h|--help) sed -n '2,8s/^# \{0,1\}//p' "$0"; exit 0 ;;
    *) echo "prefetch_bench.sh: unknown argument '$1' (--mlp-steps, --gpt-steps, --rounds, --ranks, --out)" >&2; exit 2 ;;
  esac
done
OUT=${OUT:-$(mktemp -d /tmp/cddp-prefetch-bench.XXXXXX)}
mkdir -p "$OUT"
make -j"$(nproc)" cli >"$OUT/build.log" 2>&1 || { tail -20 "$OUT/build.log"; exit 1; }
CDDP=$PWD/build/cddp

run() { train_run "$1-$2-$3" "$5" "$4" --set data.prefetch="$2" "${@:6}"; } # MODEL PREFETCH ROUND STEPS CONFIG [--set ...]
# data_ms per step and its share of step_ms, over the steps after the 5th
share() {
  awk -F'[:,}]' '!/"eval"/ { for (i = 1; i < NF; i++) { if ($i ~ /"step"$/) s = $(i+1);
         if ($i ~ /"data_ms"$/) d = $(i+1); if ($i ~ /"step_ms"$/) t = $(i+1) } }
       !/"eval"/ && s > 5 { D += d; T += t; n++ } END { printf "%.3f %.2f %.1f", D / n, 100 * D / T, T / n }' "$@"
}
for r in $(seq 1 "$ROUNDS"); do
  for p in $([ $((r % 2)) = 1 ] && echo "false true" || echo "true false"); do
    run mlp "$p" "$r" "$MLP_STEPS" configs/fmnist_mlp.yaml
    run gpt "$p" "$r" "$GPT_STEPS" configs/gpt_kjv.yaml --set schedule.warmup_steps=$((GPT_STEPS / 5))
  done
done
printf '\n%-8s %-14s %14s %12s %12s\n' model data.prefetch "data ms/step" "of step" "step ms"
for m in mlp gpt; do
  for p in false true; do
    files=(); for r in $(seq 1 "$ROUNDS"); do files+=("$OUT/runs/$m-$p-$r/metrics.jsonl"); done
    share "${files[@]}" | awk -v m="$m" -v p="$p" '{ printf "%-8s %-14s %14s %11s%% %12s\n", m, p, $1, $2, $3 }'
  done
done
echo "goal: data_ms <= 1% of the step. $RANKS ranks x 1 thread, $ROUNDS rounds in turns; logs in $OUT"
