#!/usr/bin/env bash
# multihost.sh - allreduce across 3 namespace hosts: the issue-5 speed figures, each with its goal.
#
# Usage: bench/multihost.sh [--out DIR] [--fit] [--repeat N]   (run as root; about 2 minutes)
#   1. links shaped to 1 Gbit/s: 64 MiB allreduce, flat ring, 1 rank per host: busbw >= 90% of the link
#   2. the same links, 2 ranks per host: hierarchical vs flat ring (hier must be faster)
#   3. unshaped links: flat ring, 1 rank per host (2 and 3 hosts) vs iperf3 between two hosts: >= 80%
#      (with the system's congestion control, and with reno on both sides)
#   --fit also sweeps 4 B .. 64 MiB for every algorithm on the shaped links (the measurements
#   bench/cost_model.py fits alpha and beta to; see docs/cost-model.md).
#   --repeat N keeps each figure's best of N runs (a busy 2-core machine is noisy).
# Every log stays in DIR (default: a fresh /tmp directory). Hosts: tests/cluster/netns.sh, with
# their own prefix and subnet so they never meet a test's.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
OUT="" FIT=0 REPEAT=1
while [ $# -gt 0 ]; do
  case "$1" in
    --out) OUT=${2:?--out needs a directory}; shift 2 ;;
    --fit) FIT=1; shift ;;
    --repeat) REPEAT=${2:-}; shift 2
              [[ "$REPEAT" =~ ^[1-9][0-9]?$ ]] || { echo "multihost.sh: --repeat needs 1..99" >&2; exit 2; } ;;
    -h|--help) sed -n '2,12s/^# \{0,1\}//p' "$0"; exit 0 ;;
    *) echo "multihost.sh: unknown argument '$1' (--out DIR, --fit, --repeat N)" >&2; exit 2 ;;
  esac
done
[ "$(id -u)" = 0 ] || { echo "multihost.sh: needs root (network namespaces, tc)" >&2; exit 1; }
OUT=${OUT:-$(mktemp -d /tmp/cddp-multihost.XXXXXX)}
mkdir -p "$OUT"
CDDP=$PWD/build/cddp
[ -x "$CDDP" ] || make -j"$(nproc)" cli >"$OUT/build.log" 2>&1 || { echo "multihost.sh: build failed ($OUT/build.log)" >&2; exit 1; }
export CDDP_NETNS_PREFIX=cddpmh CDDP_NETNS_SUBNET=10.85.0 CDDP_NETNS_STATE=$OUT/netns
NS=tests/cluster/netns.sh
unset CDDP_TRANSPORT CDDP_ALGO
trap '"$NS" down >/dev/null 2>&1' EXIT
"$NS" up 3 >"$OUT/up.log" 2>&1 || { cat "$OUT/up.log"; exit 1; }
MASTER=$("$NS" addr 1)
step() { echo "multihost.sh: $*" >&2; }
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("0.0.0.0",0)); print(s.getsockname()[1])'; }

# run LOG HOSTS NPROC [VAR=VALUE...] -- BENCH-ARGS...: one agent per host, output of all in LOG
run() {
  local log=$1 hosts=$2 nproc=$3; shift 3
  local envs=() p pids=() i id=mh$RANDOM
  while [ "$1" != -- ]; do envs+=("$1"); shift; done
  shift
  p=$(port)
  for i in $(seq "$hosts"); do
    "$NS" exec "$i" env "${envs[@]}" timeout 300 "$CDDP" run --nnodes "$hosts" --nproc-per-node "$nproc" \
      --rdzv-backend c10d --rdzv-endpoint "$MASTER:$p" --rdzv-id "$id" \
      "$CDDP" bench allreduce -c 1 "$@" >"$log.$i" 2>&1 & pids+=($!)
  done
  for i in "${pids[@]}"; do wait "$i"; done
  cat "$log".[0-9] >"$log" && rm -f "$log".[0-9]
}
# busbw LOG SIZE RANKS: 2 (p-1)/p * size / time of SIZE's row in GB/s, to 4 digits (the bench
# prints 2 decimals); "-" when absent
busbw() {
  sed -E 's/^\[[^]]*\] ?//' "$1" | awk -v s="$2" -v p="$3" '
    $1 == s && NF >= 9 && $6 ~ /^[0-9.]+$/ && $6 > 0 { v = sprintf("%.4f", 2 * (p - 1) / p * s / ($6 * 1000)) }
    END { print (v == "" ? "-" : v) }'
}
best() { printf '%s\n' "$@" | grep -v '^-$' | sort -g | tail -1; }
pct() { awk -v a="$1" -v b="$2" 'BEGIN { if (a == "" || b == "" || b == 0) print "-"; else printf "%.0f", 100 * a / b }'; }
M64=$((64 << 20))
shape() { for i in 1 2 3; do if [ "$1" = none ]; then "$NS" unshape "$i"; else "$NS" rate "$i" "$1"; fi; done; }

