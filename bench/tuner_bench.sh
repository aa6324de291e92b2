#!/usr/bin/env bash
# tuner_bench.sh - the shm tuner's choice (auto) against each forced mechanism, in one run.
#
# Usage: bench/tuner_bench.sh [--rounds N] [--sizes "1M 64M"] [--out DIR]
# Each round launches `cddp bench allreduce` (2 ranks, ordinary buffers, in place, checked) once
# per setting, in a rotated order: auto (the tuner decides, its own calibration in every launch),
# CDDP_SHM_CMA=1 (cross-memory attach forced) and CDDP_SHM_CMA=0 (staged copy forced). Prints, per
# size, each setting's median busbw over the rounds (min-max beside it), the best forced median and
# auto/best; the load average before and after; the table the tuner chose in its first launch.
# Exits 1 if a run had a wrong element or no result. Keeps every program's output in DIR.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
ROUNDS=5
SIZES="1M 64M"
OUT=""
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds) ROUNDS=${2:-}; shift 2
              [[ "$ROUNDS" =~ ^[1-9][0-9]?$ ]] || { echo "tuner_bench.sh: --rounds needs 1..99" >&2; exit 2; } ;;
    --sizes) SIZES=${2:-}; shift 2 ;;
    --out) OUT=${2:?--out needs a directory}; shift 2 ;;
    -h|--help) sed -n '2,10s/^# \{0,1\}//p' "$0"; exit 0 ;;
    *) echo "tuner_bench.sh: unknown argument '$1' (--rounds N, --sizes LIST, --out DIR)" >&2; exit 2 ;;
  esac
done
OUT=${OUT:-$(mktemp -d /tmp/cddp-tuner.XXXXXX)}
mkdir -p "$OUT"
make -j"$(nproc)" cli >"$OUT/build.log" 2>&1 || { tail -20 "$OUT/build.log"; exit 1; }
CDDP=$PWD/build/cddp
unset CDDP_SHM_CMA CDDP_ALGO CDDP_DIRECT_MAX_BYTES CDDP_SHM_CHUNK_BYTES CDDP_TUNE CDDP_TUNE_MS CDDP_TRANSPORT

bytes() { numfmt --from=iec "$1"; }
NAMES=(auto cma staged)
ENVS=("" "CDDP_SHM_CMA=1" "CDDP_SHM_CMA=0")
LOAD0=$(cut -d' ' -f1-3 /proc/loadavg)
for r in $(seq "$ROUNDS"); do
  for k in 0 1 2; do
    i=$(( (k + r) % 3 ))
    for sz in $SIZES; do
      log="$OUT/${NAMES[$i]}.$sz.$r.txt"
      env ${ENVS[$i]} CDDP_DEBUG=INFO CDDP_DEBUG_SUBSYS=SHM timeout 120 "$CDDP" run --standalone \
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
chosen() { grep '^\[rank 0\].*shm tune:.*->' "$1" | sed -E 's/.*shm tune: +//' | awk -v s="$2" '
  function b(n, u) { return n * (u == "MiB" ? 1048576 : 1024) }
  { hi = ($1 == ">") ? -1 : ($1 == "<=" ? b($2, $3) : b($3, $4))   # "<= 16 KiB", "16 KiB-64 KiB", "> 4 MiB"
    if ($1 != "<=" && $1 != ">") { split($0, p, "-"); split(p[2], q, " "); hi = b(q[1], q[2]) }
    m = $0; sub(/.*-> */, "", m); sub(/ .*/, "", m)
    if (!done && (hi < 0 || s <= hi)) { print m; done = 1 } }
  END { if (!done) print "?" }'; }

bad=0
printf '# 2 ranks, ordinary buffers, in place, f32 sum, %d interleaved rounds; load %s -> %s\n' "$ROUNDS" "$LOAD0" "$LOAD1"
printf '# busbw GB/s: median (min-max); auto/best = median auto over the better forced median;\n'
printf '# paired = median over rounds of auto / the better forced figure of the same round\n'
printf '%-6s  %-20s  %-20s  %-20s  %-6s  %-9s  %-6s  %s\n' size auto cma staged best auto/best paired "tuner chose"
for sz in $SIZES; do
  b=$(bytes "$sz")
  declare -A med=() fig=()
  line=$(printf '%-6s' "$sz")
  for i in 0 1 2; do
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
  best=$(awk -v a="${med[1]}" -v b="${med[2]}" 'BEGIN { print (b > a ? "staged" : "cma") }')
  bv=$(awk -v a="${med[1]}" -v b="${med[2]}" 'BEGIN { print (b > a ? b : a) }')
  ratio=$(awk -v a="${med[0]}" -v b="$bv" 'BEGIN { if (b > 0 && a != "-") printf "%.2f", a / b; else print "-" }')
  paired=$(for r in $(seq "$ROUNDS"); do
             awk -v a="${fig[0.$r]}" -v c="${fig[1.$r]}" -v s="${fig[2.$r]}" \
               'BEGIN { m = (c > s ? c : s); if (a != "-" && m > 0) print a / m }'
           done | stats | awk '{ printf "%.2f", $1 }')
  picks=$(for r in $(seq "$ROUNDS"); do chosen "$OUT/auto.$sz.$r.txt" "$b"; done | sort | uniq -c |
          awk '{ printf "%s%s x%d", (NR > 1 ? ", " : ""), $2, $1 }')
  printf '%s  %-6s  %-9s  %-6s  %s\n' "$line" "$best" "$ratio" "$paired" "$picks"
done
first=$(ls "$OUT"/auto.*.1.txt 2>/dev/null | head -1)
if [ -n "$first" ]; then
  echo "# the table the tuner chose (rank 0, round 1, $(basename "$first")):"
  grep '^\[rank 0\].*shm tune:' "$first" | sed -E 's/.*shm tune: ?/#   /'
fi
echo "# logs: $OUT"
exit $bad
