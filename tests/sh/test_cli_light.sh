#!/usr/bin/env bash
# test_cli_light.sh - the cddp binary is the light one (no BLAS, MPI, CUDA or C++ runtime: the
# launcher's agent starts in ~1.5 ms of CPU); train, bench and sample run as cddp-full, found
# next to it, with the same arguments; without cddp-full they say so in one line.
cd "$(dirname "$0")/../.." && source tests/sh/lib.sh
T=$(mktemp -d /tmp/cddp-light.XXXXXX)
trap 'rm -rf "$T"' EXIT

needed=$(readelf -d "$CDDP" | sed -n 's/.*Shared library: \[\(.*\)\]/\1/p' | tr '\n' ' ')
if [ -n "$needed" ] && ! grep -qE "mpi|blas|cuda|stdc\+\+|hwloc" <<<"$needed"; then ok "cddp needs only: $needed"
else fail "cddp's libraries" "$needed"; fi
full=build/libexec/cddp/cddp-full
if readelf -d "$full" | grep -q "libopenblas"; then ok "cddp-full links BLAS"; else fail "cddp-full links BLAS"; fi

# a command of cddp-full through cddp: same arguments, same exit code, its argv[0] kept
out=$("$CDDP" train --config "$T/none.yaml" 2>&1); rc=$?
if [ $rc -ne 0 ] && grep -q "$T/none.yaml" <<<"$out"; then ok "cddp train runs as cddp-full (rc $rc, names the config)"
else fail "cddp train through cddp-full" "rc=$rc $out"; fi
if "$CDDP" sample --help 2>&1 | grep -q "^usage: cddp sample" && "$CDDP" bench --help | grep -q "^usage: cddp bench"; then
  ok "sample and bench --help through cddp-full"; else fail "sample/bench --help"; fi
if "$CDDP" --help | grep -q "^  train " && "$CDDP" --help | grep -q "^  run "; then ok "the usage lists every command"
else fail "usage"; fi

# alone (cddp-full not installed next to it): one line, exit 127; its own commands still work
mkdir -p "$T/bin" && cp "$CDDP" "$T/bin/cddp"
out=$("$T/bin/cddp" train --config x 2>&1); rc=$?
if [ $rc -eq 127 ] && [ "$(wc -l <<<"$out")" -eq 1 ] && grep -q "cddp train: cannot run .*cddp-full" <<<"$out"; then
  ok "without cddp-full: one line, exit 127"; else fail "without cddp-full" "rc=$rc $out"; fi
if "$T/bin/cddp" run --help | grep -q "^usage: cddp run"; then ok "without cddp-full, cddp run works"
else fail "cddp run alone"; fi
finish
