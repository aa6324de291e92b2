#!/usr/bin/env bash
# test_store_bind.sh - the store listens on the endpoint's own address: a loopback endpoint keeps it
# off every other interface; 0.0.0.0 (or no --host) listens on all, as asked.
source "$(dirname "$0")/lib.sh"
tmp=$(mktemp -d /tmp/cddp-store-bind.XXXXXX)
pids=()
trap 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done; rm -rf "$tmp"' EXIT

# The listening sockets on port $1, as "ADDR:PORT" lines.
listeners() { ss -Hltn "sport = :$1" | awk '{ print $4 }'; }

P=$(free_port)
for r in 0 1; do
  "$CDDP" run --nnodes 2 --nproc-per-node 1 --rdzv-backend c10d --rdzv-endpoint "127.0.0.1:$P" \
    --rdzv-id bind sleep 3 >"$tmp/run$r.log" 2>&1 &
  pids+=($!)
done
wait_for 10 port_listening "$P"
got=$(listeners "$P")
if [ "$got" = "127.0.0.1:$P" ]; then ok "c10d over 127.0.0.1: the store listens on 127.0.0.1:$P only"
else fail "c10d over 127.0.0.1 listens on the loopback only" "listeners: $got"; fi
rc=0
for p in "${pids[@]}"; do wait "$p" || rc=$?; done
pids=()
if [ $rc -eq 0 ]; then ok "the loopback job runs to the end"; else fail "the loopback job" "rc=$rc: $(cat "$tmp"/run*.log)"; fi

for host in 127.0.0.1 0.0.0.0; do
  P=$(free_port)
  "$CDDP" store --port "$P" --host "$host" >"$tmp/store.log" 2>&1 &
  pids=($!)
  wait_for 10 port_listening "$P"
  got=$(listeners "$P")
  if [ "$got" = "$host:$P" ]; then ok "cddp store --host $host listens on $host:$P"
  else fail "cddp store --host $host" "listeners: $got"; fi
  kill "${pids[0]}"; wait "${pids[0]}" 2>/dev/null
  pids=()
done
finish
