#!/usr/bin/env bash
# test_stress.sh - tests/stress.sh around a fake suite (CDDP_STRESS_SUITE): one busy loop per core
# runs beside every run, the suite sees CDDP_TEST_SCALE (3 unless set), a failed run is counted
# and named, the loops are gone at the end, and bad arguments get one line and exit 2.
cd "$(dirname "$0")/../.." && source tests/sh/lib.sh
T=$(mktemp -d /tmp/cddp-stress-test.XXXXXX)
trap 'rm -rf "$T"' EXIT
# the fake suite: counts the busy loops beside it (its parent's other children), records the
# scale it was given, fails its second run
cat >"$T/suite" <<SH
#!/usr/bin/env bash
i=\$(( \$(cat "$T/runs" 2>/dev/null || echo 0) + 1 )); echo \$i >"$T/runs"
pgrep -P \$PPID -f 'while :; do :; done' >>"$T/hogs"
echo "\$(pgrep -P \$PPID -f 'while :; do :; done' | wc -l) \$CDDP_TEST_SCALE \$*" >>"$T/seen"
[ \$i = 2 ] && { echo "not ok 7 - fake:run two fails"; echo "4 passed, 1 failed, 0 skipped"; exit 1; }
echo "5 passed, 0 failed, 0 skipped"
SH
chmod +x "$T/suite"
CDDP_STRESS_SUITE=$T/suite timeout 60 tests/stress.sh 3 --quick >"$T/out" 2>&1; rc=$?
n=$(nproc)
check "3 runs, one failed: exit 1, '2 of 3 runs passed'" test "$rc $(tail -1 "$T/out")" = "1 stress: 2 of 3 runs passed"
check "each run's summary, and the failing line of run 2" grep -qx "not ok 7 - fake:run two fails" "$T/out"
check "run 2's summary and exit" grep -qx "stress: run 2 of 3: 4 passed, 1 failed, 0 skipped (exit 1)" "$T/out"
check "a busy loop per core ($n) beside every run, the scale 3, the options passed on [$(tr '\n' ';' <"$T/seen")]" \
  test "$(sort -u "$T/seen")" = "$n 3 --quick"
left=0; for p in $(sort -u "$T/hogs"); do kill -0 "$p" 2>/dev/null && left=$((left + 1)); done
check "no busy loop outlives it ($(sort -u "$T/hogs" | wc -l) seen, $left left)" test "$left" = 0
CDDP_STRESS_SUITE=$T/suite CDDP_TEST_SCALE=5 timeout 60 tests/stress.sh 1 >/dev/null 2>&1
check "CDDP_TEST_SCALE given is passed on" test "$(tail -1 "$T/seen")" = "$n 5 "
out=$(CDDP_STRESS_SUITE=$T/suite tests/stress.sh 0 2>&1); rc=$?
check "N 0: one line, exit 2" test "$rc $(wc -l <<<"$out")" = "2 1"
out=$(CDDP_STRESS_SUITE=$T/suite CDDP_TEST_SCALE=fast tests/stress.sh 1 2>&1); rc=$?
check "CDDP_TEST_SCALE=fast: one line, exit 2 [$out]" test "$rc $(wc -l <<<"$out")" = "2 1"
finish
