#!/usr/bin/env bash
# test_scale.sh - CDDP_TEST_SCALE in the shell tests (tests/sh/lib.sh): scaled and wait_for take
# it, and every `timeout N` a test runs lasts N times it (tests/sh/scaled/timeout), with the pid
# and the name of timeout itself (tests find their jobs by them); at 1, coreutils' own is used.
cd "$(dirname "$0")/../.." && source tests/sh/lib.sh
# in_test SCALE CMD: CMD (bash) in a fresh test shell under CDDP_TEST_SCALE=SCALE
in_test() { CDDP_TEST_SCALE=$1 CDDP_REAL_TIMEOUT='' bash -c "source tests/sh/lib.sh; $2"; }
secs() { awk -v a="$1" -v b="$(date +%s.%N)" 'BEGIN { printf "%.2f", b - a }'; }
check "at 1: coreutils' timeout, PATH untouched" test "$(in_test 1 'type -P timeout; echo $PATH')" = "$(type -P timeout; echo "$PATH")"
check "scaled: 2.5 x 4 = 10, 'fast' counts as 1" test "$(in_test 4 'scaled 2.5') $(in_test fast 'scaled 2.5')" = "10 2.5"
t0=$(date +%s.%N); in_test 4 'timeout 0.2 sleep 5'; rc=$?; dt=$(secs "$t0")
check "at 4: timeout 0.2 lasts 0.8 s, exit 124 ($dt s, exit $rc)" \
  awk -v d="$dt" -v r="$rc" -v u="$(scaled 2)" 'BEGIN { exit !(r == 124 && d >= 0.75 && d < 0.8 + u) }'
t0=$(date +%s.%N); in_test 3 'timeout -s KILL -k 9 0.1s sleep 5' 2>/dev/null; rc=$?; dt=$(secs "$t0")
check "at 3: options pass through, 0.1s -> 0.3s ($dt s, exit $rc)" \
  awk -v d="$dt" -v r="$rc" -v u="$(scaled 2)" 'BEGIN { exit !(r == 137 && d >= 0.28 && d < 0.3 + u) }'
# a backgrounded timeout: $! is timeout itself (its child is the command), as tests rely on
out=$(in_test 2 'timeout 5 sleep 3 & p=$!; wait_for 5 pgrep -P $p -x sleep >/dev/null; echo "$(cat /proc/$p/comm) $(pgrep -P $p -x sleep | wc -l)"; kill $p')
check "at 2: \$! of 'timeout 5 sleep 3 &' is a process named timeout, parent of the sleep [$out]" test "$out" = "timeout 1"
check "at 2: what a test runs is scaled too" test "$(in_test 2 'bash -c "timeout 0.1 sleep 1; echo \$?"')" = 124
t0=$(date +%s.%N); in_test 2 'sleep 5 & wait_all 0.2 $!' 2>/dev/null; dt=$(secs "$t0")
check "at 2: wait_all 0.2 kills after 0.4 s ($dt s)" awk -v d="$dt" -v u="$(scaled 2)" 'BEGIN { exit !(d >= 0.38 && d < 0.4 + u) }'
# a wait that runs out: by the clock (the scaled seconds), and await says what never happened
t0=$(date +%s.%N); out=$(in_test 2 'await "the thing" 0.2 false; echo "rc $?"' | tr '\n' ' '); dt=$(secs "$t0")
check "at 2: await 0.2 gives up after 0.4 s with one failing line [$out] ($dt s)" \
  awk -v o="$out" -v d="$dt" -v u="$(scaled 2)" 'BEGIN { exit !(o == "not ok 1 - bash:the thing (not within 0.4 s: false) rc 1 " && d >= 0.38 && d < 0.4 + u) }'
out=$(in_test 2 'n=0; f() { n=$((n + 1)); [ $n = 3 ]; }; poll_every=0 wait_for 5 f; echo "rc $? n $n"')
check "wait_for: a function's variable kept, done once it succeeds, poll_every=0 [$out]" test "$out" = "rc 0 n 3"
out=$(in_test 3 'CDDP_TEST_SCALE=2 CDDP_REAL_TIMEOUT= timeout 10 bash -c "source tests/sh/lib.sh; tr : \"\\n\" <<<\$PATH | grep -c /scaled; basename \$(dirname \$CDDP_REAL_TIMEOUT)"' | tr '\n' ' ')
check "a test started by a test: the shim on PATH once, never taken for the real timeout [$out]" test "$out" = "1 bin "
finish
