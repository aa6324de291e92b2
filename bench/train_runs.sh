# train_runs.sh - sourced by the benches that compare `cddp train` settings (precision_bench.sh,
# prefetch_bench.sh): their argument check, and one run under `cddp run` with its metrics kept.
# The sourcing script sets NAME (its own, for messages), OUT, RANKS and CDDP.

# num FLAG VALUE: exits 2 unless VALUE is a number >= 1
num() { [[ "${2:-}" =~ ^[1-9][0-9]*$ ]] || { echo "$NAME: $1 needs a number >= 1, got '${2:-}'" >&2; exit 2; }; }

# train_run RUN CONFIG STEPS [--set ...]: RANKS ranks x 1 BLAS thread, no checkpoints, one eval at
# the end; the metrics in $OUT/runs/RUN/metrics.jsonl, the output in $OUT/RUN.txt
train_run() {
  local run=$1 config=$2 steps=$3; shift 3
  echo "$NAME: $run, $steps steps" >&2
  rm -rf "${OUT:?}/runs/$run"
  timeout 3600 "$CDDP" run --standalone --nproc-per-node "$RANKS" "$CDDP" train --config "$config" \
    --work-dir "$OUT/runs" --name "$run" --set train.max_steps="$steps" --set ddp.threads=1 \
    --set checkpoint.every_steps=0 --set eval.every_epoch=false "$@" \
    >"$OUT/$run.txt" 2>&1 || { tail -5 "$OUT/$run.txt"; exit 1; }
}
