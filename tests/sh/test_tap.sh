#!/usr/bin/env bash
# test_tap.sh - tests/run.sh's counting (tests/tap.sh): a skip is never a pass; with CI=true a
# skip is a failure unless it is tagged for hardware that run.sh's own probe finds missing.
cd "$(dirname "$0")/../.." && source tests/sh/lib.sh
T=$(mktemp -d /tmp/cddp-tap.XXXXXX)
trap 'rm -rf "$T"' EXIT
printf 'flags\t\t: fpu sse avx avx2\n' >"$T/cpuinfo"
cat >"$T/tap" <<'TAP'
ok 1 - a:passes (1 ms)
ok 2 - a:bf16 (1 ms) # SKIP [cpu:avx512_bf16] the bf16 product needs it
ok 3 - a:avx2 (1 ms) # SKIP [cpu:avx2] claims a flag the host has
ok 4 - a:nccl (1 ms) # SKIP [gpu] no GPU
ok 5 - a:torch (1 ms) # SKIP no torch here
ok 6 - a:odd (1 ms) # SKIP [cpu:AVX;rm] not a flag
not ok 7 - a:fails (exit 1)
# ok 8 - a comment is no test
ok 9 - a:bind # SKIP [cpus:100000] one CPU to run on
ok 10 - a:bind1 # SKIP [cpus:1] claims fewer CPUs than any host has
TAP
tally() { # CI GPU(0|1): "passed failed skipped" for $T/tap
  (
    passed=0 failed=0 skipped=0 ci=$1 gpu=$2
    . tests/tap.sh
    tap_cpuinfo=$T/cpuinfo
    tap_gpu_present() { [ "$gpu" = 1 ]; }
    count "$T/tap" >"$T/listed.$1$2"
    echo "$passed $failed $skipped"
  ) 2>&1
}
r=$(tally 0 0)
check "outside CI every skip is a skip, none a pass [$r]" test "$r" = "1 1 7"
r=$(tally 1 0)
check "in CI only the skips of missing hardware are accepted [$r]" test "$r" = "1 5 3"
check "in CI the accepted skips say what the host lacks" grep -q '^ok 2 .*(this host has no cpu:avx512_bf16)$' "$T/listed.10"
check "in CI a refused skip is listed as a failure" grep -q '^not ok (a skip in CI) 5 - a:torch' "$T/listed.10"
r=$(tally 1 1)
check "in CI a [gpu] skip fails where a GPU is present [$r]" test "$r" = "1 6 2"
printf 'processor\t: 0\n' >"$T/cpuinfo"
r=$(tally 1 0)
check "in CI no flags line confirms no CPU flag missing [$r]" test "$r" = "1 6 2"
# run_shell_tests: the shared tests run side by side (a passes only if b starts while a waits for
# it), one marked alone runs after them all, a test that exits non-zero with no TAP line is one
# failure, and the lines are tallied in the tests' order, not the order they ended in
mkdir -p "$T/suite" "$T/m"
for x in a b; do
  y=$([ $x = a ] && echo b || echo a)
  cat >"$T/suite/test_$x.sh" <<SH
touch "$T/m/$x.start"
for _ in \$(seq "\$((\${WAIT%.*} * 20))"); do [ -e "$T/m/$y.start" ] && break; sleep 0.05; done
[ -e "$T/m/$y.start" ] && echo "ok 1 - $x:$y ran beside it" || echo "not ok 1 - $x:$y never ran beside it"
touch "$T/m/$x.end"
SH
done
printf 'touch "%s/m/d.end"; exit 3\n' "$T" >"$T/suite/test_d.sh"
cat >"$T/suite/test_0alone.sh" <<SH
# suite: alone (a fixture of test_tap.sh)
n=\$(ls "$T/m" | grep -c '\.end\$'); [ "\$n" = 3 ] && echo "ok 1 - 0alone:after the others" || echo "not ok 1 - 0alone:\$n of 3 others ended before it"
SH
suite() { # JOBS WAIT: "passed failed skipped" of run_shell_tests over $T/suite; its lines in $T/suite.JOBS
  rm -f "$T"/m/*
  (
    passed=0 failed=0 skipped=0 ci=1 jobs_max=$1 log=$T/log$1
    export WAIT=$2
    mkdir -p "$log"; . tests/tap.sh
    run_shell_tests "$T/suite" >"$T/suite.$1" 2>&1
    echo "$passed $failed $skipped"
  )
}
r=$(suite 2 "$(scaled 20)")
check "run_shell_tests, 2 at a time: the shared side by side, the alone after, a silent exit 3 failed [$r]" test "$r" = "3 1 0"
check "the exit without a line is named" grep -q '^not ok - test_d exited 3 without a failing test line' "$T/suite.2"
check "the tests are tallied in their order, not the order they ran in" \
  test "$(sed -n 's/^# \(test_[0-9a-z]*\):.*/\1/p' "$T/suite.2" | tr '\n' ' ')" = "test_0alone test_a test_b test_d "
r=$(suite 1 1)
check "one at a time, a waits for b in vain [$r]" test "$r" = "2 2 0"
check "... and says so" grep -q '^not ok 1 - a:b never ran beside it' "$T/suite.1"
finish
