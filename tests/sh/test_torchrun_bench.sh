#!/usr/bin/env bash
# test_torchrun_bench.sh - bench/torchrun_bench.sh in a small, quick configuration (one killed run
# and one launch of each launcher; rank 1 killed at step 40, a checkpoint every 20 steps, no
# uninterrupted runs, torchrun polling every second): both launchers' figures are printed, and
# under `cddp run` the killed job was restarted (restart-all), resumed from its checkpoint and
# finished; and its bad-input lines. The run skips when /usr/bin/python3 has no torch (Debian's
# python3-torch). It takes 60-110 s (two 234-step trainings, two launches): its bound is loose.
cd "$(dirname "$0")/../.." && source tests/sh/lib.sh
T=$(mktemp -d /tmp/cddp-torchrun-bench-test.XXXXXX)
trap 'rm -rf "$T"' EXIT

# bad input (its own flags and elastic_bench.sh's): one line, exit 2, before anything runs
for args in "--launches 0" "--kill-at 0" "--monitor-interval" "--bogus 1" "extra"; do
  # shellcheck disable=SC2086
  bench/torchrun_bench.sh --out "$T/bad" $args >/dev/null 2>"$T/err"; rc=$?
  [ $rc = 2 ] && [ "$(wc -l <"$T/err")" = 1 ] && ok "$args: exit 2, $(cat "$T/err")" ||
    fail "$args" "rc=$rc $(head -2 "$T/err" | tr '\n' ' ')"
done

if ! /usr/bin/python3 -c 'import torch' 2>/dev/null; then
  echo "ok $((t_n + 1)) - $t_name # SKIP /usr/bin/python3 has no torch (scripts/install-deps.sh bench installs python3-torch)"
  exit 0
fi
E=$T/b/elastic
timeout 360 bench/torchrun_bench.sh --launches 1 --no-reference --kill-at 40 --ckpt-every 20 \
  --monitor-interval 1 --out "$T/b" >"$T/out" 2>"$T/err"
rc=$?
[ $rc = 0 ] && ok "the bench exits 0" || fail "the bench exits 0" "rc=$rc: $(tail -3 "$T/err" | tr '\n' ' ')"

# the kill table: kill->step (s) and steps redone for both launchers
for row in torchrun cddp-run; do
  grep -Eq "^$row +[0-9]+\.[0-9]+ +[0-9]+ " "$T/out" && ok "kill table: $row has kill->step and steps redone" ||
    fail "kill table: $row" "$(grep "^$row" "$T/out" | head -1)"
done
grep -q '^goal: cddp-run kill->step [0-9.]* s = [0-9.]* x torchrun' "$T/out" && ok "the goal line compares the two" ||
  fail "goal line" "$(grep '^goal' "$T/out")"

# cddp run: rank 1 blamed, every worker restarted once, the script resumed from a checkpoint of
# its own and the job completed (launcher exit 0, the test accuracy logged)
read -r rec red _ acc blamed jrc _ <"$E/cddp-run.rows" 2>/dev/null
if [ "${jrc:-}" = 0 ] && [[ "${acc:-}" =~ ^0\.[0-9]+$ ]] && [[ "${rec:-}" =~ ^[0-9.]+$ ]] && [ "${blamed:-}" = 1 ] &&
   grep -q '^cddp run: rank 1 .*killed by signal 9 (SIGKILL); restarting the workers (restart 1 of 3)' "$E/cddp-run1.out" &&
   grep -Eq '"resume": [1-9][0-9]*,' "$E/cddp-run1/run/steps.jsonl"; then
  ok "cddp run recovered: restart 1 of 3, resumed from a checkpoint, $red steps redone, done in ${rec}s, accuracy $acc"
else
  fail "cddp run recovered" "row '$(cat "$E/cddp-run.rows" 2>/dev/null)'; $(grep '^cddp run:' "$E/cddp-run1.out" 2>/dev/null | head -2 | tr '\n' ' ')"
fi

# the launch table: launch -> init_process_group for both
for row in torchrun cddp-run; do
  grep -Eq "^$row +[0-9]+\.[0-9]{3}\$" "$T/out" && ok "launch table: $row has launch -> init_process_group" ||
    fail "launch table: $row" "$(grep "^$row" "$T/out" | tail -1)"
done
finish
