#!/usr/bin/env bash
# tuner_bench.sh - the tuner's choice (auto) against each forced mechanism, in one run.
#
# Usage: bench/tuner_bench.sh [--transport shm|tcp] [--rounds N] [--sizes "1M 64M"] [--out DIR]
# Each round launches `cddp bench allreduce` (2 ranks, ordinary buffers, in place, checked) once
# per setting, in a rotated order: auto (the tuner decides, its own calibration in every launch)
# and each forced mechanism (shm: CDDP_SHM_CMA=1, =0; tcp: CDDP_ALGO=direct, ring with 1 MiB and
# 256 KiB chunks). Prints, per size, each setting's median busbw (min-max), the best forced, auto/
# best, the paired ratio and what the tuner chose; the load average; the tuner's first table.
# Exits 1 if a run had a wrong element or no result. Keeps every program's output in DIR.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
ROUNDS=5
SIZES="1M 64M"
OUT=""
TRANSPORT=shm
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds) ROUNDS=${2:-}; shift 2
              [[ "$ROUNDS" =~ ^[1-9][0-9]?$ ]] || { echo "tuner_bench.sh: --rounds needs 1..99" >&2; exit 2; } ;;
    --sizes) SIZES=${2:-}; shift 2 ;;
    --out) OUT=${2:?--out needs a directory}; shift 2 ;;
    --transport) TRANSPORT=${2:-}; shift 2
                 [[ "$TRANSPORT" =~ ^(shm|tcp)$ ]] || { echo "tuner_bench.sh: --transport needs shm or tcp" >&2; exit 2; } ;;
    -h|--help) sed -n '2,10s/^# \{0,1\}//p' "$0"; exit 0 ;;
    *) echo "tuner_bench.sh: unknown argument '$1' (--transport shm|tcp, --rounds N, --sizes LIST, --out DIR)" >&2; exit 2 ;;
  esac
done
OUT=${OUT:-$(mktemp -d /tmp/cddp-tuner.XXXXXX)}
mkdir -p "$OUT"
make -j"$(nproc)" cli >"$OUT/build.log" 2>&1 || { tail -20 "$OUT/build.log"; exit 1; }
CDDP=$PWD/build/cddp
unset CDDP_SHM_CMA CDDP_ALGO CDDP_DIRECT_MAX_BYTES CDDP_SHM_CHUNK_BYTES CDDP_TCP_CHUNK_BYTES CDDP_TUNE \
  CDDP_TUNE_MS CDDP_TRANSPORT

bytes() { numfmt --from=iec "$1"; }
if [ "$TRANSPORT" = shm ]; then # the names are the tuner's own, so its choice is found among them
  NAMES=(auto cma staged)
  ENVS=("" "CDDP_SHM_CMA=1" "CDDP_SHM_CMA=0")
else
  NAMES=(auto rd ring ring4)
  ENVS=("CDDP_TRANSPORT=tcp" "CDDP_TRANSPORT=tcp CDDP_ALGO=direct"
        "CDDP_TRANSPORT=tcp CDDP_ALGO=ring CDDP_TCP_CHUNK_BYTES=1048576"
        "CDDP_TRANSPORT=tcp CDDP_ALGO=ring CDDP_TCP_CHUNK_BYTES=262144")
