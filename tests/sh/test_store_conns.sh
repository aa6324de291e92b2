#!/usr/bin/env bash
# test_store_conns.sh - how many connections one agent holds open to the job's store: every one
# is a descriptor on the store host, which must hold 10,000 agents within a 65,536 limit. While
# the first node waits in the rendezvous, and at steady state for a node that does not host the
# store, in a restart-all job and in an elastic one: 3 at most (was 5 in the rendezvous; docs/bench.md).
cd "$(dirname "$0")/../.." && source tests/sh/lib.sh
t_name=store_conns
T=$(mktemp -d /tmp/cddp-conns.XXXXXX)
trap 'kill -KILL $(jobs -p) 2>/dev/null; rm -rf "$T"' EXIT
export CDDP_TOKEN=conns-test-token
MAX=3 # the agent's (the store move borrows it), the watcher's (the first join's watch borrows it), status
# conns PID: its established TCP connections whose far end is the store's port $P
conns() { ss -tnpH state established 2>/dev/null | awk -v p=":$P" -v me="pid=$1," 'index($0, me) && $4 ~ p"$"' | wc -l; }
# agent_of PID: the cddp agent under its timeout
agent_of() { pid=$(pgrep -P "$1" -x cddp | head -1); [ -n "$pid" ]; }
# settled PID: the count is the same on two looks 0.3 s apart (connections still opening are not counted)
settled() { local a b; a=$(conns "$1"); sleep 0.3; b=$(conns "$1"); [ "$a" = "$b" ] && [ "$a" -gt 0 ] && n=$a; }
# agent NAME NNODES TAG: one agent in the background ($pid; $tpid its timeout), a worker that sleeps 4 s
agent() {
  timeout 60 "$CDDP" run --nnodes "$2" --nproc-per-node 1 --rdzv-backend c10d --rdzv-endpoint 127.0.0.1:$P \
    --rdzv-id "$1$P" -- sleep 4 >"$T/$1.$3.out" 2>&1 &
  tpid=$! pid=""; wait_for 10 agent_of $tpid || fail "$1: agent $3 started"
}
for mode in "restart-all 2" "elastic 2:3"; do
  set -- $mode
  P=$(free_port)
  agent "$1" "$2" a; a=$pid ta=$tpid
  wait_for 20 port_listening $P || fail "$1: the store is up" "$(tail -n 3 "$T/$1.a.out")"
  n=""; wait_for 10 settled $a
  [ -n "$n" ] && [ "$n" -le $MAX ] && ok "$1: the first node in the rendezvous holds $n <= $MAX" ||
    fail "$1: the first node in the rendezvous holds ${n:-none} (at most $MAX)"
  agent "$1" "$2" b; b=$pid tb=$tpid
  # the second node's workers run: it is past the rendezvous
  wait_for 20 pgrep -P $b -x sleep >/dev/null || true
  n=""; sleep 0.5; wait_for 10 settled $b
  [ -n "$n" ] && [ "$n" -le $MAX ] && ok "$1: a node at steady state holds $n <= $MAX" ||
    fail "$1: a node at steady state holds ${n:-none} (at most $MAX)"
  wait $ta; ra=$?; wait $tb; rb=$?
  [ $ra = 0 ] && [ $rb = 0 ] && ok "$1: the job ended well" || fail "$1: the job ended well" "rc $ra $rb"
done
finish
