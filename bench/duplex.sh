#!/usr/bin/env bash
# duplex.sh - what an unshaped namespace link gives one way, both ways, and to a cddp allreduce,
# measured round after round so each round's three figures share the machine's state.
#
# Usage: bench/duplex.sh [--rounds N] [--pin] [--out DIR]   (root; ~15 s a round)
#   Per round on 2 namespace hosts (tests/cluster/netns.sh): iperf3 host 1 -> host 2 for 3 s;
#   iperf3 --bidir (per direction, the mean of the two receivers); then a 64 MiB float sum
#   allreduce, 1 rank per host over TCP (busbw = bytes per direction per second for 2 ranks).
#   --pin runs each host's processes on its own CPU (taskset -c 0 / -c 1).
#   Prints one line per round and the ratios: cddp / one-way and cddp / --bidir. On one VM the
#   "link" is CPU time shared by both hosts, so --bidir per direction is below one-way, and an
#   allreduce, which loads both directions at once, is bounded by --bidir (docs/hier.md, Speed).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
ROUNDS=3 PIN=0 OUT=""
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds) ROUNDS=${2:-}; shift 2
              [[ "$ROUNDS" =~ ^[1-9][0-9]?$ ]] || { echo "duplex.sh: --rounds needs 1..99" >&2; exit 2; } ;;
    --pin) PIN=1; shift ;;
    --out) OUT=${2:?--out needs a directory}; shift 2 ;;
    -h|--help) sed -n '2,12s/^# \{0,1\}//p' "$0"; exit 0 ;;
    *) echo "duplex.sh: unknown argument '$1' (--rounds N, --pin, --out DIR)" >&2; exit 2 ;;
  esac
done
[ "$(id -u)" = 0 ] || { echo "duplex.sh: needs root (network namespaces)" >&2; exit 1; }
command -v iperf3 >/dev/null || { echo "duplex.sh: iperf3 is not installed (scripts/install-deps.sh bench)" >&2; exit 1; }
OUT=${OUT:-$(mktemp -d /tmp/cddp-duplex.XXXXXX)}
mkdir -p "$OUT"
CDDP=$PWD/build/cddp
[ -x "$CDDP" ] || make -j"$(nproc)" cli >"$OUT/build.log" 2>&1 || { echo "duplex.sh: build failed ($OUT/build.log)" >&2; exit 1; }
export CDDP_NETNS_PREFIX=cddpdx CDDP_NETNS_SUBNET=10.87.0 CDDP_NETNS_STATE=$OUT/netns
NS=tests/cluster/netns.sh
trap '"$NS" down >/dev/null 2>&1' EXIT
"$NS" up 2 >"$OUT/up.log" 2>&1 || { cat "$OUT/up.log"; exit 1; }
A1=$("$NS" addr 1) A2=$("$NS" addr 2)
on() { local h=$1; shift; if [ "$PIN" = 1 ]; then "$NS" exec "$h" taskset -c $((h - 1)) "$@"; else "$NS" exec "$h" "$@"; fi; }

# iperf3 [--bidir]: GB/s per direction (mean of the receivers), or "-"
iperf() {
  local log=$OUT/iperf3${1:-}.$r.log v
  on 2 timeout 20 iperf3 -s -1 >"$log.server" 2>&1 &
  sleep 0.5
  on 1 timeout 20 iperf3 -c "$A2" -t 3 -f g ${1:+"$1"} >"$log" 2>&1
  wait
  v=$(awk '/receiver/ { for (i = 1; i < NF; i++) if ($(i + 1) == "Gbits/sec") { s += $i / 8; n++ } }
           END { if (n) printf "%.3f", s / n }' "$log")
  echo "${v:--}"
}
# allreduce: busbw of the 64 MiB row (whichever host got rank 0 prints it), or "-"
allreduce() {
  local p=$((30000 + RANDOM % 20000)) id=dx$RANDOM h
  for h in 1 2; do
    on "$h" env CDDP_TRANSPORT=tcp timeout 120 "$CDDP" run --nnodes 2 --nproc-per-node 1 --rdzv-backend c10d \
      --rdzv-endpoint "$A1:$p" --rdzv-id "$id" "$CDDP" bench allreduce -b 64M -e 64M -w 2 -n 10 -c 1 \
      >"$OUT/cddp.$r.$h" 2>&1 &
  done
  wait
  cat "$OUT/cddp.$r".[12] | sed -E 's/^\[[^]]*\] ?//' |
    awk '$1 == 67108864 && NF >= 9 && $9 == 0 { v = $8 } END { print (v == "" ? "-" : v) }'
}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a == "-" || b == "-" || b == 0) print "-"; else printf "%.2f", a / b }'; }
printf '# duplex.sh: 2 namespace hosts, unshaped veth%s; GB/s per direction\n' "$([ "$PIN" = 1 ] && echo ", one CPU per host")"
printf '%-6s %9s %9s %9s %12s %12s %12s\n' round one-way bidir cddp bidir/1way cddp/1way cddp/bidir
for r in $(seq "$ROUNDS"); do
  one=$(iperf) bi=$(iperf --bidir) c=$(allreduce)
  printf '%-6s %9s %9s %9s %12s %12s %12s\n' "$r" "$one" "$bi" "$c" "$(ratio "$bi" "$one")" "$(ratio "$c" "$one")" "$(ratio "$c" "$bi")"
done
echo "# cddp: 64 MiB float sum allreduce, 1 rank per host, TCP, busbw (a wrong element makes it '-'); logs in $OUT"
