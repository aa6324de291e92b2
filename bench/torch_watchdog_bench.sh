#!/usr/bin/env bash
# torch_watchdog_bench.sh - what the watchdog for programs without a flight page costs a torch job
# (issue 30): the same 2-rank torch script (bench/peers/torch_steps.py: an MLP step and its
# gradients' all_reduce over gloo, a line a step) under cddp run with --hang-timeout 5 (the agent
# reads /proc every 0.5 s and relays each line as progress) and with --hang-timeout 0, runs
# alternating, in one run. Prints each run's median step time and the agent's own CPU time, then
# both medians, the median of the pairs' differences, and the watchdog's CPU against the steps'.
# Usage: bench/torch_watchdog_bench.sh [--pairs N] [--steps S] [--python PY]   (default 5 pairs of 300 steps, .venv's torch)
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
PAIRS=5
STEPS=300
PY=$PWD/.venv/bin/python
while [ $# -gt 0 ]; do
  case "$1" in
    --pairs) PAIRS=${2:-}; shift 2 ;;
    --steps) STEPS=${2:-}; shift 2 ;;
    --python) PY=${2:-}; shift 2 ;;
    -h|--help) sed -n '2,8s/^# \{0,1\}//p' "$0"; exit 0 ;;
    *) echo "torch_watchdog_bench.sh: unknown argument '$1' (--pairs N, --steps S, --python PY)" >&2; exit 2 ;;
  esac
done
[[ "$PAIRS" =~ ^[1-9][0-9]*$ && "$STEPS" =~ ^[1-9][0-9]*$ ]] || { echo "torch_watchdog_bench.sh: --pairs and --steps take positive numbers" >&2; exit 2; }
"$PY" -c 'import torch.distributed' 2>/dev/null || { echo "torch_watchdog_bench.sh: no torch at $PY" >&2; exit 2; }
make -s cli >/dev/null || exit 1
T=$(mktemp -d /tmp/cddp-torch-wd.XXXXXX)
trap 'rm -rf "$T"' EXIT
spy=$(dirname "$PY")/py-spy
[ -x "$spy" ] && export CDDP_PY_SPY=$spy
echo "# load: $(cut -d' ' -f1-3 /proc/loadavg); torch $("$PY" -c 'import torch; print(torch.__version__)'); $PAIRS pairs of $STEPS steps"
echo "# pair  with_ms  without_ms  diff%   agent_cpu_ms_with  agent_cpu_ms_without   (median step, rank 0; the agent's own CPU)"
tick_ms=$(awk -v t="$(getconf CLK_TCK)" 'BEGIN { print 1000 / t }')
run() { # HANG_TIMEOUT: rank 0's median step in ms, and the agent's own CPU (its utime + stime, workers apart) in ms
  CDDP_PYTHON=$PY build/cddp run --standalone --nproc-per-node 2 --hang-timeout "$1" --log-dir "$T/l$1" \
    bench/peers/torch_steps.py "$STEPS" >"$T/out$1" 2>&1 &
  local pid=$! ticks=0 t n=0
  while kill -0 "$pid" 2>/dev/null && [ $n -lt 3000 ]; do # a zombie's stat keeps its times; 600 s at most
    t=$(awk '{print $14 + $15}' "/proc/$pid/stat" 2>/dev/null) && [ -n "$t" ] && ticks=$t
    sleep 0.2; n=$((n + 1))
  done
  kill "$pid" 2>/dev/null; wait "$pid"
  local ms
  ms=$(sed -n 's/^step_ms \([0-9.]*\) .*/\1/p' "$T/l$1/rank0.log")
  [ -n "$ms" ] && echo "$ms $(awk -v k="$ticks" -v m="$tick_ms" 'BEGIN { print k * m }')"
}
with=() without=() diffs=() cw=() co=()
for i in $(seq "$PAIRS"); do
  if [ $((i % 2)) = 1 ]; then a=$(run 5); b=$(run 0); else b=$(run 0); a=$(run 5); fi
  [ -n "$a" ] && [ -n "$b" ] || { echo "torch_watchdog_bench.sh: pair $i: a run failed:" >&2; tail -n 3 "$T/out5" "$T/out0" >&2; exit 1; }
  read -r a ca <<<"$a"; read -r b cb <<<"$b"
  d=$(awk -v w="$a" -v o="$b" 'BEGIN { printf "%.2f", 100 * (w - o) / o }')
  printf '%6d  %7.3f  %10.3f  %+6.2f  %17.0f  %20.0f\n' "$i" "$a" "$b" "$d" "$ca" "$cb"
  with+=("$a") without+=("$b") diffs+=("$d") cw+=("$ca") co+=("$cb")
done
med() { printf '%s\n' "$@" | sort -g | awk '{v[NR] = $1} END {print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2)}'; }
mw=$(med "${with[@]}") mo=$(med "${without[@]}") md=$(med "${diffs[@]}") mcw=$(med "${cw[@]}") mco=$(med "${co[@]}")
awk -v w="$mw" -v o="$mo" -v d="$md" 'BEGIN { printf "median of medians: with --hang-timeout 5 %.3f ms, without %.3f ms: %+.2f%%; median of the pairs'"'"' differences %+.2f%%\n", w, o, 100 * (w - o) / o, d }'
awk -v a="$mcw" -v b="$mco" -v s="$STEPS" -v o="$mo" 'BEGIN { printf "the agent'"'"'s own CPU (median): with %.0f ms, without %.0f ms: the watchdog'"'"'s %.0f ms is %.3f%% of the two ranks'"'"' %.0f ms of steps\n", a, b, a - b, 100 * (a - b) / (2 * s * o), 2 * s * o }'
echo "# load at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
