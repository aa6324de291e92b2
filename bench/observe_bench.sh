#!/usr/bin/env bash
# observe_bench.sh - what seeing inside a job costs (issue 14): the desync check
# (CDDP_DESYNC_CHECK), the flight recorder (CDDP_FLIGHT) and the per-rank timings
# (log.rank_every), each with and without in one run:
#  - their own work per collective, in one process (desync_bench -m, -f);
#  - a 4 KiB allreduce, 2 ranks: the check on and off in turns over shm and tcp (two
#    communicators per rank), and the recorder on and off in alternating runs (it is per process);
#  - the MLP's step under cddp run, runs alternating: everything on (the defaults), the check
#    off, and everything off (the check, the recorder, and the per-rank gather every 10^6 steps).
# Usage: bench/observe_bench.sh [--pairs N] [--steps S]   (default 3 rounds of 60 steps)
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
PAIRS=3
STEPS=60
while [ $# -gt 0 ]; do
  case "$1" in
    --pairs) PAIRS=${2:-}; shift 2 ;;
    --steps) STEPS=${2:-}; shift 2 ;;
    -h|--help) sed -n '2,10s/^# \{0,1\}//p' "$0"; exit 0 ;;
    *) echo "observe_bench.sh: unknown argument '$1' (--pairs N, --steps S)" >&2; exit 2 ;;
  esac
done
[[ "$PAIRS" =~ ^[1-9][0-9]*$ && "$STEPS" =~ ^[1-9][0-9]*$ ]] || { echo "observe_bench.sh: --pairs and --steps take positive numbers" >&2; exit 2; }
make -s lib cli >/dev/null && make -s -C bench BUILD="$PWD/build" desync >/dev/null || exit 1
echo "# load: $(cut -d' ' -f1-3 /proc/loadavg) (on a shared machine the end-to-end rows are mostly the scheduler's)"
build/bench/desync_bench -m -n 10000 -r 31
build/bench/desync_bench -f -r 31
for t in shm tcp; do build/bench/desync_bench -t $t -b 4096 -n 2000 -r 31; done
# the recorder is per process: runs with it and without alternate; each run's "without" column
# is its time with the check off, so the two differ by the recorder alone
fl=()
for p in $(seq "$PAIRS"); do
  for f in $(( p % 2 )) $(( (p + 1) % 2 )); do
    fl+=("$f $(CDDP_FLIGHT=$f build/bench/desync_bench -t shm -b 4096 -n 2000 -r 11 | sed -n 's/.*without *\([0-9.]*\) us.*/\1/p')")
  done
done
printf '%s\n' "${fl[@]}" | awk '{ s[$1] += $2; n[$1]++ } END {
  printf "shm 2 ranks 4096 B, flight recorder: without %.3f us, with %.3f us, difference %+.3f us (mean of %d runs each)\n",
    s[0] / n[0], s[1] / n[1], s[1] / n[1] - s[0] / n[0], n[0] }'
T=$(mktemp -d /tmp/cddp-observe-bench.XXXXXX)
trap 'rm -rf "$T"' EXIT
# median step_ms of a run's timed steps (the first 5 are warm-up)
median_step() { sed -n 's/.*"step":\([0-9]*\),.*"step_ms":\([0-9.]*\),.*/\1 \2/p' "$1" | awk '$1 > 5 { print $2 }' | sort -n |
  awk '{ v[NR] = $1 } END { print NR ? (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2) : "nan" }'; }
# run NAME ENV...: one MLP run with those variables (and, for "off", no per-rank gather)
declare -A ms
order=(on nocheck off)
for p in $(seq "$PAIRS"); do
  for k in 0 1 2; do # the order turns each round: the first run of a round is often the slowest
    c=${order[$(( (p + k) % 3 ))]}
    name=r$p-$c extra=()
    case $c in
      on) envs=() ;;
      nocheck) envs=(CDDP_DESYNC_CHECK=0) ;;
      off) envs=(CDDP_DESYNC_CHECK=0 CDDP_FLIGHT=0); extra=(--set log.rank_every=1000000) ;;
    esac
    env "${envs[@]}" build/cddp run --standalone --nproc-per-node 2 build/cddp train --config configs/fmnist_mlp.yaml \
      --work-dir "$T" --name "$name" --set train.max_steps="$STEPS" --set eval.every_epoch=false "${extra[@]}" \
      >"$T/$name.log" 2>&1 || { echo "observe_bench.sh: the run $name failed:"; tail -3 "$T/$name.log"; exit 1; }
    ms[$c]="${ms[$c]:-} $(median_step "$T/$name/metrics.jsonl")"
  done
done
echo "MLP step (2 ranks, shm), median step_ms per run: everything on${ms[on]}; check off${ms[nocheck]}; everything off${ms[off]}"
awk -v a="${ms[off]}" -v b="${ms[nocheck]}" -v c="${ms[on]}" 'BEGIN { n = split(a, x); split(b, y); split(c, z)
  for (i = 1; i <= n; i++) { sx += x[i]; sy += y[i]; sz += z[i] }
  printf "MLP step: everything off %.3f ms; the recorder and per-rank timings on %.3f ms (%+.2f%%); the check on too (the default) %.3f ms (%+.2f%%) (mean of %d runs each)\n",
    sx / n, sy / n, (sy - sx) / sx * 100, sz / n, (sz - sx) / sx * 100, n }'
