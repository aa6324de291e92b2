#!/usr/bin/env bash
# compare.sh - cddp's collectives side by side with Open MPI and torch.distributed (gloo), from one run.
#
# Usage: bench/compare.sh [--out DIR] [--repeat N]   (run from anywhere; about 1-2 minutes on 2 cores)
# Prints one row per figure of the speed table in issue 2, each with its goal and, for the shared
# memory rows, what that kind of buffer reaches on this host in the same run without any library
# (the "prototype" column: build/bench/shm_ceiling, the best of its mechanisms, spinning, pinned);
# keeps every program's full output (nccl-tests-style columns) in DIR (default: a fresh /tmp dir).
# --repeat N runs cddp and Open MPI N times, interleaved, and shows each one's best (busy machine).
# 2 ranks on this host. Peers get their best settings: one OpenMP thread per rank with passive
# waits (2 ranks share the cores), Open MPI's default shared-memory path (vader) or --mca btl
# tcp,self for the TCP row.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
ROOT=$PWD
OUT=""
REPEAT=1
while [ $# -gt 0 ]; do
  case "$1" in
    --out) OUT=${2:?--out needs a directory}; shift 2 ;;
    --repeat) REPEAT=${2:-}; shift 2
              [[ "$REPEAT" =~ ^[1-9][0-9]?$ ]] || { echo "compare.sh: --repeat needs 1..99" >&2; exit 2; } ;;
    -h|--help) sed -n '2,10s/^# \{0,1\}//p' "$0"; exit 0 ;;
    *) echo "compare.sh: unknown argument '$1' (--out DIR, --repeat N)" >&2; exit 2 ;;
  esac
done
OUT=${OUT:-$(mktemp -d /tmp/cddp-compare.XXXXXX)}
mkdir -p "$OUT"

scripts/install-deps.sh bench || exit 1
make -j"$(nproc)" cli >"$OUT/build.log" 2>&1 || { tail -20 "$OUT/build.log"; exit 1; }
make -C bench >>"$OUT/build.log" 2>&1 || echo "compare.sh: the MPI peer did not build (see $OUT/build.log)" >&2
make -C bench ceiling >>"$OUT/build.log" 2>&1 || echo "compare.sh: shm_ceiling did not build (see $OUT/build.log)" >&2

CDDP=$ROOT/build/cddp
MPI=$ROOT/build/bench/mpi_allreduce
CEIL=$ROOT/build/bench/shm_ceiling
GLOO=$ROOT/bench/peers/gloo_allreduce.py
PY=/usr/bin/python3           # Debian's python3, the one python3-torch installed into
export OMP_NUM_THREADS=1 OMP_WAIT_POLICY=PASSIVE
unset CDDP_TRANSPORT CDDP_ALGO

ours()  { timeout 120 "$CDDP" run --standalone --nproc-per-node 2 "$CDDP" bench allreduce "$@"; }
mpi()   { timeout 120 mpirun --allow-run-as-root --oversubscribe -np 2 "$@"; }
gloo()  { (cd "$OUT" && timeout 180 "$PY" -m torch.distributed.run --standalone --nproc_per_node 2 \
            --redirects 1 --tee 1 "$GLOO" "$@"); }

# column N (6 = time us: the lowest; 8 = busbw GB/s: the highest) of the row for SIZE bytes,
# over the logs NAME.*.txt; "-" when absent
col() { # NAME SIZE N
  cat "$OUT/$1".*.txt 2>/dev/null | sed -E 's/^\[[^]]*\]:? ?//' | awk -v s="$2" -v n="$3" '
    $1 == s && NF >= 9 && $n ~ /^[0-9.]+$/ { if (v == "" || (n == 6 ? $n < v : $n > v)) v = $n }
    END { print (v == "" ? "-" : v) }'
}
# the best busbw of shm_ceiling's rows (0 wrong) for SIZE whose mechanism matches the regex MECH;
# "-" when absent
ceil() { # SIZE MECH
  cat "$OUT"/ceiling*.txt 2>/dev/null | awk -v s="$1" -v m="^($2)$" '
    $1 == s && NF == 6 && $2 ~ m && $6 == 0 { if ($5 > v) v = $5 }
    END { print (v == "" ? "-" : v) }'
}
wrong() { # LOG -> total of the #wrong column
  sed -E 's/^\[[^]]*\]:? ?//' "$1" 2>/dev/null | awk '$1 ~ /^[0-9]+$/ && NF >= 9 && $9 ~ /^[0-9]+$/ { w += $9 } END { print w + 0 }'
}
step() { echo "compare.sh: $*" >&2; }