fi
N=${#NAMES[@]}
LOAD0=$(cut -d' ' -f1-3 /proc/loadavg)
for r in $(seq "$ROUNDS"); do
  for k in $(seq 0 $((N - 1))); do
    i=$(( (k + r) % N ))
    for sz in $SIZES; do
      log="$OUT/${NAMES[$i]}.$sz.$r.txt"
      env ${ENVS[$i]} CDDP_DEBUG=INFO CDDP_DEBUG_SUBSYS=SHM,NET timeout 120 "$CDDP" run --standalone \
        --nproc-per-node 2 "$CDDP" bench allreduce -b "$sz" -e "$sz" -w 3 -n 20 -c 1 >"$log" 2>&1
    done
  done
  echo "tuner_bench.sh: round $r/$ROUNDS done" >&2
done
LOAD1=$(cut -d' ' -f1-3 /proc/loadavg)

# busbw of the row for SIZE bytes in LOG (and its #wrong), "- -" when absent
row() { sed -E 's/^\[[^]]*\]:? ?//' "$1" | awk -v s="$2" '$1 == s && NF >= 9 { print $8, $9; f = 1 } END { if (!f) print "- -" }'; }
# median, min and max of the numbers on stdin
stats() { sort -g | awk '{ v[NR] = $1 } END { if (!NR) { print "- - -"; exit } m = NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2; printf "%.2f %.2f %.2f\n", m, v[1], v[NR] }'; }

# the mechanism the tuner's table (rank 0's INFO lines in LOG) gives an allreduce of BYTES
chosen() { grep "^\[rank 0\].*$TRANSPORT tune:.*->" "$1" | sed -E "s/.*$TRANSPORT tune: +//" | awk -v s="$2" '
  function b(n, u) { return n * (u == "MiB" ? 1048576 : 1024) }
  { hi = ($1 == ">") ? -1 : ($1 == "<=" ? b($2, $3) : b($3, $4))   # "<= 16 KiB", "16 KiB-64 KiB", "> 4 MiB"
    if ($1 != "<=" && $1 != ">") { split($0, p, "-"); split(p[2], q, " "); hi = b(q[1], q[2]) }
    m = $0; sub(/.*-> */, "", m); sub(/ .*/, "", m)
    if (!done && (hi < 0 || s <= hi)) { print m; done = 1 } }
  END { if (!done) print "?" }'; }

bad=0
printf '# 2 ranks, ordinary buffers, in place, f32 sum, %d interleaved rounds; load %s -> %s\n' "$ROUNDS" "$LOAD0" "$LOAD1"
printf '# busbw GB/s: median (min-max); auto/best = median auto over the best forced median;\n'
printf '# paired = median over rounds of auto / the best forced figure of the same round\n'
printf '%-6s' size
for i in $(seq 0 $((N - 1))); do printf '  %-20s' "${NAMES[$i]}"; done
printf '  %-6s  %-9s  %-6s  %s\n' best auto/best paired "tuner chose"
for sz in $SIZES; do
  b=$(bytes "$sz")
  declare -A med=() fig=()
  line=$(printf '%-6s' "$sz")
  for i in $(seq 0 $((N - 1))); do
    vals=""
    for r in $(seq "$ROUNDS"); do
      read -r bw wrong < <(row "$OUT/${NAMES[$i]}.$sz.$r.txt" "$b")
      fig[$i.$r]=$bw
      if [ "$bw" = "-" ] || [ "$wrong" != "0" ]; then bad=1; echo "tuner_bench.sh: ${NAMES[$i]} $sz round $r: busbw $bw, wrong $wrong" >&2; continue; fi
      vals+="$bw"$'\n'
    done
    read -r m lo hi < <(printf '%s' "$vals" | grep . | stats)
    med[$i]=$m
    line+=$(printf '  %-20s' "$m ($lo-$hi)")
  done
  best="-" bv=0
  for i in $(seq 1 $((N - 1))); do
    if awk -v a="${med[$i]}" -v b="$bv" 'BEGIN { exit !(a != "-" && a > b) }'; then best=${NAMES[$i]} bv=${med[$i]}; fi
  done
  ratio=$(awk -v a="${med[0]}" -v b="$bv" 'BEGIN { if (b > 0 && a != "-") printf "%.2f", a / b; else print "-" }')
  paired=$(for r in $(seq "$ROUNDS"); do
             f="${fig[0.$r]}"; for i in $(seq 1 $((N - 1))); do f+=" ${fig[$i.$r]}"; done
             echo "$f" | awk '{ m = 0; for (i = 2; i <= NF; i++) if ($i != "-" && $i > m) m = $i
                                if ($1 != "-" && m > 0) print $1 / m }'
           done | stats | awk '{ printf "%.2f", $1 }')
  picks=$(for r in $(seq "$ROUNDS"); do chosen "$OUT/auto.$sz.$r.txt" "$b"; done | sort | uniq -c |
          awk '{ printf "%s%s x%d", (NR > 1 ? ", " : ""), $2, $1 }')
  printf '%s  %-6s  %-9s  %-6s  %s\n' "$line" "$best" "$ratio" "$paired" "$picks"
done
first=$(ls "$OUT"/auto.*.1.txt 2>/dev/null | head -1)
if [ -n "$first" ]; then
  echo "# the table the tuner chose (rank 0, round 1, $(basename "$first")):"
  grep "^\[rank 0\].*$TRANSPORT tune:" "$first" | sed -E "s/.*$TRANSPORT tune: ?/#   /"
fi
echo "# logs: $OUT"
exit $bad
