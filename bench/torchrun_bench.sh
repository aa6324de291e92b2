#!/usr/bin/env bash
# torchrun_bench.sh - `cddp run` against torchrun with the same PyTorch scripts, both launchers in
# one run (issue 17):
#  1. a worker SIGKILLed mid-epoch: bench/elastic_bench.sh --rows torchrun,cddp-run, the torch
#     elastic script (bench/peers/ddp_fmnist_elastic.py) under both, every worker restarted from
#     the newest checkpoint (kill -> next completed step, steps redone, and the goal line);
#  2. launch -> init_process_group returned, 2 workers (bench/peers/init_stamp.py): from the shell's
#     clock just before the launcher starts to the later of the two workers' stamps; median
#     [min-max] of N launches, interleaved (torchrun, cddp run, torchrun, ...).
#
# Usage: bench/torchrun_bench.sh [--launches N] [--out DIR] [elastic_bench.sh's flags: --kill-at
#            STEP|random, --ckpt-every K, --repeat N, --monitor-interval S, --agents 1|2,
#            --no-reference, --rows LIST, --python PATH]
# --python PATH: the torch whose torchrun and interpreter both rows use (default /usr/bin/python3,
# Debian's torch 1.13; .venv/bin/python: torch 2.x). --launches N: launches of each launcher for part 2 (default 5). --monitor-interval S is also
# torchrun's in part 2 (it only delays torchrun's exit there). Logs in DIR (elastic/ and launch/).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
ROOT=$PWD
LAUNCHES=5
OUT=""
MONITOR=5
PYTHON=/usr/bin/python3
pass=()
while [ $# -gt 0 ]; do
  case "$1" in
    --launches) [[ "${2:-}" =~ ^[1-9][0-9]*$ ]] ||
        { echo "torchrun_bench.sh: --launches needs a positive number, got '${2:-}'" >&2; exit 2; }
      LAUNCHES=$2; shift 2 ;;
    --out) OUT=${2:?--out needs a directory}; shift 2 ;;
    --no-reference|--cddp-only) pass+=("$1"); shift ;;
    -h|--help) sed -n '2,15s/^# \{0,1\}//p' "$0"; exit 0 ;;
    # elastic_bench.sh's flags with a value; it checks them
    -*) [ "$1" = --monitor-interval ] && MONITOR=${2:-}
      [ "$1" = --python ] && PYTHON=${2:-}
      pass+=("$1" "${2:-}"); shift; [ $# = 0 ] || shift ;;
    *) echo "torchrun_bench.sh: unknown argument '$1' (--launches N, --out DIR, or elastic_bench.sh's flags)" >&2; exit 2 ;;
  esac
done
made=""; [ -n "$OUT" ] || { OUT=$(mktemp -d /tmp/cddp-torchrun-bench.XXXXXX) && made=$OUT; }
mkdir -p "$OUT/launch" && OUT=$(cd "$OUT" && pwd)

# part 1 first: it checks every flag (and builds cddp, and checks torch) before anything runs
bench/elastic_bench.sh --rows torchrun,cddp-run "${pass[@]}" --out "$OUT/elastic" ||
  { rc=$?; [ "$rc" = 2 ] && [ -n "$made" ] && rm -rf "$made"; exit "$rc"; }

export OMP_NUM_THREADS=1 OMP_WAIT_POLICY=PASSIVE OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-$("$ROOT"/scripts/openblas-coretype.sh)}
STAMP=bench/peers/init_stamp.py
# launch NAME I CMD...: runs CMD once, appends the seconds from just before it to the later
# worker's `init` stamp (or '-') to launch/NAME.txt
launch() {
  local name=$1 i=$2 t0 log; shift 2
  log=$OUT/launch/$name$i.out
  t0=$(date +%s.%N)
  timeout 120 "$@" >"$log" 2>&1
  awk -v t="$t0" '{ sub(/^\[[^]]*\]:? ?/, "") } $1 == "init" && NF == 3 { n++; if ($3 > m) m = $3 }
    END { if (n == 2) printf "%.3f\n", m - t; else print "-" }' "$log" | tee -a "$OUT/launch/$name.txt" >&2
}
for i in $(seq "$LAUNCHES"); do
  echo "torchrun_bench.sh: launch $i/$LAUNCHES: torchrun, cddp run" >&2
  launch torchrun "$i" "$PYTHON" -m torch.distributed.run --standalone --nproc_per_node 2 \
    --monitor_interval "$MONITOR" --redirects 1 --tee 1 "$STAMP"
  launch cddp-run "$i" build/cddp run --standalone --nproc-per-node 2 "$PYTHON" "$STAMP"
done
printf '\nlaunch -> init_process_group returned, 2 workers, %s launch(es) each, interleaved\n' "$LAUNCHES"
printf '%-10s %s\n' "" "seconds: median [min-max]"
for name in torchrun cddp-run; do
  printf '%-10s %s\n' "$name" "$(bench/elastic_bench.sh --cell "$OUT/launch/$name.txt" 1 "$LAUNCHES")"
done
echo "logs in $OUT"
