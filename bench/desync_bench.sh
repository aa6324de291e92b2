#!/usr/bin/env bash
# desync_bench.sh - what the desync check (CDDP_DESYNC_CHECK) costs, with and without in one run:
# the check's own work (desync_bench -m), a 4 KiB allreduce over shm and tcp with two
# communicators per rank in turns (desync_bench), and the MLP's step time under cddp run,
# runs with and without alternating.
# Usage: bench/desync_bench.sh [--pairs N] [--steps S]   (default 3 pairs of 60 steps)
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
PAIRS=3
STEPS=60
while [ $# -gt 0 ]; do
  case "$1" in
    --pairs) PAIRS=${2:-}; shift 2 ;;
    --steps) STEPS=${2:-}; shift 2 ;;
    -h|--help) sed -n '2,7s/^# \{0,1\}//p' "$0"; exit 0 ;;
    *) echo "desync_bench.sh: unknown argument '$1' (--pairs N, --steps S)" >&2; exit 2 ;;
  esac
done
[[ "$PAIRS" =~ ^[1-9][0-9]*$ && "$STEPS" =~ ^[1-9][0-9]*$ ]] || { echo "desync_bench.sh: --pairs and --steps take positive numbers" >&2; exit 2; }
make -s lib cli >/dev/null && make -s -C bench BUILD="$PWD/build" desync >/dev/null || exit 1
echo "# load: $(cut -d' ' -f1-3 /proc/loadavg) (on a shared machine the end-to-end rows are mostly the scheduler's)"
build/bench/desync_bench -m -n 10000 -r 31
for t in shm tcp; do build/bench/desync_bench -t $t -b 4096 -n 2000 -r 31; done
T=$(mktemp -d /tmp/cddp-desync-bench.XXXXXX)
trap 'rm -rf "$T"' EXIT
# median step_ms of a run's timed steps (the first 5 are warm-up)
median_step() { sed -n 's/.*"step":\([0-9]*\),.*"step_ms":\([0-9.]*\),.*/\1 \2/p' "$1" | awk '$1 > 5 { print $2 }' | sort -n |
  awk '{ v[NR] = $1 } END { print NR ? (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2) : "nan" }'; }
on=() off=()
for p in $(seq "$PAIRS"); do
  for c in $(( p % 2 )) $(( (p + 1) % 2 )); do # alternate which goes first
    name=r$p-c$c
    CDDP_DESYNC_CHECK=$c build/cddp run --standalone --nproc-per-node 2 build/cddp train --config configs/fmnist_mlp.yaml \
      --work-dir "$T" --name "$name" --set train.max_steps="$STEPS" --set eval.every_epoch=false >"$T/$name.log" 2>&1 ||
      { echo "desync_bench.sh: the run $name failed:"; tail -3 "$T/$name.log"; exit 1; }
    m=$(median_step "$T/$name/metrics.jsonl")
    if [ "$c" = 1 ]; then on+=("$m"); else off+=("$m"); fi
  done
done
echo "MLP step (2 ranks, shm), median step_ms per run: without ${off[*]}; with ${on[*]}"
awk -v a="${off[*]}" -v b="${on[*]}" 'BEGIN { n = split(a, x); split(b, y); for (i = 1; i <= n; i++) { sx += x[i]; sy += y[i] }
  printf "MLP step: without %.3f ms, with %.3f ms, difference %+.2f%% (mean of %d runs each)\n", sx / n, sy / n, (sy - sx) / sx * 100, n }'
