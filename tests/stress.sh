#!/usr/bin/env bash
# stress.sh - the whole suite N times in a row with every core busy: one busy loop per core at
# nice 0 competes with the tests, as a loaded CI runner does. A test that passes alone but fails
# here depends on timing (a sleep that orders events, a tight wall-clock bound).
# Usage: tests/stress.sh [N] [run.sh options]   (N: 3 by default; e.g. tests/stress.sh 3 --quick)
# Every time bound of the tests is scaled by CDDP_TEST_SCALE, 3 here unless set (the hogs take
# half of each core, and the shell tests run CDDP_SUITE_JOBS, 2, at a time as in CI).
# CDDP_STRESS_SUITE: another program to run in the suite's place (tests/sh/test_stress.sh's fake).
# Ends "stress: K of N runs passed" and exits 0 only when all N passed; after each run, its
# failures, its log folder and its summary line.
set -uo pipefail
cd "$(dirname "$0")/.."
n=${1:-3}; shift || true
[[ $n =~ ^[1-9][0-9]*$ ]] || { echo "tests/stress.sh: N must be a positive whole number, got '$n'" >&2; exit 2; }
export CDDP_TEST_SCALE=${CDDP_TEST_SCALE:-3}
awk -v k="$CDDP_TEST_SCALE" 'BEGIN { exit !(k + 0 >= 1) }' ||
  { echo "tests/stress.sh: CDDP_TEST_SCALE must be a number of at least 1, got '$CDDP_TEST_SCALE'" >&2; exit 2; }
echo "stress: $n runs of tests/run.sh $*, a busy loop on each of $(nproc) cores, CDDP_TEST_SCALE=$CDDP_TEST_SCALE, CDDP_SUITE_JOBS=${CDDP_SUITE_JOBS:-2}"
hogs=()
stop_hogs() { [ ${#hogs[@]} -gt 0 ] && kill "${hogs[@]}" 2>/dev/null; wait "${hogs[@]}" 2>/dev/null; hogs=(); }
trap stop_hogs EXIT
for _ in $(seq "$(nproc)"); do
  nice -n 0 bash -c 'while :; do :; done' &
  hogs+=($!)
done
good=0
for i in $(seq "$n"); do
  out=$(mktemp /tmp/cddp-stress.XXXXXX)
  ${CDDP_STRESS_SUITE:-tests/run.sh} "$@" >"$out" 2>&1
  rc=$?
  summary=$(tail -1 "$out"); grep -E '^not ok|^logs:' "$out"
  rm -f "$out"
  echo "stress: run $i of $n: $summary (exit $rc)"
  [ "$rc" = 0 ] && good=$((good + 1))
done
stop_hogs
echo "stress: $good of $n runs passed"
[ "$good" = "$n" ]
