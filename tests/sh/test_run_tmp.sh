#!/usr/bin/env bash
# test_run_tmp.sh - `cddp run` leaves nothing in $TMPDIR once it ends: a job that ends well, one
# stopped by SIGTERM or SIGINT while its workers run, one stopped while it waits for its peers
# (the signal guard ends that agent, which used to leave its folders behind), and a failed job
# keeps only the flight records its log names.
set -u
cd "$(dirname "$0")/../.." || exit 1
. tests/sh/lib.sh
T=$(mktemp -d /tmp/cddp-test-run-tmp.XXXXXX)
trap 'rm -rf "$T"' EXIT
export TMPDIR=$T/tmp
left() { (cd "$TMPDIR" && ls -A | tr '\n' ' '); }
# fresh: an empty $TMPDIR for the next case
fresh() { rm -rf "$TMPDIR"; mkdir -p "$TMPDIR"; }

fresh
"$CDDP" run --standalone --nproc-per-node 2 /bin/true 2>"$T/good.err"
rc=$?
if [ $rc = 0 ] && [ -z "$(left)" ]; then ok "a job that ends well leaves nothing"
else fail "a job that ends well leaves nothing" "exit $rc, left: $(left)"; fi

for sig in TERM INT; do
  fresh
  "$CDDP" run --standalone --nproc-per-node 2 /bin/sleep 30 2>"$T/$sig.err" &
  pid=$!
  await "SIG$sig: the workers run (their flight pages exist)" 10 sh -c "ls '$TMPDIR'/cddp-run-*/flight-rank1.page >/dev/null 2>&1"
  kill -$sig $pid
  wait $pid
  rc=$?
  if [ $rc -ne 0 ] && [ -z "$(left)" ]; then ok "SIG$sig while the workers run leaves nothing"
  else fail "SIG$sig while the workers run leaves nothing" "exit $rc, left: $(left)"; fi
done

fresh
port=$(free_port)
"$CDDP" run --nnodes 2 --rdzv-endpoint 127.0.0.1:$port --rdzv-id tmp$$ /bin/true 2>"$T/wait.err" &
pid=$!
await "the waiting agent hosts the store" 10 port_listening "$port" # its store is up: it waits for node 1, where only the guard takes a signal
kill -TERM $pid
wait $pid
rc=$?
if [ $rc = 143 ] && grep -q "while it waited on the store or its peers" "$T/wait.err" && [ -z "$(left)" ]; then
  ok "SIGTERM while waiting for the peers (the guard ends it) leaves nothing"
else fail "SIGTERM while waiting for the peers leaves nothing" "exit $rc, left: $(left): $(tail -2 "$T/wait.err" | tr '\n' ' ')"; fi

# a failed job: the records of its failure stay only where a line says so (here the INFO one)
fresh
"$CDDP" run --standalone --nproc-per-node 2 /bin/false 2>"$T/fail.err"
rc=$?
if [ $rc -ne 0 ] && [ -z "$(left)" ]; then ok "a failed job whose log names no flight folder leaves nothing"
else fail "a failed job leaves nothing" "exit $rc, left: $(left)"; fi
fresh
CDDP_DEBUG=INFO CDDP_DEBUG_SUBSYS=RUN "$CDDP" run --standalone --nproc-per-node 2 /bin/false 2>"$T/named.err"
rc=$?
dir=$(sed -n 's/.*the flight records of [0-9]* worker(s) are in \(.*\)$/\1/p' "$T/named.err" | head -1)
if [ $rc -ne 0 ] && [ -n "$dir" ] && [ -s "$dir/rank0.json" ] && [ "$(left)" = "$(basename "$dir") " ]; then
  ok "a failed job keeps the flight folder its log names, and only that"
else fail "a failed job keeps its named flight folder" "exit $rc, dir '$dir', left: $(left)"; fi
finish
