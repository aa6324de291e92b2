#!/usr/bin/env bash
# test_hostile_files.sh - the files another process wrote, as an attacker or a crash leaves them,
# read by `cddp flight`, `cddp status RUN_DIR` and `cddp plot`: a record claiming collective
# numbers 0 and 2^64-1, a FIFO in place of a record, escape sequences in a record's words, a
# per-rank line missing a rank, a quote in a folder's name. Each ends at once, prints no control
# byte, invents no number, runs nothing.
# (The fuzzers tests/fuzz/fuzz_{flight,status,metrics}.c found most of these.)
cd "$(dirname "$0")/../.." && source tests/sh/lib.sh
T=$(mktemp -d /tmp/cddp-hostile.XXXXXX)
trap 'rm -rf "$T"' EXIT
rec() { # rec RANK CSEQ OP: one rank's record file line as comm/flight.c writes it
  printf '{"rank": %s, "pid": 1, "seq": 2, "done": 1, "collectives": [\n  {"seq": 1, "cseq": %s, "op": "%s", "dtype": "f32", "redop": "sum", "count": 4, "root": 0, "world": 2, "round": 0, "state": "done", "started_s_ago": 1.0, "ms": 1.0}\n]}\n' "$@"
}
mkdir -p "$T/range" "$T/fifo" "$T/esc"
rec 0 0 allreduce >"$T/range/rank0.json"; rec 1 18446744073709551615 allreduce >"$T/range/rank1.json"
out=$(timeout 10 "$CDDP" flight "$T/range" 2>&1); rc=$?
[ $rc = 0 ] && grep -q "^rank 0 is behind" <<<"$out" && ok "flight: collective numbers 0 and 2^64-1 end at once (they walked 2^64 numbers)" ||
  fail "flight range" "rc=$rc: $out"
rec 0 1 allreduce >"$T/fifo/rank0.json"; mkfifo "$T/fifo/rank1.json"
out=$(timeout 10 "$CDDP" flight "$T/fifo" 2>&1); rc=$?
[ $rc = 0 ] && grep -q "rank1.json is not a flight record; skipped" <<<"$out" && ok "flight: a FIFO for a record is skipped, not waited on" ||
  fail "flight fifo" "rc=$rc: $out"
rec 0 1 $'all\e]0;pwned\areduce' >"$T/esc/rank0.json"; rec 1 1 allreduce >"$T/esc/rank1.json"
out=$(timeout 10 "$CDDP" flight "$T/esc" 2>&1); rc=$?
[ $rc = 1 ] && ! LC_ALL=C grep -q '[[:cntrl:]]' <<<"$out" && grep -q 'all?]0;pwned?reduce' <<<"$out" &&
  ok "flight: escape sequences in a record print as '?'" || fail "flight escapes" "rc=$rc: $(cat -v <<<"$out")"

# cddp status RUN_DIR: a FIFO for the job record or for metrics.jsonl is refused with one line
mkdir -p "$T/run1" "$T/run2"
mkfifo "$T/run1/endpoint"
out=$(timeout 10 "$CDDP" status "$T/run1" 2>&1); rc=$?
[ $rc != 0 ] && [ $rc != 124 ] && [ "$(grep -c . <<<"$out")" = 1 ] && grep -q "endpoint is not a regular file" <<<"$out" &&
  ok "status: a FIFO for the job record, one line, exit $rc" || fail "status fifo endpoint" "rc=$rc: $out"
printf 'store 127.0.0.1:1\nrun_id J\ntoken -\nended done at step 3\n' >"$T/run2/endpoint"; mkfifo "$T/run2/metrics.jsonl"
out=$(timeout 10 "$CDDP" status "$T/run2" 2>&1); rc=$?
[ $rc != 124 ] && grep -q "metrics.jsonl is not a regular file" <<<"$out" && ok "status: a FIFO for metrics.jsonl named, not waited on" ||
  fail "status fifo metrics" "rc=$rc: $out"
printf 'store 127.0.0.1:99999\nrun_id J\ntoken -\n' >"$T/run2/endpoint"
out=$(timeout 10 "$CDDP" status "$T/run2" 2>&1); rc=$?
[ $rc != 0 ] && [ $rc != 124 ] && grep -q "endpoint is malformed" <<<"$out" && ok "status: port 99999 in the job record is malformed" ||
  fail "status port" "rc=$rc: $out"

# cddp plot: a per-rank line without rank 1 plots no point for it (its value was the stack's garbage)
mkdir -p "$T/plot" "$T/bin"
printf '{"step":1,"loss":2.0,"samples_per_s":10,"ranks":[{"rank":0,"compute_ms":1,"data_ms":1,"optim_ms":1},{"rank":2,"compute_ms":2,"data_ms":2,"optim_ms":2}]}\n' >"$T/plot/metrics.jsonl"
printf '#!/bin/sh\ncp "$(dirname "$1")/ranks.dat" "%s/ranks.dat"\n' "$T" >"$T/bin/gnuplot"; chmod +x "$T/bin/gnuplot"
PATH="$T/bin:$PATH" timeout 10 "$CDDP" plot "$T/plot" --out "$T/plot/x.png" >/dev/null 2>&1
[ "$(cat "$T/ranks.dat" 2>/dev/null)" = "1 3 nan 6" ] && ok "plot: a rank missing from a per-rank line is nan, not garbage" ||
  fail "plot missing rank" "$(cat "$T/ranks.dat" 2>&1)"
# cddp plot of a sweep in a folder whose name holds a quote: the table's path went to gnuplot
# unquoted ('...'), so the name ran system(...) (issue 27 item 5 fixed the title, not this)
if command -v gnuplot >/dev/null; then
  D="$T/sw/x'.system('touch $T/pwned').'"; mkdir -p "$D"
  printf '# axes: a\n1\tx\t10\t0\t0\t5\n' >"$D/sweep.tsv"
  out=$(timeout 20 "$CDDP" plot "$D" --out "$T/sw/o.png" 2>&1); rc=$?
  [ ! -e "$T/pwned" ] && [ $rc = 0 ] && [ -s "$T/sw/o.png" ] && ok "plot: a quote in the sweep folder's name runs nothing, the plot is drawn" ||
    fail "plot quote injection" "rc=$rc pwned=$([ -e "$T/pwned" ] && echo yes): $out"
else echo "ok $((t_n + 1)) - $t_name:plot quote injection # SKIP gnuplot is not installed"; t_n=$((t_n + 1)); fi
mkdir -p "$T/pf"; mkfifo "$T/pf/metrics.jsonl"
out=$(PATH="$T/bin:$PATH" timeout 10 "$CDDP" plot "$T/pf" --out "$T/pf/x.png" 2>&1); rc=$?
[ $rc = 1 ] && grep -q "cannot read $T/pf/metrics.jsonl: not a regular file" <<<"$out" && ok "plot: a FIFO for metrics.jsonl, one line, exit 1" ||
  fail "plot fifo" "rc=$rc: $out"
finish
