#!/usr/bin/env bash
# test_store_bind.sh - the store listens on the endpoint's own address: a loopback endpoint keeps it
# off every other interface; 0.0.0.0 (or no --host) listens on all, as asked. A multi-node job off
# the loopback without a token says once that its store is unauthenticated.
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
# two nodes over ADDR ($1), extra env in the rest; prints how many WARN lines the two agents wrote
two_nodes() {
  local addr=$1; shift
  local P; P=$(free_port)
  for r in 0 1; do
    env "$@" "$CDDP" run --nnodes 2 --nproc-per-node 1 --rdzv-endpoint "$addr:$P" --rdzv-id warn true \
      >"$tmp/w$r.log" 2>&1 &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p"; done
  pids=()
  cat "$tmp/w0.log" "$tmp/w1.log" | grep -c "WARN.*the store is unauthenticated.*CDDP_TOKEN_FILE"
}
ip=$(hostname -I 2>/dev/null | awk '{ print $1 }')
if [ -z "$ip" ]; then fail "the host has a non-loopback address for the WARN cases" "hostname -I: none"
else
  n=$(two_nodes "$ip")
  if [ "$n" = 1 ]; then ok "no token over $ip: one WARN line, from the store's host"; else fail "no token over $ip warns" "$n lines"; fi
  echo s3cret >"$tmp/token"
  n=$(two_nodes "$ip" CDDP_TOKEN_FILE="$tmp/token")
  if [ "$n" = 0 ]; then ok "a token: no WARN"; else fail "a token: no WARN" "$n lines"; fi
fi
n=$(two_nodes 127.0.0.1)
if [ "$n" = 0 ]; then ok "no token over the loopback: no WARN"; else fail "loopback: no WARN" "$n lines"; fi
finish
