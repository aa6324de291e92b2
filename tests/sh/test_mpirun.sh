#!/usr/bin/env bash
# test_mpirun.sh - a cddp program started by Open MPI's mpirun (no cddp launcher) learns its rank
# from OMPI_COMM_WORLD_*, meets its peers through a store hosted by rank 0, and gets exact results.
cd "$(dirname "$0")/../.." && source tests/sh/lib.sh
if ! command -v mpirun >/dev/null; then
  echo "ok 1 - test_mpirun:mpirun # SKIP Open MPI is not installed"; exit 0
fi
T=$(mktemp -d /tmp/cddp-mpirun.XXXXXX)
trap 'rm -rf "$T"' EXIT
mpi() { timeout 60 mpirun --allow-run-as-root --oversubscribe "$@"; }

mpi -np 2 "$CDDP" bench allreduce -b 1K -e 4M -f 16 -c 1 >"$T/np2.out" 2>&1; rc=$?
v=$(bench_verdict 2 "$T/np2.out")
if [ $rc -eq 0 ] && [ "$v" = clean ]; then ok "mpirun -np 2: allreduce exact"; else fail "mpirun -np 2: allreduce exact" "exit $rc, $v"; fi

mpi -np 3 "$CDDP" bench reduce_scatter -b 3K -e 3M -f 32 -c 1 >"$T/np3.out" 2>&1; rc=$?
v=$(bench_verdict 3 "$T/np3.out")
if [ $rc -eq 0 ] && [ "$v" = clean ]; then ok "mpirun -np 3: reduce_scatter exact"; else fail "mpirun -np 3: reduce_scatter exact" "exit $rc, $v"; fi

# the ranks mpirun gave are the ranks cddp uses: rank 0 prints, and names both pids
if grep -q "Rank   1 Pid" "$T/np2.out" && grep -q "cddp bench allreduce: 2 ranks on 1 host" "$T/np2.out"; then ok "ranks from OMPI_COMM_WORLD_*"
else fail "ranks from OMPI_COMM_WORLD_*"; fi
finish
