#!/usr/bin/env bash
# test_flight.sh - `cddp flight DIR` over the ranks' flight records: the first collective two ranks
# called differently is named (exit 1), a rank that is behind is named, and no records is one line,
# exit 2 (test_hang.sh reads a dump the watchdog really wrote).
cd "$(dirname "$0")/../.." && source tests/sh/lib.sh
T=$(mktemp -d /tmp/cddp-flight-test.XXXXXX)
trap 'rm -rf "$T"' EXIT
# mk DIR RANK "CSEQ OP COUNT STATE"...: a record file as comm/flight.c writes it
mk() {
  local dir=$1 r=$2 sep=""; shift 2
  mkdir -p "$dir"
  { echo "{\"rank\": $r, \"pid\": 1, \"seq\": 9, \"done\": 8, \"collectives\": ["
    for l in "$@"; do
      set -- $l
      printf '%s\n  {"seq": %s, "cseq": %s, "op": "%s", "dtype": "f32", "redop": "sum", "count": %s, "root": 0, "world": 2, "round": 0, "state": "%s", "started_s_ago": 1.5, "ms": 0.100}' \
        "$sep" "$1" "$1" "$2" "$3" "$4"
      sep=,
    done
    printf '\n]}\n'; } >"$dir/rank$r.json"
}
mk "$T/desync" 0 "1 allreduce 1024 done" "2 allreduce 1024 done" "3 allreduce 4096 started"
mk "$T/desync" 1 "1 allreduce 1024 done" "2 allreduce 1024 done" "3 broadcast 4096 started"
out=$("$CDDP" flight "$T/desync"); rc=$?
[ $rc = 1 ] && grep -q "^desync at collective #3 of round 0: rank 0 called allreduce #3 (4096 f32, sum), rank 1 called broadcast #3 (4096 f32 from rank 0)$" <<<"$out" &&
  ok "a desync named: the collective, both ranks, both calls (exit 1)" || fail "desync" "rc=$rc: $out"
mk "$T/behind" 0 "1 allreduce 1024 done" "2 allreduce 1024 done" "3 allreduce 4096 started"
mk "$T/behind" 1 "1 allreduce 1024 done" "2 allreduce 1024 done"
echo "not a record" >"$T/behind/rank7.json"
out=$("$CDDP" flight "$T/behind" 2>"$T/behind.err"); rc=$?
[ $rc = 0 ] && grep -q "^rank 0: inside allreduce #3 (4096 f32, sum) for 1.5 s$" <<<"$out" &&
  grep -q "^rank 1 is behind: its last collective is allreduce #2 (1024 f32, sum) (done); others reached #3$" <<<"$out" &&
  grep -q "^no desync" <<<"$out" && grep -q "rank7.json is not a flight record; skipped" "$T/behind.err" &&
  ok "who is stuck inside what, and who is behind (exit 0); a bad file skipped with a line" || fail "behind" "rc=$rc: $out"
out=$("$CDDP" flight "$T/none" 2>&1); rc=$?
[ $rc = 2 ] && [ "$(grep -c . <<<"$out")" = 1 ] && grep -q "cannot read $T/none" <<<"$out" && ok "no such folder: one line, exit 2" ||
  fail "no folder" "rc=$rc: $out"
mkdir -p "$T/empty"; out=$("$CDDP" flight "$T/empty" 2>&1); rc=$?
[ $rc = 2 ] && grep -q "no rank<R>.json flight records in $T/empty" <<<"$out" && ok "no records: one line, exit 2" || fail "empty" "rc=$rc: $out"
finish