M64=$((64 << 20)) M1=$((1 << 20)) K4=4096
for r in $(seq "$REPEAT"); do
  step "cddp ($r/$REPEAT): bandwidth (1 MiB, 64 MiB), zero-copy, latency (4 KiB), TCP"
  ours -b 1M -e 64M -f 64 -w 5 -n 20 -c 1 >"$OUT/cddp-bw.$r.txt" 2>&1
  ours -b 64M -e 64M -w 5 -n 20 -c 1 --zero-copy >"$OUT/cddp-zc.$r.txt" 2>&1
  ours -b 1M -e 64M -f 64 -w 5 -n 20 -c 1 --thp >"$OUT/cddp-thp.$r.txt" 2>&1
  ours -b 4K -e 4K -w 200 -n 5000 -c 1 >"$OUT/cddp-lat.$r.txt" 2>&1
  CDDP_TRANSPORT=tcp ours -b 64M -e 64M -w 2 -n 10 -c 1 >"$OUT/cddp-tcp.$r.txt" 2>&1
  step "Open MPI ($r/$REPEAT): the same"
  mpi "$MPI" -b 1M -e 64M -f 64 -w 5 -n 20 -c 1 >"$OUT/mpi-bw.$r.txt" 2>&1
  mpi "$MPI" -b 1M -e 64M -f 64 -w 5 -n 20 -c 1 -t >"$OUT/mpi-thp.$r.txt" 2>&1
  mpi "$MPI" -b 4K -e 4K -w 200 -n 5000 -c 1 >"$OUT/mpi-lat.$r.txt" 2>&1
  mpi --mca btl tcp,self "$MPI" -b 64M -e 64M -w 2 -n 10 -c 1 >"$OUT/mpi-tcp.$r.txt" 2>&1
  step "ceilings ($r/$REPEAT): the same sizes through each mechanism, no library"
  for thp in "" --thp; do # 1 MiB: more iterations, a 20-call run of 60 us calls is too short to time
    timeout 300 "$CEIL" -b 1M -e 1M -w 50 -n 500 $thp >"$OUT/ceiling-1m$thp.$r.txt" 2>&1
    timeout 300 "$CEIL" -b 64M -e 64M -w 5 -n 20 $thp >"$OUT/ceiling-64m$thp.$r.txt" 2>&1
  done
done
step "gloo: the same (torchrun takes several seconds to start)"
gloo -b 4K -e 64M -f 4 -w 3 -n 20 -c 1 >"$OUT/gloo-bw.1.txt" 2>&1   # its 4 KiB row is the latency

step "launch -> communicator ready -> exit, 2 workers (hyperfine)"
hf() { # NAME RUNS CMD...
  local name=$1 runs=$2; shift 2
  hyperfine -N --warmup 1 --runs "$runs" --export-json "$OUT/launch-$name.json" "$*" >"$OUT/launch-$name.txt" 2>&1 || true
  "$PY" -c 'import json,sys
try: print("%.3f" % json.load(open(sys.argv[1]))["results"][0]["mean"])
except Exception: print("-")' "$OUT/launch-$name.json"
}
L_CDDP=$(hf cddp 20 "$CDDP" run --standalone --nproc-per-node 2 "$CDDP" bench allreduce -b 4 -e 4 -w 0 -n 1 -c 0)
L_MPI=$(hf mpi 10 mpirun --allow-run-as-root --oversubscribe -np 2 "$MPI" -b 4 -e 4 -w 0 -n 1 -c 0)
L_GLOO=$(cd "$OUT" && hf gloo 3 "$PY" -m torch.distributed.run --standalone --nproc_per_node 2 --redirects 1 --tee 1 "$GLOO" -b 4 -e 4 -w 0 -n 1 -c 0)

row() { printf '%-44s %9s %9s %9s %9s   %s\n' "$@"; }
echo
echo "# cddp vs Open MPI vs gloo: allreduce, float sum, 2 ranks on $(hostname) ($(getconf _NPROCESSORS_ONLN) cores, load $(cut -d' ' -f1 /proc/loadavg)); best of $REPEAT; logs in $OUT"
row "figure" "cddp" "Open MPI" "gloo" "prototype" "goal (issue 2)"
row "64 MiB busbw, ordinary buffers (GB/s)" "$(col cddp-bw $M64 8)" "$(col mpi-bw $M64 8)" "$(col gloo-bw $M64 8)" "$(ceil $M64 'cma|staged')" ">= 8"
row "  the same on transparent huge pages" "$(col cddp-thp $M64 8)" "$(col mpi-thp $M64 8)" "-" "$(ceil $M64 'cma[+]thp|staged[+]thp')" ""
row "64 MiB busbw, zero-copy buffers (GB/s)" "$(col cddp-zc $M64 8)" "-" "-" "$(ceil $M64 zero-copy)" ">= 11"
row "1 MiB busbw, ordinary buffers (GB/s)" "$(col cddp-bw $M1 8)" "$(col mpi-bw $M1 8)" "$(col gloo-bw $M1 8)" "$(ceil $M1 'cma|staged')" ">= 20"
row "  the same on transparent huge pages" "$(col cddp-thp $M1 8)" "$(col mpi-thp $M1 8)" "-" "$(ceil $M1 'cma[+]thp|staged[+]thp')" ""
row "4 KiB allreduce latency (us)" "$(col cddp-lat $K4 6)" "$(col mpi-lat $K4 6)" "$(col gloo-bw $K4 6)" "-" "<= 1"
row "64 MiB busbw, TCP forced (GB/s)" "$(col cddp-tcp $M64 8)" "$(col mpi-tcp $M64 8)" "-" "-" ">= 1.7"
row "launch -> ready -> exit, 2 workers (s)" "$L_CDDP" "$L_MPI" "$L_GLOO" "-" "<= 0.1"
bad=0
for f in "$OUT"/*-bw.*.txt "$OUT"/{cddp,mpi}-thp.*.txt "$OUT"/*-lat.*.txt "$OUT"/*-zc.*.txt "$OUT"/*-tcp.*.txt; do
  [ -e "$f" ] || continue
  w=$(wrong "$f")
  if [ "$w" != 0 ]; then echo "# $(basename "$f"): $w wrong elements"; bad=1; fi
  if ! grep -q '^.*Avg bus bandwidth' "$f"; then echo "# $(basename "$f"): no result (see the log)"; bad=1; fi
done
[ $bad = 0 ] && echo "# every checked run: 0 wrong elements"
exit $bad
