#!/usr/bin/env bash
# dtype_table.sh - median allreduce time and busbw per size for float/bf16/f16 over shm and tcp (2 ranks, this host).
# usage: bench/dtype_table.sh [-r REPS] [CDDP_BINARY...]   (default: build/cddp, 5 repeats, interleaved)
set -euo pipefail
reps=5
if [ "${1:-}" = -r ]; then reps=$2; shift 2; fi
bins=("$@"); [ ${#bins[@]} -gt 0 ] || bins=(build/cddp)
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
for ((r = 0; r < reps; r++)); do
  for tr in shm tcp; do for d in float bf16 f16; do for i in "${!bins[@]}"; do
    b=${bins[$i]}
    CDDP_TRANSPORT=$tr timeout 120 "$b" run --standalone --nproc-per-node 2 "$b" bench allreduce -b 1M -e 64M -f 4 -d $d 2>&1 |
      awk -v k="$i $tr $d" '$1 == "[rank" && $3 ~ /^[0-9]+$/ {print k, $3, $8, $10}' >> "$tmp/all" || true
  done; done; done
done
printf '%-4s %-4s %-6s %9s %12s %8s  (median of %d)\n' bin tr type size time_us busbw "$reps"
sort -k1,1n -k2,2 -k3,3 -k4,4n "$tmp/all" | awk '
  function flush() { if (n) { m = int((n + 1) / 2); printf "%-4s %-4s %-6s %9s %12.0f %8.2f\n", a, b, c, s, t[m], w[m] } n = 0 }
  { key = $1 " " $2 " " $3 " " $4; if (key != last) { flush(); last = key; a = $1; b = $2; c = $3; s = $4 }
    n++; t[n] = $5; w[n] = $6; for (i = n; i > 1 && t[i] < t[i-1]; i--) { x = t[i]; t[i] = t[i-1]; t[i-1] = x } 
    for (i = n; i > 1 && w[i] < w[i-1]; i--) { x = w[i]; w[i] = w[i-1]; w[i-1] = x } }
  END { flush() }'
