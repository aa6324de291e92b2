#!/usr/bin/env bash
# precision_bench.sh - train.precision bf16 against fp32, in one run: the GPT (configs/gpt_kjv.yaml)
# and the MLP (configs/fmnist_mlp.yaml), each trained the same number of steps in both precisions,
# the two runs of a round back to back (the first of a round alternates), then speed and validation
# loss side by side.
#
# Usage: bench/precision_bench.sh [--gpt-steps N] [--mlp-steps N] [--rounds R] [--ranks P] [--out DIR]
# Defaults: 120 GPT steps, 234 MLP steps (one epoch), 1 round, 2 ranks x 1 BLAS thread (cddp run).
# Speed: samples (MLP) or tokens (GPT) per second over the timed steps (the first 5 are warm-up),
# the median over rounds; loss: the eval after the last step (nats/byte for the GPT).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
NAME=precision_bench.sh GPT_STEPS=120 MLP_STEPS=234 ROUNDS=1 RANKS=2 OUT=""
source bench/train_runs.sh
while [ $# -gt 0 ]; do
  case "$1" in
    --gpt-steps) num "$1" "${2:-}"; GPT_STEPS=$2; shift 2 ;;
    --mlp-steps) num "$1" "${2:-}"; MLP_STEPS=$2; shift 2 ;;
    --rounds) num "$1" "${2:-}"; ROUNDS=$2; shift 2 ;;
    --ranks) num "$1" "${2:-}"; RANKS=$2; shift 2 ;;
    --out) OUT=${2:?--out needs a directory}; shift 2 ;;
    -h|--help) sed -n '2,11s/^# \{0,1\}//p' "$0"; exit 0 ;;
    *) echo "precision_bench.sh: unknown argument '$1' (--gpt-steps, --mlp-steps, --rounds, --ranks, --out)" >&2; exit 2 ;;
  esac
done
OUT=${OUT:-$(mktemp -d /tmp/cddp-precision-bench.XXXXXX)}
mkdir -p "$OUT"
make -j"$(nproc)" cli >"$OUT/build.log" 2>&1 || { tail -20 "$OUT/build.log"; exit 1; }
CDDP=$PWD/build/cddp

# run MODEL PRECISION ROUND STEPS CONFIG [--set ...]: one training run, in $OUT/runs/MODEL-PRECISION-ROUND
run() { train_run "$1-$2-$3" "$5" "$4" --set train.precision="$2" "${@:6}"; }
# rate FILE UNITS: samples x units per second over the steps after the 5th
rate() {
  awk -F'[:,}]' -v u="$2" '!/"eval"/ { for (i = 1; i < NF; i++) { if ($i ~ /"step"$/) s = $(i+1);
         if ($i ~ /"samples"$/) n = $(i+1); if ($i ~ /"step_ms"$/) t = $(i+1) } }
       !/"eval"/ && s > 5 { N += n; T += t } END { if (T > 0) printf "%.0f", N * u / T * 1000; else print "-" }' "$1"
}
vloss() { grep '"eval"' "$1" | tail -1 | sed -n 's/.*"loss":\([0-9.]*\).*/\1/p'; }
median() { sort -n | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

bench_model() { # MODEL STEPS CONFIG UNITS [--set ...]
  for r in $(seq 1 "$ROUNDS"); do
    if [ $((r % 2)) = 1 ]; then run "$1" fp32 "$r" "$2" "$3" "${@:5}"; run "$1" bf16 "$r" "$2" "$3" "${@:5}"
    else run "$1" bf16 "$r" "$2" "$3" "${@:5}"; run "$1" fp32 "$r" "$2" "$3" "${@:5}"; fi
  done
  for p in fp32 bf16; do
    for r in $(seq 1 "$ROUNDS"); do rate "$OUT/runs/$1-$p-$r/metrics.jsonl" "$4"; echo; done | median >"$OUT/$1-$p.rate"
    vloss "$OUT/runs/$1-$p-1/metrics.jsonl" >"$OUT/$1-$p.loss"
  done
}
# the config's 100 warm-up steps, or a fifth of a shorter run
bench_model gpt "$GPT_STEPS" configs/gpt_kjv.yaml 128 --set schedule.warmup_steps=$((GPT_STEPS > 500 ? 100 : GPT_STEPS / 5))
bench_model mlp "$MLP_STEPS" configs/fmnist_mlp.yaml 1

printf '\n%-34s %14s %14s %8s %12s %12s %9s\n' "$RANKS ranks x 1 thread, $ROUNDS round(s)" "fp32 /s" "bf16 /s" "speed" "fp32 loss" "bf16 loss" "loss"
row() { # MODEL LABEL
  local f b lf lb
  f=$(cat "$OUT/$1-fp32.rate") b=$(cat "$OUT/$1-bf16.rate") lf=$(cat "$OUT/$1-fp32.loss") lb=$(cat "$OUT/$1-bf16.loss")
  printf '%-34s %14s %14s %7.2fx %12s %12s %+8.2f%%\n' "$2" "$f" "$b" "$(echo "$b / $f" | bc -l)" "$lf" "$lb" \
    "$(echo "($lb - $lf) / $lf * 100" | bc -l)"
}
row gpt "GPT 4x4x256 ($GPT_STEPS steps, tokens)"
row mlp "MLP 784-1024-1024-10 ($MLP_STEPS st., samples)"
echo "goals: bf16 loss within 1% of fp32's; GPT bf16 >= 1.3x fp32. Logs in $OUT"
