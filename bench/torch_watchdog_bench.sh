#!/usr/bin/env bash
# torch_watchdog_bench.sh - what the watchdog for programs without a flight page costs a torch job
# (issue 30): the same 2-rank torch script (bench/peers/torch_steps.py: an MLP step and its
# gradients' all_reduce over gloo, a line a step) under cddp run with --hang-timeout 5 (the agent
# reads /proc every 0.5 s) and with --hang-timeout 0, nothing else different (the same relay of
# every line, the same variables: checked per run), in pairs run in ABBA order. Prints each run's
# median step (rank 0) and the agent's own CPU, then the median of the pairs' ratios with a 95%
# confidence interval (distribution-free: order statistics of the binomial), the watchdog's CPU
# against the steps', how often py-spy ran (never, in a healthy job), and the pass alone
# (bench/probe_bench.c). About 15-20 s a pair of 300 steps on a quiet 2-core host.
# Usage: bench/torch_watchdog_bench.sh [--pairs N] [--steps S] [--python PY]   (default 20 pairs of 300 steps, .venv's torch)
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
PAIRS=20
STEPS=300
PY=$PWD/.venv/bin/python
while [ $# -gt 0 ]; do
  case "$1" in
    --pairs) PAIRS=${2:-}; shift 2 ;;
    --steps) STEPS=${2:-}; shift 2 ;;
    --python) PY=${2:-}; shift 2 ;;
    -h|--help) sed -n '2,11s/^# \{0,1\}//p' "$0"; exit 0 ;;
    *) echo "torch_watchdog_bench.sh: unknown argument '$1' (--pairs N, --steps S, --python PY)" >&2; exit 2 ;;
  esac
done
[[ "$PAIRS" =~ ^[1-9][0-9]*$ && "$STEPS" =~ ^[1-9][0-9]*$ ]] || { echo "torch_watchdog_bench.sh: --pairs and --steps take positive numbers" >&2; exit 2; }
"$PY" -c 'import torch.distributed' 2>/dev/null || { echo "torch_watchdog_bench.sh: no torch at $PY" >&2; exit 2; }
make -s cli >/dev/null || exit 1
T=$(mktemp -d /tmp/cddp-torch-wd.XXXXXX)
trap 'rm -rf "$T"' EXIT
spy=$(dirname "$PY")/py-spy
if [ -x "$spy" ]; then # counted: py-spy should never run in a healthy job
  printf '#!/bin/sh\necho >>"%s/spy.count"\nexec "%s" "$@"\n' "$T" "$spy" >"$T/py-spy" && chmod +x "$T/py-spy"
  export CDDP_PY_SPY=$T/py-spy
fi
echo "# load: $(cut -d' ' -f1-3 /proc/loadavg); torch $("$PY" -c 'import torch; print(torch.__version__)'); $PAIRS pairs of $STEPS steps, ABBA"
echo "# pair  with_ms  without_ms  ratio%   agent_cpu_ms_with  agent_cpu_ms_without   (median step, rank 0; the agent's own CPU)"
tick_ms=$(awk -v t="$(getconf CLK_TCK)" 'BEGIN { print 1000 / t }')
run() { # HANG_TIMEOUT: rank 0's median step in ms, and the agent's own CPU (its utime + stime, workers apart) in ms
  rm -rf "$T/l$1"
  CDDP_PYTHON=$PY build/cddp run --standalone --nproc-per-node 2 --hang-timeout "$1" --log-dir "$T/l$1" \
    bench/peers/torch_steps.py "$STEPS" >"$T/out$1" 2>&1 &
  local pid=$! ticks=0 t n=0
  while kill -0 "$pid" 2>/dev/null && [ $n -lt 3000 ]; do # a zombie's stat keeps its times; 600 s at most
    t=$(awk '{print $14 + $15}' "/proc/$pid/stat" 2>/dev/null) && [ -n "$t" ] && ticks=$t
    sleep 0.2; n=$((n + 1))
  done
  kill "$pid" 2>/dev/null; wait "$pid"
  sed -n 's/^env_names //p' "$T/l$1/rank0.log" >"$T/env$1"
  local ms
  ms=$(sed -n 's/^step_ms \([0-9.]*\) .*/\1/p' "$T/l$1/rank0.log")
  [ -n "$ms" ] && echo "$ms $(awk -v k="$ticks" -v m="$tick_ms" 'BEGIN { print k * m }')"
}
ratios=() with=() without=() cw=() co=()
for i in $(seq "$PAIRS"); do
  if [ $((i % 2)) = 1 ]; then a=$(run 5); b=$(run 0); else b=$(run 0); a=$(run 5); fi
  [ -n "$a" ] && [ -n "$b" ] || { echo "torch_watchdog_bench.sh: pair $i: a run failed:" >&2; tail -n 3 "$T/out5" "$T/out0" >&2; exit 1; }
  cmp -s "$T/env5" "$T/env0" && [ -s "$T/env5" ] ||
    { echo "torch_watchdog_bench.sh: pair $i: the two arms' workers got different variables:" >&2; diff <(tr , '\n' <"$T/env5") <(tr , '\n' <"$T/env0") >&2; exit 1; }
  read -r a ca <<<"$a"; read -r b cb <<<"$b"
  r=$(awk -v w="$a" -v o="$b" 'BEGIN { printf "%.3f", 100 * (w - o) / o }')
  printf '%6d  %7.3f  %10.3f  %+7.2f  %17.0f  %20.0f\n' "$i" "$a" "$b" "$r" "$ca" "$cb"
  ratios+=("$r") with+=("$a") without+=("$b") cw+=("$ca") co+=("$cb")
done
med() { printf '%s\n' "$@" | sort -g | awk '{v[NR] = $1} END {print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2)}'; }
# the median's 95% interval: sorted ratios k and n+1-k, k the largest with P(Binomial(n, 1/2) < k) <= 2.5%
ci() {
  printf '%s\n' "$@" | sort -g | awk '{v[NR] = $1} END {
    n = NR; p = 0.5 ^ n; cum = 0; k = 0
    for (j = 0; j < n; j++) { if (cum + p > 0.025) break; cum += p; k = j + 1; p = p * (n - j) / (j + 1) }
    if (k < 1) print "none (too few pairs for 95%: 6 at least)"; else printf "[%+.2f%%, %+.2f%%] (%.1f%%)\n", v[k], v[n + 1 - k], 100 * (1 - 2 * cum) }'
}
mr=$(med "${ratios[@]}") mw=$(med "${with[@]}") mo=$(med "${without[@]}") mcw=$(med "${cw[@]}") mco=$(med "${co[@]}")
printf 'median step: with --hang-timeout 5 %.3f ms, without %.3f ms\n' "$mw" "$mo"
printf 'the watchdog'"'"'s cost, the median of the pairs'"'"' ratios: %+.2f%%, 95%% interval %s\n' "$mr" "$(ci "${ratios[@]}")"
awk -v a="$mcw" -v b="$mco" -v s="$STEPS" -v o="$mo" 'BEGIN { printf "the agent'"'"'s own CPU (median): with %.0f ms, without %.0f ms: the watchdog'"'"'s %.0f ms is %.3f%% of the two ranks'"'"' %.0f ms of steps\n", a, b, a - b, 100 * (a - b) / (2 * s * o), 2 * s * o }'
echo "py-spy runs (a rank idle for half the timeout): $(cat "$T/spy.count" 2>/dev/null | wc -l) in $PAIRS runs with the watchdog"
make -s -C bench BUILD="$PWD/build" probe >/dev/null 2>&1 && build/bench/probe_bench 2 20000 # the pass alone
echo "# load at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
