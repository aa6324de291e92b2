#!/usr/bin/env bash
# test_debug.sh - CDDP_DEBUG / CDDP_DEBUG_SUBSYS: INFO names the interface, the transport and
# the algorithm; WARN (the default) is quiet; a subsystem can be excluded; CDDP_DEBUG_TIMESTAMP.
cd "$(dirname "$0")/../.." && source tests/sh/lib.sh
T=$(mktemp -d /tmp/cddp-debug.XXXXXX)
trap 'rm -rf "$T"' EXIT
# job OUT: the bench under the launcher; its exit is a check of its own (the greps alone would
# pass a run that printed its lines and then failed)
job() {
  timeout 60 "$CDDP" run --standalone --nproc-per-node 2 "$CDDP" bench allreduce -b 4K -e 4K -n 2 -c 1 >"$1" 2>&1
  local rc=$?
  [ $rc = 0 ] && ok "$(basename "$1" .out): the job exits 0" || fail "$(basename "$1" .out): the job" "exit $rc: $(tail -2 "$1" | tr '\n' ' ')"
}

CDDP_DEBUG=INFO CDDP_TRANSPORT=tcp job "$T/tcp.out"
check "INFO over tcp names the interface" grep -q 'CDDP INFO NET .*using lo 127.0.0.1' "$T/tcp.out"
check "INFO over tcp names streams per peer" grep -q 'CDDP INFO NET .*stream(s) to each of 1 peer' "$T/tcp.out"
check "INFO names transport and algorithm" grep -q 'comm ready: rank 1 of 2, .*transport tcp, .*algorithm auto' "$T/tcp.out"
check "INFO lines carry host:pid [rank]" grep -qE '^\[rank 0\] [^ ]+:[0-9]+ \[0\] CDDP INFO' "$T/tcp.out"

CDDP_DEBUG=INFO CDDP_DEBUG_TIMESTAMP=1 CDDP_DEBUG_SUBSYS=RUN,COMM job "$T/time.out"
check "CDDP_DEBUG_TIMESTAMP=1: a worker's lines start with the wall clock" grep -qE '^\[rank 0\] [0-9]{10}\.[0-9]{6} [^ ]+:[0-9]+ \[0\] CDDP INFO' "$T/time.out"
check "CDDP_DEBUG_TIMESTAMP=1: the agent's too" grep -qE '^[0-9]{10}\.[0-9]{6} [^ ]+:[0-9]+ CDDP INFO RUN' "$T/time.out"

CDDP_DEBUG=INFO job "$T/shm.out"
check "INFO over shm names the algorithms" grep -q 'CDDP INFO SHM .*direct .* up to 65536 B, ring above' "$T/shm.out"
check "INFO over shm names the transport" grep -q 'comm ready: rank 0 of 2, .*transport shm' "$T/shm.out"

CDDP_DEBUG=INFO CDDP_DEBUG_SUBSYS=^STORE,SHM job "$T/excl.out"
if grep -q 'CDDP INFO COMM' "$T/excl.out" && ! grep -qE 'CDDP INFO (STORE|SHM)' "$T/excl.out"; then
  ok "CDDP_DEBUG_SUBSYS=^STORE,SHM excludes those two only"
else fail "CDDP_DEBUG_SUBSYS=^STORE,SHM excludes those two only"; fi

CDDP_DEBUG_SUBSYS=COMM CDDP_DEBUG=INFO job "$T/only.out"
if grep -q 'CDDP INFO COMM' "$T/only.out" && ! grep -qE 'CDDP INFO (STORE|SHM|RDZV|ENV)' "$T/only.out"; then
  ok "CDDP_DEBUG_SUBSYS=COMM keeps only COMM"
else fail "CDDP_DEBUG_SUBSYS=COMM keeps only COMM"; fi

job "$T/quiet.out"
if ! grep -q 'CDDP ' "$T/quiet.out" && grep -q 'Out of bounds values : 0 OK' "$T/quiet.out"; then ok "WARN level is quiet on success"
else fail "WARN level is quiet on success" "$(grep -m2 'CDDP ' "$T/quiet.out")"; fi
finish
