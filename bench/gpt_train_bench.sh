#!/usr/bin/env bash
# gpt_train_bench.sh - `cddp train --config configs/gpt_kjv.yaml` against the PyTorch peer
# (bench/peers/gpt_kjv.py: the same GPT, text, split and optimizer), in one run.
#
# Usage: bench/gpt_train_bench.sh [--steps N] [--out DIR]
# Rows: cddp 2 ranks x 1 BLAS thread (cddp run), PyTorch DDP over gloo 2 ranks x 1 thread
# (torchrun), and one PyTorch process with 2 threads (OMP_WAIT_POLICY=PASSIVE); the peers with
# OPENBLAS_CORETYPE=SkylakeX. Tokens/s over the timed steps (the first 5 are warm-up), and the
# validation loss (nats/byte) after the same number of steps.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
ROOT=$PWD
STEPS=200
OUT=""
while [ $# -gt 0 ]; do
  case "$1" in
    --steps) STEPS=${2:-}; shift 2; [[ "$STEPS" =~ ^[1-9][0-9]*$ ]] && [ "$STEPS" -gt 100 ] || { echo "gpt_train_bench.sh: --steps needs a number > 100 (the warmup)" >&2; exit 2; } ;;
    --out) OUT=${2:?--out needs a directory}; shift 2 ;;
    -h|--help) sed -n '2,9s/^# \{0,1\}//p' "$0"; exit 0 ;;
    *) echo "gpt_train_bench.sh: unknown argument '$1' (--steps N, --out DIR)" >&2; exit 2 ;;
  esac
done
OUT=${OUT:-$(mktemp -d /tmp/cddp-gpt-bench.XXXXXX)}
mkdir -p "$OUT"
scripts/install-deps.sh bench || exit 1
make -j"$(nproc)" cli >"$OUT/build.log" 2>&1 || { tail -20 "$OUT/build.log"; exit 1; }
CDDP=$ROOT/build/cddp
PY=/usr/bin/python3
PEER=$ROOT/bench/peers/gpt_kjv.py
step() { echo "gpt_train_bench.sh: $*" >&2; }

step "cddp train: 2 ranks x 1 thread, $STEPS steps"
rm -rf "${OUT:?}/runs/gpt" # a reused --out: a fresh run, not one refused for the last one's folder
timeout 1800 "$CDDP" run --standalone --nproc-per-node 2 "$CDDP" train --config configs/gpt_kjv.yaml \
  --work-dir "$OUT/runs" --name gpt --set train.max_steps="$STEPS" --set ddp.threads=1 \
  --set checkpoint.every_steps=0 >"$OUT/cddp.txt" 2>&1 || { tail -5 "$OUT/cddp.txt"; exit 1; }
ours=$(awk -F'[:,}]' '!/"eval"/ { for (i = 1; i < NF; i++) { if ($i ~ /"step"$/) s = $(i+1);
         if ($i ~ /"samples"$/) n = $(i+1); if ($i ~ /"step_ms"$/) t = $(i+1) } }
       !/"eval"/ && s > 5 { N += n; T += t } END { if (T > 0) printf "%.0f", N * 128 / T * 1000; else print "-" }' "$OUT/runs/gpt/metrics.jsonl")
ours_val=$(grep '"eval"' "$OUT/runs/gpt/metrics.jsonl" | tail -1 | sed -n 's/.*"loss":\([0-9.]*\).*/\1/p')

export OMP_WAIT_POLICY=PASSIVE OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-SkylakeX}
step "PyTorch DDP (gloo): 2 ranks x 1 thread, $STEPS steps"
(cd "$OUT" && OMP_NUM_THREADS=1 timeout 3600 "$PY" -m torch.distributed.run --standalone --nproc_per_node 2 \
   --redirects 1 --tee 1 "$PEER" --threads 1 --max-steps "$STEPS") >"$OUT/peer-ddp.txt" 2>&1
step "PyTorch, one process x 2 threads, $STEPS steps"
OMP_NUM_THREADS=2 timeout 3600 "$PY" "$PEER" --threads 2 --max-steps "$STEPS" >"$OUT/peer-single.txt" 2>&1
rate() { sed -n 's/.*peer gpt: .*, \([0-9]*\) tokens\/s.*/\1/p' "$1" | tail -1; }
vloss() { sed -n 's/.*val loss \([0-9.]*\).*/\1/p' "$1" | tail -1; }

printf '\n%-44s %12s %16s\n' "GPT 4x4x256, context 128, batch 32, $STEPS steps" "tokens/s" "val nats/byte"
printf '%-44s %12s %16s\n' "cddp train, 2 ranks x 1 thread" "$ours" "${ours_val:--}"
printf '%-44s %12s %16s\n' "PyTorch DDP gloo, 2 ranks x 1 thread" "$(rate "$OUT/peer-ddp.txt")" "$(vloss "$OUT/peer-ddp.txt")"
printf '%-44s %12s %16s\n' "PyTorch one process, 2 threads (PASSIVE)" "$(rate "$OUT/peer-single.txt")" "$(vloss "$OUT/peer-single.txt")"
printf 'goal: cddp >= 8300 tokens/s; logs in %s\n' "$OUT"
