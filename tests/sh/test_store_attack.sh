#!/usr/bin/env bash
# test_store_attack.sh - a stranger attacks a real store (tests/sh/store_attack.py, a client written
# from docs/store.md): with a token it can neither read the rendezvous, join it, post a fail event,
# nor pin the store (HELLO-only and slow-loris connections dropped after the hello timeout, a huge
# length prefix refused at once); without a token over the loopback, only the loopback reaches it.
# Each attack also runs with the token (or on the loopback), so the client is shown able to do what
# the store refuses it.
source "$(dirname "$0")/lib.sh"
tmp=$(mktemp -d /tmp/cddp-store-attack.XXXXXX)
pids=()
trap 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done; rm -rf "$tmp"' EXIT
export CDDP_STORE_HELLO_TIMEOUT_MS=1000
attack() { timeout 20 python3 tests/sh/store_attack.py "$@" 2>&1; }
# expect NAME WANT GOT: WANT is an extended regular expression the whole outcome must match
expect() { if [[ $3 =~ ^($2)$ ]]; then ok "$1"; else fail "$1" "got: $3"; fi; }
rss_kb() { awk '/^VmRSS/ { print $2 }' "/proc/$1/status"; }

# ---- a 2-node c10d job with a token: node 0 waits for node 1, the stranger comes first ----
tok=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
printf '%s\n' "$tok" >"$tmp/token"
chmod 600 "$tmp/token"
P=$(free_port)
node() { # node R: one agent of the job, its worker says the world it was given (run in a subshell)
  CDDP_TOKEN_FILE="$tmp/token" exec "$CDDP" run --nnodes 2 --nproc-per-node 1 --rdzv-backend c10d \
    --rdzv-endpoint "127.0.0.1:$P" --rdzv-id atk sh -c 'echo "world=$WORLD_SIZE rank=$RANK"' >"$tmp/node$1.log" 2>&1
}
(node 0) &
pids=($!)
wait_for 10 port_listening "$P" || fail "node 0 hosts the store" "$(cat "$tmp/node0.log")"
# node 0 is in the round once its waiter record is up
await "node 0 posts its waiter record" 10 sh -c "[ \"\$(python3 tests/sh/store_attack.py 127.0.0.1 $P read rdzv-watch/latest $tok)\" != absent ]"
A=(127.0.0.1 "$P")
expect "the job's own token reads the rendezvous watch" '.+atk.+' "$(attack "${A[@]}" read rdzv-watch/latest "$tok")"
expect "no token: the watch is not read (closed before any request)" closed "$(attack "${A[@]}" read rdzv-watch/latest)"
expect "a wrong token: refused" auth_fail "$(attack "${A[@]}" read rdzv-watch/latest wrong-token)"
expect "no token: no join slot taken" closed "$(attack "${A[@]}" add atk/rdzv/0/joined)"
expect "no token: no node record written" closed "$(attack "${A[@]}" write atk/rdzv/0/node/1 'evil 1 10.0.0.66')"
expect "a wrong token: no join slot taken" auth_fail "$(attack "${A[@]}" add atk/rdzv/0/joined wrong-token)"
expect "no token: no fail event posted" closed "$(attack "${A[@]}" write atk/rdzv/0/event 'fail 1 stranger')"
expect "the round still holds node 0's join only" 1 "$(attack "${A[@]}" read atk/rdzv/0/joined "$tok")"
expect "and no event" absent "$(attack "${A[@]}" read atk/rdzv/0/event "$tok")"
spid=${pids[0]}
rss0=$(rss_kb "$spid")
expect "a HELLO-only stranger is dropped after the hello timeout" 'dropped after (0\.9|1\.[0-9]|2\.[0-9])' \
  "$(attack "${A[@]}" hello_only 6)"
expect "a slow-loris stranger (a byte every 0.2 s) too" 'dropped after (0\.9|1\.[0-9]|2\.[0-9])' "$(attack "${A[@]}" loris 6)"
expect "a 2 GiB length prefix before the handshake: closed at once" 'closed after 0\.[0-4]' "$(attack "${A[@]}" huge)"
expect "a 2 GiB length prefix from the job's own client: closed at once" 'closed after 0\.[0-4]' \
  "$(attack "${A[@]}" huge "$tok")"
rss1=$(rss_kb "$spid")
if [ $((rss1 - rss0)) -lt 16384 ]; then ok "the store allocated nothing for them ($rss0 -> $rss1 kB)"
else fail "the store allocated nothing for the huge frames" "$rss0 -> $rss1 kB"; fi
(node 1)
rc1=$?
wait "${pids[0]}"; rc0=$?
pids=()
worlds=$(cat "$tmp/node0.log" "$tmp/node1.log" | grep -o 'world=[0-9]* rank=[0-9]*' | sort | tr '\n' ' ')
if [ $rc0 -eq 0 ] && [ $rc1 -eq 0 ] && [ "$worlds" = "world=2 rank=0 world=2 rank=1 " ]; then
  ok "the job forms with its two nodes only and ends well"
else fail "the job forms with its two nodes" "rc $rc0 $rc1, workers: $worlds; $(cat "$tmp"/node*.log)"; fi

# ---- no token over the loopback: only the loopback reaches the store ----
P=$(free_port)
"$CDDP" run --nnodes 2 --nproc-per-node 1 --rdzv-backend c10d --rdzv-endpoint "127.0.0.1:$P" --rdzv-id open \
  true >"$tmp/open.log" 2>&1 &
pids=($!)
await "the open job hosts its store" 10 port_listening "$P"
ip=$(hostname -I 2>/dev/null | awk '{ print $1 }')
expect "no token, over the loopback: the stranger on this host joins (the loopback is trusted)" '[0-9]+' \
  "$(attack 127.0.0.1 "$P" add open/rdzv/probe)"
if [ -z "$ip" ]; then fail "the host has a non-loopback address" "hostname -I: none"
else expect "no token, over the loopback: $ip:$P refuses the stranger" refused "$(attack "$ip" "$P" add open/rdzv/probe)"; fi
expect "no token: a HELLO-only stranger is dropped all the same" 'dropped after (0\.9|1\.[0-9]|2\.[0-9])' \
  "$(attack 127.0.0.1 "$P" hello_only 6)"
kill "${pids[0]}"; wait "${pids[0]}" 2>/dev/null
pids=()
finish
