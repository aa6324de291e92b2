#!/usr/bin/env bash
# train_bench.sh - `cddp train` against PyTorch on the same MLP, data and batch, in one run.
#
# Usage: bench/train_bench.sh [--steps N] [--rounds R] [--out DIR] [--config PATH]
# Rows: cddp 2 ranks x 1 BLAS thread (cddp run) as configured (ddp.overlap and
# ddp.shard_optimizer auto: the first steps time the all-reduce overlapped with backward, after
# it, and ZeRO-1 sharing the weights, and keep the fastest: the row names its choice), then each
# way forced: all-reduce overlapped, all-reduce after backward, ZeRO-1;
# PyTorch DDP over gloo 2 ranks x 1 thread (torchrun), and the best single PyTorch process (2 threads, OMP_WAIT_POLICY=PASSIVE), the
# peers with the OPENBLAS_CORETYPE of scripts/openblas-coretype.sh (their fastest kernels on the CPU).
# Speed is samples/s over the timed steps (the first 5 are warm-up), from each program's own
# log: cddp's metrics.jsonl, the peer's final line. cddp's row also shows the fraction of
# step time that was exposed communication (all-reduce not hidden behind backward).
# --rounds R (default 1) runs the cddp rows and PyTorch DDP R times, interleaved, and prints
# each round's ratio and the medians: this VM drifts within minutes, so one pair is noisy.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
ROOT=$PWD
STEPS=400
ROUNDS=1
OUT=""
CONFIG=configs/fmnist_mlp.yaml
while [ $# -gt 0 ]; do
  case "$1" in
    --steps) STEPS=${2:-}; shift 2; [[ "$STEPS" =~ ^[1-9][0-9]*$ ]] || { echo "train_bench.sh: --steps needs a positive number" >&2; exit 2; } ;;
    --rounds) ROUNDS=${2:-}; shift 2; [[ "$ROUNDS" =~ ^[1-9][0-9]*$ ]] || { echo "train_bench.sh: --rounds needs a positive number" >&2; exit 2; } ;;
    --out) OUT=${2:?--out needs a directory}; shift 2 ;;
    --config) CONFIG=${2:?--config needs a path}; shift 2 ;;
    -h|--help) sed -n '2,10s/^# \{0,1\}//p' "$0"; exit 0 ;;
    *) echo "train_bench.sh: unknown argument '$1' (--steps N, --rounds R, --out DIR, --config PATH)" >&2; exit 2 ;;
  esac
done
[ -r "$CONFIG" ] || { echo "train_bench.sh: cannot read config $CONFIG" >&2; exit 2; }
OUT=${OUT:-$(mktemp -d /tmp/cddp-train-bench.XXXXXX)}
mkdir -p "$OUT"
scripts/install-deps.sh bench || exit 1
make -j"$(nproc)" cli >"$OUT/build.log" 2>&1 || { tail -20 "$OUT/build.log"; exit 1; }
CDDP=$ROOT/build/cddp
PY=/usr/bin/python3
PEER=$ROOT/bench/peers/ddp_fmnist.py
step() { echo "train_bench.sh: $*" >&2; }