# ---- 1 and 2: links shaped to 1 Gbit/s
shape 1gbit
flat1=() flat2=() hier2=()
for r in $(seq "$REPEAT"); do
  step "shaped 1 Gbit/s ($r/$REPEAT): flat ring 1 rank/host, then 2 ranks/host flat and hier (64 MiB)"
  run "$OUT/shaped-flat-1x3.$r" 3 1 CDDP_TRANSPORT=tcp -- -b 64M -e 64M -w 1 -n 5
  run "$OUT/shaped-flat-2x3.$r" 3 2 CDDP_TRANSPORT=tcp -- -b 64M -e 64M -w 1 -n 5
  run "$OUT/shaped-hier-2x3.$r" 3 2 CDDP_TRANSPORT=hier -- -b 64M -e 64M -w 1 -n 5
  flat1+=("$(busbw "$OUT/shaped-flat-1x3.$r" $M64 3)")
  flat2+=("$(busbw "$OUT/shaped-flat-2x3.$r" $M64 6)")
  hier2+=("$(busbw "$OUT/shaped-hier-2x3.$r" $M64 6)")
done
F1=$(best "${flat1[@]}") F2=$(best "${flat2[@]}") H2=$(best "${hier2[@]}")
LINK=0.125 # 1 Gbit/s in GB/s

if [ "$FIT" = 1 ]; then
  for a in ring direct; do
    step "fit sweep: flat $a, 1 rank/host, 4 B .. 64 MiB"
    run "$OUT/fit-flat-$a-1x3" 3 1 CDDP_TRANSPORT=tcp CDDP_ALGO=$a -- -b 4 -e 64M -f 4 -w 1 -n 3
    step "fit sweep: flat $a, 2 ranks/host"
    run "$OUT/fit-flat-$a-2x3" 3 2 CDDP_TRANSPORT=tcp CDDP_ALGO=$a -- -b 4 -e 64M -f 4 -w 1 -n 3
  done
  step "fit sweep: hier, 2 ranks/host"
  run "$OUT/fit-hier-2x3" 3 2 CDDP_TRANSPORT=hier -- -b 4 -e 64M -f 4 -w 1 -n 3
  step "fit sweep: shm within one host, 2 ranks (the hierarchical model's intra-host term)"
  "$NS" exec 1 timeout 300 "$CDDP" run --standalone --nproc-per-node 2 "$CDDP" bench allreduce -c 1 \
    -b 4 -e 64M -f 4 -w 1 -n 3 >"$OUT/fit-shm-2x1" 2>&1
fi

