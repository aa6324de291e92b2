#!/usr/bin/env bash
# test_store_bind.sh - the store listens on the endpoint's own address: a loopback endpoint (or
# localhost) keeps it off every other interface, a host's address or name binds that address (all,
# with the reason, when the name resolves to a loopback address as /etc/hosts makes it), the standby
# stores follow; 0.0.0.0 (or no --host) listens on all, as asked. A multi-node job off
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
# listen_case NAME HOST WANT [FLAGS...]: one node of two (or of the flags' job) with endpoint HOST
# listens on WANT (":P" appended) and nothing else; its log is $tmp/lc.log
ip=$(hostname -I 2>/dev/null | awk '{ print $1 }')
listen_case() {
  local name=$1 host=$2 want=$3; shift 3
  local P; P=$(free_port)
  CDDP_DEBUG=INFO CDDP_DEBUG_SUBSYS=RUN "$CDDP" run --nnodes 2 --nproc-per-node 1 --rdzv-endpoint "$host:$P" \
    --rdzv-id lc "$@" sleep 30 >"$tmp/lc.log" 2>&1 &
  pids=($!)
  wait_for 10 port_listening "$P"
  local got; got=$(listeners "$P")
  if [ "$got" = "$want:$P" ]; then ok "$name: listens on $want:$P only"
  else fail "$name listens on $want:$P" "listeners: $got; $(tail -3 "$tmp/lc.log")"; fi
  kill "${pids[0]}"; wait "${pids[0]}" 2>/dev/null
  pids=()
}
listen_case "endpoint localhost" localhost 127.0.0.1
if [ -n "$ip" ]; then listen_case "endpoint $ip (this host's, off the loopback)" "$ip" "$ip"; fi
# the host's own name: where it resolves to a loopback address (/etc/hosts' 127.0.1.1, or 127.0.0.1
# here), the others could not reach that, so every interface, and the line says why
me=$(hostname)
addr=$(getent ahostsv4 "$me" | awk 'NR == 1 { print $1 }')
case $addr in
  127.*)
    listen_case "endpoint $me (resolves to $addr)" "$me" 0.0.0.0
    if grep -q "every interface: $me resolves to $addr, a loopback address" "$tmp/lc.log"; then ok "and says why"
    else fail "the line that says why" "$(grep -i interface "$tmp/lc.log")"; fi ;;
  "") fail "the host's name resolves" "getent ahostsv4 $me: nothing" ;;
  *) listen_case "endpoint $me (resolves to $addr)" "$me" "$addr" ;;
esac
# the standby of a replace-mode job listens where it is listed, off the wildcard too
if [ -n "$ip" ]; then
  P=$(free_port)
  for r in 0 1; do
    "$CDDP" run --nnodes 1:2 --restart-mode replace --nproc-per-node 1 --rdzv-endpoint "$ip:$P" --rdzv-id sb \
      sleep 30 >"$tmp/sb$r.log" 2>&1 &
    pids+=($!)
  done
  wait_for 10 port_listening "$P"
  # both agents' listeners (the store and the other's standby): two, both on $ip
  two() { [ "$(ss -Hltnp | grep -cE "pid=(${pids[0]}|${pids[1]}),")" -ge 2 ]; }
  wait_for 10 two
  got=$(ss -Hltnp | grep -E "pid=(${pids[0]}|${pids[1]})," | awk '{ print $4 }' | sed 's/:[0-9]*$//' | sort | uniq -c | awk '{ print $1 "x" $2 }')
  if [ "$got" = "2x$ip" ]; then ok "the store and the standby both listen on $ip"
  else fail "the store and the standby listen on $ip" "listeners: $got"; fi
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
  pids=()
fi

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
n=$(two_nodes localhost)
if [ "$n" = 0 ]; then ok "no token over localhost: no WARN"; else fail "localhost: no WARN" "$n lines"; fi
finish
