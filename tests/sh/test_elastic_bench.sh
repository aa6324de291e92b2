#!/usr/bin/env bash
# test_elastic_bench.sh - bench/elastic_bench.sh's arithmetic on made-up step logs (recovery,
# steps redone, caught up, for a torchrun-like restart and cddp-like in-place recoveries), its
# table cells and its bad-input lines; needs neither torch nor a run.
cd "$(dirname "$0")/../.." && source tests/sh/lib.sh
T=$(mktemp -d /tmp/cddp-elastic-bench-test.XXXXXX)
trap 'rm -rf "$T"' EXIT
B=bench/elastic_bench.sh
steps() { local s a b; for s in "$@"; do read -r a b <<<"$s"; echo "{\"step\": $a, \"epoch\": 1, \"time\": $b}"; done; }

# torchrun: steps 1-77 logged (77 after the kill at 100.0), restart from the checkpoint at 50
{ for i in $(seq 1 76); do steps "$i $(echo "20 + $i" | bc)"; done; steps "77 100.01"
  echo '{"resume": 50, "time": 104.0}'; for i in $(seq 51 80); do steps "$i $(echo "104 + ($i - 50) / 10" | bc -l)"; done
} >"$T/torch.jsonl"
echo "100.0 76 123" >"$T/kill"
got=$($B --measure "$T/torch.jsonl" "$T/kill" 51)
[ "$got" = "4.10 28 6.80" ] && ok "torchrun-like: recovery 4.10 s, 28 steps redone (51-77 and the one in flight), caught up at 6.80 s" ||
  fail "torchrun-like" "got '$got'"

# torchrun-like, the old group logging step 101 just after the kill (rank 1 had sent its share
# of the step's all-reduce), restarted from the checkpoint at 100: recovery is the restarted
# group's step 101, after its resume line, and 2 steps are redone (101 twice, 102 in flight)
{ for i in $(seq 1 100); do steps "$i $(echo "90 + $i / 10" | bc -l)"; done; steps "101 100.01"
  echo '{"resume": 100, "time": 102.9}'; for i in $(seq 101 110); do steps "$i $(echo "103 + ($i - 100) / 10" | bc -l)"; done
} >"$T/torch2.jsonl"
echo "100.0 100 123" >"$T/kill2"
got=$($B --measure "$T/torch2.jsonl" "$T/kill2" 101 102.9)
[ "$got" = "3.10 2 3.20" ] && ok "torchrun-like, old group's step logged after the kill: recovery 3.10 s (after the resume line), 2 redone" ||
  fail "torchrun-like, old group's step after the kill" "got '$got'"

# cddp: step 54 logged before the kill at 100.0, step 55 redone 0.5 s later
steps "53 99.8" "54 99.9" "55 100.5" "56 100.6" >"$T/cddp.jsonl"
got=$($B --measure "$T/cddp.jsonl" "$T/kill" 55)
[ "$got" = "0.50 1 0.50" ] && ok "cddp-like: recovery 0.50 s, 1 step redone" || fail "cddp-like" "got '$got'"

# cddp, the step in flight committed by the survivor and logged just after the kill: 56 redone
steps "54 99.9" "55 100.02" "56 100.6" "57 100.7" >"$T/cddp2.jsonl"
got=$($B --measure "$T/cddp2.jsonl" "$T/kill" 56)
[ "$got" = "0.60 1 0.60" ] && ok "cddp-like, in-flight step committed: the redone step is 56, not the one logged 20 ms after the kill" ||
  fail "cddp-like, committed" "got '$got'"

# no step after the kill
got=$($B --measure "$T/cddp.jsonl" "$T/kill" 99)
[ "$got" = "- - -" ] && ok "no recovered step: '- - -'" || fail "no recovered step" "got '$got'"

# the table's cells (median [min-max] over N runs; bench/torchrun_bench.sh's launch table too)
printf '3.5 x\n1.25 y\n2 z\n- w\n' >"$T/cells"
printf -- '- x\n- y\n' >"$T/none"
got="$($B --cell "$T/cells" 1 4) / $($B --cell "$T/cells" 1 1) / $($B --cell "$T/none" 1 2)"
[ "$got" = "2 [1.25-3.5] (3/4) / 2 / -" ] && ok "cells: median [min-max] (runs with a figure/runs), '-' without figures" ||
  fail "cells" "got '$got'"

# bad input: one line, exit 2
for args in "--kill-at x" "--kill-at 240" "--repeat 0" "--monitor-interval 0" "--agents 3" "--rows cddp,mpirun" "--bogus"; do
  # shellcheck disable=SC2086
  $B $args >/dev/null 2>"$T/err"; rc=$?
  [ $rc = 2 ] && [ "$(wc -l <"$T/err")" = 1 ] && grep -q '^elastic_bench.sh: ' "$T/err" && ok "$args: exit 2, $(cat "$T/err")" ||
    fail "$args" "rc=$rc $(head -2 "$T/err" | tr '\n' ' ')"
done
finish
