#!/usr/bin/env bash
# zero1_bench.sh - ZeRO-1 (ddp.shard_optimizer) against the unsharded optimizer: peak resident
# memory per rank and samples/s, 2 ranks under `cddp run --standalone`, interleaved in one run.
#
# Usage: bench/zero1_bench.sh [--steps N] [--rounds R] [--models "mlp mlp-adamw gpt"] [--out DIR]
# Each round trains N steps unsharded, then N steps sharded, for each model (mlp:
# configs/fmnist_mlp.yaml, SGD momentum; mlp-adamw: configs/fmnist_mlp_adamw.yaml; gpt:
# configs/gpt_kjv.yaml, AdamW). Rate: samples/s (tokens/s for the GPT) over the steps after
# the 5th, from metrics.jsonl. Peak RSS: each rank's getrusage ru_maxrss at the last per-rank
# gather before the final checkpoint (metrics.jsonl "ranks", every 10 steps), so the figure is
# training's, not the save's (rank 0 holds the whole state while it writes; docs/zero1.md).
# "state" is the optimizer state a rank holds, from the parameter count: the saving expected.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
STEPS=60 ROUNDS=2 MODELS="mlp mlp-adamw gpt" OUT=""
while [ $# -gt 0 ]; do
  case "$1" in
    --steps) STEPS=${2:-}; shift 2; [[ "$STEPS" =~ ^[1-9][0-9]*$ ]] && [ "$STEPS" -ge 20 ] || { echo "zero1_bench.sh: --steps needs a number >= 20" >&2; exit 2; } ;;
    --rounds) ROUNDS=${2:-}; shift 2; [[ "$ROUNDS" =~ ^[1-9][0-9]*$ ]] || { echo "zero1_bench.sh: --rounds needs a positive number" >&2; exit 2; } ;;
    --models) MODELS=${2:-}; shift 2 ;;
    --out) OUT=${2:?--out needs a directory}; shift 2 ;;
    -h|--help) sed -n '2,13s/^# \{0,1\}//p' "$0"; exit 0 ;;
    *) echo "zero1_bench.sh: unknown argument '$1' (--steps N, --rounds R, --models LIST, --out DIR)" >&2; exit 2 ;;
  esac
done
for m in $MODELS; do
  case $m in mlp|mlp-adamw|gpt) ;; *) echo "zero1_bench.sh: --models: unknown model '$m' (mlp, mlp-adamw, gpt)" >&2; exit 2 ;; esac
done
OUT=${OUT:-$(mktemp -d /tmp/cddp-zero1-bench.XXXXXX)}
mkdir -p "$OUT"
CDDP=${CDDP:-$PWD/build/cddp}
[ -x "$CDDP" ] || { echo "zero1_bench.sh: $CDDP not built (make)" >&2; exit 1; }
config_of() { case $1 in mlp) echo configs/fmnist_mlp.yaml ;; mlp-adamw) echo configs/fmnist_mlp_adamw.yaml ;; gpt) echo configs/gpt_kjv.yaml ;; esac; }

# run MODEL SHARD ROUND: one training run; prints "rate rss0 rss1 params buffers"
run() {
  local name="$1-$2-$3" cfg; cfg=$(config_of "$1")
  rm -rf "${OUT:?}/runs/$name"
  echo "zero1_bench.sh: $1, shard_optimizer=$2, round $3: $STEPS steps" >&2
  timeout 900 "$CDDP" run --standalone --nproc-per-node 2 "$CDDP" train --config "$cfg" --work-dir "$OUT/runs" \
    --name "$name" --set train.max_steps="$STEPS" --set ddp.threads=1 --set eval.every_epoch=false \
    --set checkpoint.every_steps=0 --set log.rank_every=10 --set schedule.warmup_steps=5 --set ddp.shard_optimizer="$2" >"$OUT/$name.txt" 2>&1 ||
    { tail -3 "$OUT/$name.txt" >&2; echo "- - - - -"; return; }
  local params buffers
  params=$(sed -n 's/.*cddp train: [^,]*, \([0-9]*\) parameters;.*/\1/p' "$OUT/$name.txt" | head -1)
  buffers=$(grep -q 'type: adamw' "$OUT/runs/$name/config.yaml" && echo 2 || echo 1) # m and v, or momentum
  awk -F'[:,}]' -v p="$params" -v b="$buffers" '
    { for (i = 1; i < NF; i++) { if ($i ~ /"step"$/) s = $(i+1); if ($i ~ /"samples"$/) n = $(i+1);
        if ($i ~ /"tokens_per_s"$/) tk = $(i+1); if ($i ~ /"samples_per_s"$/) sp = $(i+1); if ($i ~ /"step_ms"$/) t = $(i+1) }
      u = sp > 0 ? tk / sp : 1 }
    s > 5 { N += n * u; T += t }
    /"ranks":/ { r0 = $0; sub(/.*"rank":0,[^}]*"peak_rss_mb":/, "", r0); sub(/[^0-9.].*/, "", r0)
                 r1 = $0; sub(/.*"rank":1,[^}]*"peak_rss_mb":/, "", r1); sub(/[^0-9.].*/, "", r1) }
    END { if (T > 0) printf "%.0f %s %s %s %s\n", N / T * 1000, r0, r1, p, b; else print "- - - - -" }' "$OUT/runs/$name/metrics.jsonl"
}

printf '%-10s %-5s %-9s %11s %14s %14s %12s\n' model round optimizer "rate/s" "peak RSS r0" "peak RSS r1" "state/rank" >"$OUT/table.txt"
for m in $MODELS; do
  for r in $(seq "$ROUNDS"); do
    for z in false true; do
      read -r rate rss0 rss1 params buffers <<<"$(run "$m" "$z" "$r")"
      state="-"
      [ "$params" != - ] && state=$(awk -v p="$params" -v b="$buffers" -v z=$z 'BEGIN { printf "%.1f MB", p * 4 * b / (z == "true" ? 2 : 1) / 1048576 }')
      printf '%-10s %-5s %-9s %11s %11s MB %11s MB %12s\n' "$m" "$r" "$([ $z = true ] && echo sharded || echo whole)" \
        "$rate" "$rss0" "$rss1" "$state" >>"$OUT/table.txt"
    done
  done
done
echo
echo "ZeRO-1 against the whole optimizer state, 2 ranks x 1 BLAS thread, $STEPS steps a run (rate: samples/s; gpt: tokens/s)"
cat "$OUT/table.txt"
# the saving per model: mean over rounds of (whole - sharded) peak RSS, each rank
awk 'NR > 1 && $5 != "-" { k = $1; if ($3 == "whole") { w0[k] += $5; w1[k] += $7; wr[k] += $4; nw[k]++ }
                          else { s0[k] += $5; s1[k] += $7; sr[k] += $4; ns[k]++ } }
     END { for (k in nw) if (ns[k]) printf "%-10s saved per rank: r0 %.1f MB, r1 %.1f MB; speed sharded/whole %.3f\n", k,
           w0[k] / nw[k] - s0[k] / ns[k], w1[k] / nw[k] - s1[k] / ns[k], (sr[k] / ns[k]) / (wr[k] / nw[k]) }' "$OUT/table.txt"
echo "logs in $OUT"