# cddp_row NAME EXTRA...: trains STEPS steps, prints "samples/s exposed-comm-%"
cddp_row() {
  local name=$1; shift
  step "cddp train ($name): 2 ranks x 1 thread, $STEPS steps"
  rm -rf "${OUT:?}/runs/$name" # a reused --out: a fresh run, not one refused for the last one's folder
  CDDP_DEBUG=INFO CDDP_DEBUG_SUBSYS=TRAIN timeout 600 "$CDDP" run --standalone --nproc-per-node 2 "$CDDP" train --config "$CONFIG" \
    --work-dir "$OUT/runs" --name "$name" --set train.max_steps="$STEPS" --set ddp.threads=1 \
    --set eval.every_epoch=false --set checkpoint.every_steps=0 "$@" >"$OUT/cddp-$name.txt" 2>&1 \
    || { tail -5 "$OUT/cddp-$name.txt" >&2; echo "- -"; return; }
  awk -F'[:,}]' '
    { for (i = 1; i < NF; i++) { if ($i ~ /"step"$/) s = $(i+1); if ($i ~ /"samples"$/) n = $(i+1);
        if ($i ~ /"step_ms"$/) t = $(i+1); if ($i ~ /"comm_ms"$/) c = $(i+1) } }
    s > 5 { N += n; T += t; C += c }
    END { if (T > 0) printf "%.0f %.1f\n", N / T * 1000, 100 * C / T; else print "- -" }' "$OUT/runs/$name/metrics.jsonl"
}
export OMP_WAIT_POLICY=PASSIVE OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-$("$ROOT"/scripts/openblas-coretype.sh)}
rate() { sed -n 's/.*peer ddp: .*, \([0-9]*\) samples\/s.*/\1/p' "$1" | tail -1; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a + 0 > 0 && b + 0 > 0) printf "%.2fx", a / b; else print "-" }'; }
median() { tr ' ' '\n' | grep -E '^[0-9.]+$' | sort -n | awk '{ v[NR] = $1 } END { if (NR == 0) print "-"; else if (NR % 2) print v[(NR + 1) / 2]; else printf "%.6g\n", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
A="" ON="" OFF="" Z="" CA="" CON="" COFF="" CZ="" D="" rounds_txt=""
for r in $(seq 1 "$ROUNDS"); do
  sfx=$([ "$ROUNDS" -gt 1 ] && echo "-r$r" || true)
  read -r ours comm <<<"$(cddp_row "default$sfx")" # not --name auto: that makes a new timestamped folder
  read -r ours_ov comm_ov <<<"$(cddp_row "overlap$sfx" --set ddp.shard_optimizer=false --set ddp.overlap=true)"
  read -r ours_off comm_off <<<"$(cddp_row "overlap-off$sfx" --set ddp.shard_optimizer=false --set ddp.overlap=false)"
  read -r ours_z comm_z <<<"$(cddp_row "zero1$sfx" --set ddp.shard_optimizer=true)"
  step "PyTorch DDP (gloo): 2 ranks x 1 thread, $STEPS steps (round $r of $ROUNDS)"
  (cd "$OUT" && OMP_NUM_THREADS=1 timeout 900 "$PY" -m torch.distributed.run --standalone --nproc_per_node 2 \
     --redirects 1 --tee 1 "$PEER" --threads 1 --epochs 1 --max-steps "$STEPS") >"$OUT/peer-ddp$sfx.txt" 2>&1
  ddp=$(rate "$OUT/peer-ddp$sfx.txt")
  A="$A $ours" ON="$ON $ours_ov" OFF="$OFF $ours_off" Z="$Z $ours_z" D="$D ${ddp:--}"
  CA="$CA $comm" CON="$CON $comm_ov" COFF="$COFF $comm_off" CZ="$CZ $comm_z"
  rounds_txt="$rounds_txt$(printf 'round %d: default %s, all-reduce overlapped %s, after backward %s, ZeRO-1 %s, PyTorch DDP %s: default %s PyTorch DDP' \
    "$r" "$ours" "$ours_ov" "$ours_off" "$ours_z" "${ddp:--}" "$(ratio "$ours" "$ddp")")
"
done
# the trial's choice in each default run: ZeRO-1, or the all-reduce's faster way
chose=$(for f in "$OUT"/cddp-default*.txt; do
          if grep -q 'ddp.shard_optimizer auto: .*: ZeRO-1$' "$f"; then echo "ZeRO-1"
          else sed -n 's/.*ddp.overlap auto: .*: \(overlapped\|after backward\)$/all-reduce \1/p' "$f" | head -1; fi
        done | sort | uniq -c | awk '{ printf "%s%s x%d", (NR > 1 ? ", " : ""), substr($0, index($0, $2)), $1 }')
ours=$(echo $A | median) ours_ov=$(echo $ON | median) ours_off=$(echo $OFF | median) ours_z=$(echo $Z | median) ddp=$(echo $D | median)
comm=$(echo $CA | median) comm_ov=$(echo $CON | median) comm_off=$(echo $COFF | median) comm_z=$(echo $CZ | median)

step "PyTorch, one process x 2 threads, $STEPS steps"
OMP_NUM_THREADS=2 timeout 900 "$PY" "$PEER" --threads 2 --epochs 1 --max-steps "$STEPS" >"$OUT/peer-single.txt" 2>&1
single=$(rate "$OUT/peer-single.txt")

[ "$ROUNDS" -gt 1 ] && printf '\n%s' "$rounds_txt" && echo "rows below: medians of $ROUNDS rounds"
printf '\n%-46s %12s\n' "MLP 784-1024-1024-10, global batch 256" "samples/s"
printf '%-46s %12s   exposed comm %5s%% of step time, %s PyTorch DDP\n' "cddp train, 2 ranks x 1 thread, default (auto)" "${ours}" "${comm}" "$(ratio "$ours" "$ddp")"
printf '%-46s %12s   exposed comm %5s%% of step time, %s PyTorch DDP\n' "cddp train, same, all-reduce overlapped" "${ours_ov}" "${comm_ov}" "$(ratio "$ours_ov" "$ddp")"
printf '%-46s %12s   exposed comm %5s%% of step time, %s PyTorch DDP\n' "cddp train, same, all-reduce after backward" "${ours_off}" "${comm_off}" "$(ratio "$ours_off" "$ddp")"
printf '%-46s %12s   exposed comm %5s%% of step time, %s PyTorch DDP\n' "cddp train, same, ZeRO-1 sharing the weights" "${ours_z}" "${comm_z}" "$(ratio "$ours_z" "$ddp")"
best=$(printf '%s\n%s\n%s\n' "$ours_ov" "$ours_off" "$ours_z" | sort -n | tail -1)
printf '%-46s %12s\n' "PyTorch DDP gloo, 2 ranks x 1 thread" "${ddp:--}"
printf '%-46s %12s\n' "PyTorch one process, 2 threads (PASSIVE)" "${single:--}"
printf 'the trial chose %s: %s of the best forced choice (%s samples/s)\n' "${chose:-?}" "$(ratio "$ours" "$best")" "$best"
printf 'goal: cddp (default) >= 1.8x PyTorch DDP; logs in %s\n' "$OUT"
