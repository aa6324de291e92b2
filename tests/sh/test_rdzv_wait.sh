#!/usr/bin/env bash
# test_rdzv_wait.sh - no silent wait at the rendezvous (docs/launcher.md, "Waiting"): a node
# that waits says every CDDP_RDZV_SAY_MS (10 s) what for, as a warning from the third line on;
# two nodes pointed at different ports each say their own; a static node whose node 0 is not up
# says so; a port held by a program that is not a store fails in seconds, naming the port.
cd "$(dirname "$0")/../.." && source tests/sh/lib.sh
T=$(mktemp -d /tmp/cddp-rdzvwait.XXXXXX)
bg=()
trap 'for p in "${bg[@]}"; do kill -KILL $p $(pgrep -P $p) 2>/dev/null; done; rm -rf "$T"' EXIT

# the default interval, once: 11 s of waiting give exactly one line, at 10 s (run meanwhile)
PD=$(free_port)
timeout 60 "$CDDP" run --nnodes 2 --nproc-per-node 1 --rdzv-endpoint 127.0.0.1:$PD --rdzv-timeout 11 true \
  >"$T/default.out" 2>&1 &
bg+=($!)
pd=$!

# two nodes at different ports: each waits for 1 more node at its own port
P=$(free_port)
Q=$(free_port)
while [ "$Q" = "$P" ]; do Q=$(free_port); done
for port in $P $Q; do
  CDDP_RDZV_SAY_MS=1000 timeout 60 "$CDDP" run --nnodes 2 --nproc-per-node 1 --rdzv-endpoint 127.0.0.1:$port \
    --rdzv-timeout 4.5 true >"$T/$port.out" 2>&1 &
  bg+=($!)
done
wait "${bg[@]:1}"
for port in $P $Q; do
  out=$(cat "$T/$port.out")
  n=$(grep -c "^cddp run: waiting for 1 more node at 127.0.0.1:$port (1 of 2 joined, [0-9] s of 4)$" <<<"$out")
  [ "$n" -ge 2 ] && grep -q "^cddp run: warning: still waiting for 1 more node at 127.0.0.1:$port (1 of 2 joined, [34] s of 4)$" <<<"$out" &&
    grep -q "rendezvous round 0: 1 of at least 2 nodes joined within 4.5 s" <<<"$out" &&
    ok "a node at port $port says every second what it waits for, then warns" || fail "waiting at $port" "$out"
done

# static: node 1 before node 0's store is up says so while it retries
S=$(free_port)
out=$(CDDP_RDZV_SAY_MS=1000 timeout 60 "$CDDP" run --nnodes 2 --nproc-per-node 1 --rdzv-backend static --node-rank 1 \
  --master-port $S --rdzv-timeout 2.5 true 2>&1); rc=$?
[ $rc = 1 ] && grep -q "^cddp run: waiting for the rendezvous store at 127.0.0.1:$S (1 s of 2): .*Connection refused" <<<"$out" &&
  grep -q "cannot reach the rendezvous store at 127.0.0.1:$S (within --rdzv-timeout 2.5 s)" <<<"$out" &&
  ok "static node 1 without node 0: waiting for the store, said every second" || fail "static wait" "rc=$rc: $out"

# a port held by a program that accepts and never answers: fails in seconds naming the port,
# not after --rdzv-timeout
H=$(free_port)
python3 -c '
import socket, sys, time
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(sys.argv[1]))); s.listen(8); held = []
print("listening", flush=True)
while True: held.append(s.accept())' $H >"$T/holder.out" 2>&1 &
bg+=($!)
await "the holder listens" 10 grep -q listening "$T/holder.out"
t0=$(date +%s)
out=$(timeout 120 "$CDDP" run --nnodes 1 --nproc-per-node 2 --rdzv-endpoint 127.0.0.1:$H --rdzv-timeout 100 true 2>&1); rc=$?
secs=$(($(date +%s) - t0))
[ $rc = 1 ] && [ "$(wc -l <<<"$out")" = 1 ] && [ $secs -lt "$(scaled 30 | cut -d. -f1)" ] &&
  grep -q "port $H accepts connections but did not answer the handshake within 5 s: another program holds it" <<<"$out" &&
  ok "a port held by another program: one line naming port $H, ${secs} s of --rdzv-timeout 100" ||
  fail "port held by a stranger" "rc=$rc after ${secs} s: $out"

wait $pd
out=$(cat "$T/default.out")
[ "$(grep -c 'waiting for' <<<"$out")" = 1 ] &&
  grep -q "^cddp run: waiting for 1 more node at 127.0.0.1:$PD (1 of 2 joined, 10 s of 11)$" <<<"$out" &&
  ok "by default one line every 10 s" || fail "default interval" "$out"
finish