# ---- 3: unshaped
shape none
# iperf3 CC [--bidir]: one stream host 1 -> host 2 (--bidir: and one back at the same time) for
# 3 s with congestion control CC; GB/s per direction (the mean of the receivers), or "-"
iperf() {
  local log=$OUT/iperf3-$1${2:-}.log v
  "$NS" exec 2 timeout 20 iperf3 -s -1 >"$log.server" 2>&1 &
  sleep 0.5
  "$NS" exec 1 timeout 20 iperf3 -c "$("$NS" addr 2)" -t 3 -f g -C "$1" ${2:+"$2"} >"$log" 2>&1
  wait
  v=$(awk '/receiver/ { for (i = 1; i < NF; i++) if ($(i + 1) == "Gbits/sec") { s += $i / 8; n++ } }
           END { if (n) printf "%.4f", s / n }' "$log")
  echo "${v:--}"
}
CC=$(sysctl -n net.ipv4.tcp_congestion_control 2>/dev/null || echo cubic)
if command -v iperf3 >/dev/null; then
  step "unshaped: iperf3 host 1 -> host 2 (3 s each, $CC then reno)"
  IPERF=$(iperf "$CC") IPERF_RENO=$(iperf reno) IPERF_BI=$(iperf "$CC" --bidir) IPERF_BI_RENO=$(iperf reno --bidir)
else
  step "iperf3 is not installed (scripts/install-deps.sh bench): no reference figure"
  IPERF=- IPERF_RENO=- IPERF_BI=- IPERF_BI_RENO=-
fi
u2=() u3=() u2r=()
for r in $(seq "$REPEAT"); do
  step "unshaped ($r/$REPEAT): flat ring 1 rank/host on 2 hosts, 3 hosts, then 2 hosts with reno (64 MiB)"
  run "$OUT/unshaped-flat-1x2.$r" 2 1 CDDP_TRANSPORT=tcp -- -b 64M -e 64M -w 2 -n 10
  run "$OUT/unshaped-flat-1x3.$r" 3 1 CDDP_TRANSPORT=tcp -- -b 64M -e 64M -w 2 -n 10
  run "$OUT/unshaped-flat-1x2-reno.$r" 2 1 CDDP_TRANSPORT=tcp CDDP_TCP_CONGESTION=reno -- -b 64M -e 64M -w 2 -n 10
  u2+=("$(busbw "$OUT/unshaped-flat-1x2.$r" $M64 2)")
  u3+=("$(busbw "$OUT/unshaped-flat-1x3.$r" $M64 3)")
  u2r+=("$(busbw "$OUT/unshaped-flat-1x2-reno.$r" $M64 2)")
done
U2=$(best "${u2[@]}") U3=$(best "${u3[@]}") U2R=$(best "${u2r[@]}")

wrong=$(cat "$OUT"/shaped-* "$OUT"/unshaped-* "$OUT"/fit-* 2>/dev/null | sed -E 's/^\[[^]]*\] ?//' |
  awk '$1 ~ /^[0-9]+$/ && NF >= 9 && $9 ~ /^[0-9]+$/ { w += $9 } END { print w + 0 }')
verdict() { awk -v a="$1" -v b="$2" 'BEGIN { if (a == "-" || b == "-") print "n/a"; else print (a >= b ? "met" : "MISSED") }'; }
echo
echo "# multihost.sh: 3 namespace hosts (veth + bridge), 64 MiB float sum allreduce, busbw in GB/s (best of $REPEAT)"
printf '%-58s %10s %-26s %s\n' figure value goal verdict
printf '%-58s %10s %-26s %s\n' "1 Gbit/s links, flat ring, 1 rank/host: busbw" "$F1" ">= 0.1125 (90% of 0.125)" \
  "$(verdict "$F1" 0.1125) ($(pct "$F1" $LINK)% of the link)"
printf '%-58s %10s %-26s %s\n' "1 Gbit/s links, 2 ranks/host, flat ring: busbw" "$F2" "(hier must beat it)" ""
printf '%-58s %10s %-26s %s\n' "1 Gbit/s links, 2 ranks/host, hierarchical: busbw" "$H2" "> flat ($F2)" \
  "$(verdict "$H2" "$F2") (x$(awk -v a="$H2" -v b="$F2" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "-" }'))"
printf '%-58s %10s %-26s %s\n' "unshaped: iperf3 host 1 -> host 2, $CC (GB/s)" "$IPERF" "" ""
GOAL=$(awk -v i="$IPERF" 'BEGIN { if (i == "-") print "-"; else printf "%.3f", 0.8 * i }')
printf '%-58s %10s %-26s %s\n' "unshaped: flat ring, 1 rank/host, 2 hosts: busbw" "$U2" ">= $GOAL (80% of iperf3)" \
  "$(verdict "$U2" "$GOAL") ($(pct "$U2" "$IPERF")% of iperf3)"
printf '%-58s %10s %-26s %s\n' "unshaped: flat ring, 1 rank/host, 3 hosts: busbw" "$U3" ">= $GOAL (80% of iperf3)" \
  "$(verdict "$U3" "$GOAL") ($(pct "$U3" "$IPERF")% of iperf3)"
GOALR=$(awk -v i="$IPERF_RENO" 'BEGIN { if (i == "-") print "-"; else printf "%.3f", 0.8 * i }')
printf '%-58s %10s %-26s %s\n' "unshaped: iperf3 host 1 -> host 2, reno (GB/s)" "$IPERF_RENO" "" ""
printf '%-58s %10s %-26s %s\n' "unshaped: flat ring, 2 hosts, reno both sides: busbw" "$U2R" ">= $GOALR (80% of iperf3)" \
  "$(verdict "$U2R" "$GOALR") ($(pct "$U2R" "$IPERF_RENO")% of iperf3)"
# an allreduce loads both directions of every link at once: iperf3 --bidir is the like-for-like
# reference (on one machine the "hosts" share its cores, so a two-way stream costs twice the CPU)
for cc in "$CC" reno; do
  if [ "$cc" = reno ]; then bi=$IPERF_BI_RENO v=$U2R; else bi=$IPERF_BI v=$U2; fi
  g=$(awk -v i="$bi" 'BEGIN { if (i == "-") print "-"; else printf "%.3f", 0.8 * i }')
  printf '%-58s %10s %-26s %s\n' "unshaped: iperf3 --bidir, $cc, per direction (GB/s)" "$bi" "" ""
  printf '%-58s %10s %-26s %s\n' "unshaped: flat ring, 2 hosts, $cc: busbw vs --bidir" "$v" ">= $g (80% of it)" \
    "$(verdict "$v" "$g") ($(pct "$v" "$bi")% of iperf3 --bidir)"
done
echo "# wrong elements in every run: $wrong; logs in $OUT"
