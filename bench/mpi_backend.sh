#!/usr/bin/env bash
# mpi_backend.sh - allreduce busbw of `cddp bench --backend mpi` vs the native backend vs Open MPI's
# own MPI_Allreduce (bench/peers/mpi_allreduce.c), all started by mpirun, interleaved.
# Usage: bench/mpi_backend.sh [NP] [REPEAT]   (defaults 2 and 3; prints the best of REPEAT per cell)
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
NP=${1:-2} REPEAT=${2:-3}
OUT=$(mktemp -d /tmp/cddp-mpibench.XXXXXX)
make -j2 cli >"$OUT/build.log" 2>&1 && make -C bench >>"$OUT/build.log" 2>&1 || { tail -5 "$OUT/build.log"; exit 1; }
export OMP_NUM_THREADS=1
run() { timeout 300 mpirun --allow-run-as-root --oversubscribe -np "$NP" "$@" -b 4K -e 64M -f 16 -w 3 -n 10 -c 1 2>&1; }
for r in $(seq "$REPEAT"); do
  run build/cddp bench allreduce --backend native >"$OUT/native.$r.txt"
  run build/cddp bench allreduce --backend mpi >"$OUT/mpi.$r.txt"
  run build/bench/mpi_allreduce >"$OUT/peer.$r.txt"
done
best() { # NAME SIZE -> "time_us busbw" of the row with the highest busbw
  cat "$OUT/$1".*.txt | sed -E 's/^\[[^]]*\] ?//' | awk -v s="$2" '$1 == s && NF >= 9 && $9 == 0 && $8 > b { b = $8; t = $6 } END { printf "%10s %6s", t == "" ? "-" : t, b == "" ? "-" : b }'
}
echo "# allreduce, float sum, in place, $NP ranks on $(hostname), best of $REPEAT (time us, busbw GB/s)"
printf "%10s | %17s | %17s | %17s\n" bytes "cddp native" "cddp --backend mpi" "MPI_Allreduce"
for s in 4096 65536 1048576 16777216; do
  printf "%10s | %s | %s | %s\n" "$s" "$(best native $s)" "$(best mpi $s)" "$(best peer $s)"
done
echo "# logs: $OUT"
