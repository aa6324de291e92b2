#!/usr/bin/env bash
# gpt_train_bench.sh - `cddp train --config configs/gpt_kjv.yaml` against the PyTorch peer
# (bench/peers/gpt_kjv.py: the same GPT, text, split and optimizer), in one run.
#
# Usage: bench/gpt_train_bench.sh [--steps N] [--out DIR]
# Rows, in fp32 and, where the CPU has AVX512-BF16, in bf16 (cddp's train.precision bf16;
# torch.autocast's bf16 matmuls through oneDNN), each pair run back to back: cddp 2 ranks x 1
# thread (cddp run), PyTorch DDP over gloo 2 ranks x 1 thread (torchrun); then one PyTorch
# process with 2 threads (OMP_WAIT_POLICY=PASSIVE). The peers run with the best
# OPENBLAS_CORETYPE for the CPU (scripts/openblas-coretype.sh).
# Tokens/s over the timed steps (the first 5 are warm-up), the validation loss (nats/byte)
# after the same number of steps, each precision's ratio, and best against best.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
ROOT=$PWD
STEPS=200
OUT=""
while [ $# -gt 0 ]; do
  case "$1" in
    --steps) STEPS=${2:-}; shift 2; [[ "$STEPS" =~ ^[1-9][0-9]*$ ]] && [ "$STEPS" -gt 100 ] || { echo "gpt_train_bench.sh: --steps needs a number > 100 (the warmup)" >&2; exit 2; } ;;
    --out) OUT=${2:?--out needs a directory}; shift 2 ;;
    -h|--help) sed -n '2,11s/^# \{0,1\}//p' "$0"; exit 0 ;;
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

# cddp's tokens/s over the timed steps and its last validation loss, from metrics.jsonl
cddp_rate() { awk -F'[:,}]' '!/"eval"/ { for (i = 1; i < NF; i++) { if ($i ~ /"step"$/) s = $(i+1);
         if ($i ~ /"samples"$/) n = $(i+1); if ($i ~ /"step_ms"$/) t = $(i+1) } }
       !/"eval"/ && s > 5 { N += n; T += t } END { if (T > 0) printf "%.0f", N * 128 / T * 1000; else print "-" }' "$1"; }
cddp_val() { grep '"eval"' "$1" | tail -1 | sed -n 's/.*"loss":\([0-9.]*\).*/\1/p'; }
rate() { sed -n 's/.*peer gpt: .*, \([0-9]*\) tokens\/s.*/\1/p' "$1" | tail -1; }
vloss() { sed -n 's/.*val loss \([0-9.]*\).*/\1/p' "$1" | tail -1; }
# PRECS: bf16 too where the CPU has AVX512-BF16 (cddp refuses it elsewhere, and torch's autocast
# then runs bf16 in software, which is no configuration anyone would choose)
PRECS="fp32"
grep -qw avx512_bf16 /proc/cpuinfo && PRECS="fp32 bf16"

run_cddp() { # PREC
  step "cddp train: 2 ranks x 1 thread, $1, $STEPS steps"
  rm -rf "${OUT:?}/runs/gpt-$1" # a reused --out: a fresh run, not one refused for the last one's folder
  timeout 1800 "$CDDP" run --standalone --nproc-per-node 2 "$CDDP" train --config configs/gpt_kjv.yaml \
    --work-dir "$OUT/runs" --name "gpt-$1" --set train.max_steps="$STEPS" --set ddp.threads=1 \
    --set train.precision="$1" --set checkpoint.every_steps=0 >"$OUT/cddp-$1.txt" 2>&1 ||
    { tail -5 "$OUT/cddp-$1.txt"; exit 1; }
}
run_peer_ddp() { # PREC
  step "PyTorch DDP (gloo): 2 ranks x 1 thread, $1, $STEPS steps"
  (cd "$OUT" && OMP_NUM_THREADS=1 timeout 3600 "$PY" -m torch.distributed.run --standalone --nproc_per_node 2 \
     --redirects 1 --tee 1 "$PEER" --threads 1 --max-steps "$STEPS" --precision "$1") >"$OUT/peer-ddp-$1.txt" 2>&1
}
export OMP_WAIT_POLICY=PASSIVE OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-$("$ROOT"/scripts/openblas-coretype.sh)}
for p in $PRECS; do # interleaved, so the VM's drift falls on both sides alike
  run_cddp "$p"
  run_peer_ddp "$p"
done
step "PyTorch, one process x 2 threads, fp32, $STEPS steps"
OMP_NUM_THREADS=2 timeout 3600 "$PY" "$PEER" --threads 2 --max-steps "$STEPS" >"$OUT/peer-single.txt" 2>&1

ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a + 0 > 0 && b + 0 > 0) printf "%.2fx", a / b; else print "-" }'; }
printf '\n%-46s %12s %16s %14s\n' "GPT 4x4x256, context 128, batch 32, $STEPS steps" "tokens/s" "val nats/byte" "vs PyTorch DDP"
best_ours=0 best_peer=0
for p in $PRECS; do
  o=$(cddp_rate "$OUT/runs/gpt-$p/metrics.jsonl") r=$(rate "$OUT/peer-ddp-$p.txt")
  printf '%-46s %12s %16s %14s\n' "cddp train, 2 ranks x 1 thread, $p" "$o" "$(cddp_val "$OUT/runs/gpt-$p/metrics.jsonl")" "$(ratio "$o" "$r")"
  printf '%-46s %12s %16s\n' "PyTorch DDP gloo, 2 ranks x 1 thread, $p" "${r:--}" "$(vloss "$OUT/peer-ddp-$p.txt")"
  [ "$o" -gt "$best_ours" ] 2>/dev/null && best_ours=$o
  [ "${r:-0}" -gt "$best_peer" ] 2>/dev/null && best_peer=$r
done
printf '%-46s %12s %16s\n' "PyTorch one process, 2 threads, fp32" "$(rate "$OUT/peer-single.txt")" "$(vloss "$OUT/peer-single.txt")"
printf 'best against best (each side'"'"'s fastest precision): %s vs %s tokens/s = %s\n' "$best_ours" "$best_peer" "$(ratio "$best_ours" "$best_peer")"
printf 'logs in %s\n' "$OUT"
