#!/usr/bin/env bash
# test_store_cli.sh - `cddp store`: starts and stops on signals, port in use, bad flags, fd limit.
source "$(dirname "$0")/lib.sh"
tmp=$(mktemp -d /tmp/cddp-store-cli.XXXXXX)
trap 'kill $pid 2>/dev/null; rm -rf "$tmp"' EXIT

port=$(free_port)
echo "s3cret" > "$tmp/token"
"$CDDP" store --port "$port" --host 127.0.0.1 --token-file "$tmp/token" >"$tmp/out" 2>"$tmp/err" &
pid=$!
wait_for 5 grep -q listening "$tmp/out" # the check below names a miss
if grep -qx "cddp store: listening on 127.0.0.1:$port (token required)" "$tmp/out"; then ok "prints its listening line"
else fail "prints its listening line" "$(cat "$tmp/out" "$tmp/err")"; fi

if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then ok "accepts connections"; else fail "accepts connections"; fi

# TCP keepalive on every accepted connection: a half-open peer (its host gone) is found by
# probes, so its will fires; without it the connection would wait for ever
exec 4<>"/dev/tcp/127.0.0.1/$port"
timers=""
has_timers() { timers=$(ss -tno state established "( sport = :$port )" 2>/dev/null | grep -o 'timer:([a-z]*' | sort -u | tr '\n' ' '); [ -n "$timers" ]; }
wait_for 2 has_timers # the check below names a miss
exec 4<&-
if [ "$timers" = "timer:(keepalive " ]; then ok "the store's side of a connection has TCP keepalive on"
else fail "TCP keepalive on accepted connections" "ss timers: '${timers:-none}'"; fi

start=$(date +%s%N)
"$CDDP" store --port "$port" >"$tmp/out2" 2>"$tmp/err2"
rc=$?
ms=$(( ($(date +%s%N) - start) / 1000000 ))
if [ $rc -eq 1 ] && [ $ms -lt 2000 ] && [ "$(wc -l <"$tmp/err2")" -eq 1 ] && grep -q "port $port is in use" "$tmp/err2"; then
  ok "port in use: one line naming the port, exit 1, ${ms} ms"
else fail "port in use" "rc=$rc ms=$ms: $(cat "$tmp/err2")"; fi

# agents at a `cddp store` know at once it never moves (cddp/fixed): no wait for a peers list
for i in 1 2; do
  CDDP_TOKEN_FILE="$tmp/token" CDDP_DEBUG=INFO CDDP_DEBUG_SUBSYS=RUN timeout 60 "$CDDP" run --nnodes 2 --rdzv-backend c10d \
    --rdzv-endpoint "127.0.0.1:$port" --rdzv-id fixed --nproc-per-node 1 --no-python true >"$tmp/agent$i" 2>&1 &
  apids[$i]=$!
done
wait "${apids[1]}"; rc1=$?; wait "${apids[2]}"; rc2=$?
if [ $rc1 = 0 ] && [ $rc2 = 0 ] && grep -q "is not an agent's (a \`cddp store\`): it cannot move" "$tmp/agent1" "$tmp/agent2" &&
   [ "$(grep -c "a \`cddp store\`" "$tmp/agent1" "$tmp/agent2" | grep -c ':1$')" = 2 ]; then
  ok "2 agents at a cddp store: each knows at once it cannot move (no wait for a peers list), exit 0"
else fail "agents at a cddp store" "rc $rc1 $rc2: $(grep -h "cannot move" "$tmp/agent1" "$tmp/agent2")"; fi

# restart-all, an agent SIGKILLed while its round runs: its will at the store ends the round, so
# the others neither wait for its "done" for ever nor hang; they restart on the nodes left
# while restarts remain (>= MIN of them), else stop with one line naming the lost node.
# lost_agent ID NNODES AGENTS MAX_RESTARTS LAST_CALL: runs AGENTS agents (workers: sleep 2 after
# marking they started), SIGKILLs the last once every worker started; rcs and outputs in $tmp/ID.*.
# Round 0 closes as the last agent joins; LAST_CALL (s) bounds how late an agent may start (a
# loaded host) and how long a restart's round, one node short, waits before it closes
lost_agent() {
  local id=$1 n=$3 i ap=() t0
  for ((i = 1; i <= n; i++)); do
    CDDP_TOKEN_FILE="$tmp/token" "$CDDP" run --nnodes "$2" --max-restarts "$4" --rdzv-backend c10d --rdzv-last-call "$5" \
      --rdzv-endpoint "127.0.0.1:$port" --rdzv-id "$id" --nproc-per-node 1 --no-python \
      sh -c "touch $tmp/$id.started.$i; sleep 2" >"$tmp/$id.$i" 2>&1 &
    ap[$i]=$!
  done
  wait_for 20 sh -c "[ \$(ls $tmp/$id.started.* 2>/dev/null | wc -l) = $n ]" # the checks below name a miss
  { kill -KILL "${ap[$n]}"; wait "${ap[$n]}"; } 2>/dev/null
  t0=$(date +%s)
  wait_for 30 none_alive "${ap[@]:0:$((n - 1))}" # bounded: a hang fails below
  for ((i = 1; i < n; i++)); do
    if kill -0 "${ap[$i]}" 2>/dev/null; then stacks "${ap[$i]}" >"$tmp/$id.stacks.$i"; kill -KILL "${ap[$i]}"; echo hung >"$tmp/$id.rc.$i"
    else wait "${ap[$i]}"; echo $? >"$tmp/$id.rc.$i"; fi
  done
  echo $(($(date +%s) - t0)) >"$tmp/$id.secs"
}
lost="was lost: its agent's connection to the store closed without a goodbye"
lost_agent lost1 3:4 4 1 "$(scaled 2)"
rcs=$(cat "$tmp"/lost1.rc.* | tr '\n' ' ')
if [ "$rcs" = "0 0 0 " ] && [ "$(grep -l "^cddp run: node [0-3] (host .*) $lost.*; restarting the workers on the nodes left (restart 1 of 1)" "$tmp"/lost1.[123] | wc -l)" = 3 ]; then
  ok "restart-all, --nnodes 3:4, an agent SIGKILLed: the 3 others restart without it and exit 0 ($(cat "$tmp/lost1.secs") s)"
else fail "restart-all, an agent lost" "rc $rcs: $(cat "$tmp"/lost1.[123] | sort | uniq -c | tr '\n' ' '); kept in $(keep_failed store-cli "$tmp"/lost1.*)"; fi
lost_agent lost2 2:3 3 0 60 # no restart: no round after the first
rcs=$(cat "$tmp"/lost2.rc.* | tr '\n' ' ')
if [ "$rcs" = "1 1 " ] && [ "$(cat "$tmp"/lost2.[12] | grep -c "^cddp run: node [0-2] (host .*) $lost .*; no restarts left$")" = 2 ] &&
   [ "$(cat "$tmp"/lost2.[12] | wc -l)" = 2 ]; then
  ok "restart-all, no restart left, an agent SIGKILLed: the others exit 1 with one line naming it ($(cat "$tmp/lost2.secs") s)"
else fail "restart-all, an agent lost, no restarts" "rc $rcs: $(cat "$tmp"/lost2.[12] | tr '\n' ' '); kept in $(keep_failed store-cli "$tmp"/lost2.*)"; fi

# restart-all: a node that came after round 0 closed waits for round 1, which opens on a restart.
# When the job ends instead, it is told at once, with the job's code (before: it waited out
# --rdzv-timeout, and on a loaded host the lost-agent cases above met such a node).
# late_node ID CODE: 2 agents (--nnodes 2:3) whose workers exit CODE once $tmp/ID.go exists; a 3rd
# joins once they run, and the workers go once it says it waits; its rc, output, ms in $tmp/ID.*, the
# first two's rcs in $tmp/ID.rcs
late_node() {
  local id=$1 i ap=() t0
  for i in 1 2; do
    CDDP_TOKEN_FILE="$tmp/token" "$CDDP" run --nnodes 2:3 --max-restarts 0 --rdzv-backend c10d --rdzv-last-call 0.2 \
      --rdzv-endpoint "127.0.0.1:$port" --rdzv-id "$id" --nproc-per-node 1 --no-python \
      sh -c "touch $tmp/$id.started.$i; while [ ! -e $tmp/$id.go ]; do sleep 0.05; done; exit $2" >"$tmp/$id.$i" 2>&1 &
    ap[$i]=$!
  done
  await "$id: the first 2 nodes' workers start" 20 sh -c "[ \$(ls $tmp/$id.started.* 2>/dev/null | wc -l) = 2 ]"
  CDDP_TOKEN_FILE="$tmp/token" CDDP_DEBUG=INFO CDDP_DEBUG_SUBSYS=RDZV "$CDDP" run --nnodes 2:3 --max-restarts 0 \
    --rdzv-backend c10d --rdzv-last-call 0.2 --rdzv-timeout 300 --rdzv-endpoint "127.0.0.1:$port" --rdzv-id "$id" \
    --nproc-per-node 1 --no-python sh -c "touch $tmp/$id.started.3" >"$tmp/$id.3" 2>&1 &
  ap[3]=$!
  await "$id: the 3rd node waits for round 1" 20 grep -q "it waits for round 1" "$tmp/$id.3"
  touch "$tmp/$id.go"; t0=$(now_us)
  wait_for 30 none_alive "${ap[3]}" # bounded: a wait for the timeout fails below
  if kill -0 "${ap[3]}" 2>/dev/null; then kill -KILL "${ap[3]}"; echo hung >"$tmp/$id.rc"
  else wait "${ap[3]}"; echo $? >"$tmp/$id.rc"; fi
  echo $((($(now_us) - t0) / 1000)) >"$tmp/$id.ms"
  wait_all 30 "${ap[1]}" "${ap[2]}"; echo "${RC[*]}" >"$tmp/$id.rcs"
}
late_node late0 0
if [ "$(cat "$tmp/late0.rc")" = 0 ] && [ "$(cat "$tmp/late0.rcs")" = "0 0" ] && [ ! -e "$tmp/late0.started.3" ] &&
   grep -qx "cddp run: the job finished without this node: it came after round 0 closed, and no round opened after it" "$tmp/late0.3"; then
  ok "restart-all, a node after round 0 closed, the job finishes: it says so and exits 0 at once ($(cat "$tmp/late0.ms") ms)"
else fail "late node, the job finishes" "rc $(cat "$tmp/late0.rc") (the others $(cat "$tmp/late0.rcs")): $(tr '\n' ' ' <"$tmp/late0.3"); kept in $(keep_failed store-cli "$tmp"/late0.*)"; fi
late_node late3 3
if [ "$(cat "$tmp/late3.rc")" = 3 ] && [ "$(cat "$tmp/late3.rcs")" = "3 3" ] && [ ! -e "$tmp/late3.started.3" ] &&
   grep -q "^cddp run: the job ended without this node (it came after round 0 closed): rank [01] (host .*exit.* 3" "$tmp/late3.3"; then
  ok "restart-all, a node after round 0 closed, the job fails (exit 3): it names the failure and exits 3 at once ($(cat "$tmp/late3.ms") ms)"
else fail "late node, the job fails" "rc $(cat "$tmp/late3.rc") (the others $(cat "$tmp/late3.rcs")): $(tr '\n' ' ' <"$tmp/late3.3"); kept in $(keep_failed store-cli "$tmp"/late3.*)"; fi

kill -TERM $pid
wait_for 5 sh -c "! kill -0 $pid 2>/dev/null" # the check below names a miss
if kill -0 $pid 2>/dev/null; then fail "exits on SIGTERM" "still running"; kill -9 $pid
else wait $pid; rc=$?; if [ $rc -eq 0 ]; then ok "exits 0 on SIGTERM"; else fail "exits 0 on SIGTERM" "rc=$rc"; fi; fi

"$CDDP" store --port 0 >"$tmp/out3" 2>&1 &
pid=$!
await "port 0: the store listens" 5 grep -q listening "$tmp/out3"
kill -INT $pid; wait $pid; rc=$?
if [ $rc -eq 0 ] && grep -q "listening on 0.0.0.0:[1-9]" "$tmp/out3"; then ok "port 0 picks a port, SIGINT exits 0"; else fail "port 0 / SIGINT" "rc=$rc $(cat "$tmp/out3")"; fi

"$CDDP" store --port 1 --frobnicate >"$tmp/out4" 2>&1; rc=$?
if [ $rc -eq 2 ] && [ "$(cat "$tmp/out4")" = "cddp store: unknown option '--frobnicate' (cddp store --help lists them)" ]; then ok "unknown flag: one line naming it, exit 2"
else fail "unknown flag" "rc=$rc $(cat "$tmp/out4")"; fi

"$CDDP" store >"$tmp/out5" 2>&1; rc=$?
if [ $rc -eq 2 ] && grep -q -- "--port is required" "$tmp/out5"; then ok "missing --port: exit 2"; else fail "missing --port" "rc=$rc"; fi

"$CDDP" store --port 70000 >"$tmp/out6" 2>&1; rc=$?
if [ $rc -eq 2 ] && grep -q "^cddp store: --port 70000: expected a port number" "$tmp/out6"; then ok "bad port value: exit 2"; else fail "bad port value" "rc=$rc"; fi

"$CDDP" store --port 0 --token-file "$tmp/nope" >"$tmp/out7" 2>&1; rc=$?
if [ $rc -eq 1 ] && grep -q "$tmp/nope" "$tmp/out7"; then ok "unreadable token file: names it, exit 1"; else fail "unreadable token file" "rc=$rc $(cat "$tmp/out7")"; fi

: >"$tmp/empty"
"$CDDP" store --port 0 --token-file "$tmp/empty" >"$tmp/out8" 2>&1; rc=$?
if [ $rc -eq 1 ] && [ "$(wc -l <"$tmp/out8")" -eq 1 ] && grep -q "$tmp/empty (CDDP_TOKEN_FILE) is empty" "$tmp/out8"; then
  ok "empty token file: one line, exit 1 (never a store without a token)"; else fail "empty token file" "rc=$rc $(cat "$tmp/out8")"; fi

mkfifo "$tmp/fifo"
timeout 10 "$CDDP" store --port 0 --token-file "$tmp/fifo" >"$tmp/out9" 2>&1; rc=$?
if [ $rc -eq 1 ] && grep -q "is not a regular file" "$tmp/out9"; then ok "a FIFO as token file: one line, exit 1, no hang"
else fail "FIFO token file" "rc=$rc $(cat "$tmp/out9")"; fi

# the soft open-file limit rises to the hard one, said at INFO with the agents it leaves room for
(ulimit -Sn 64 && ulimit -Hn 256 && CDDP_DEBUG=INFO CDDP_DEBUG_SUBSYS=STORE exec "$CDDP" store --port 0) >"$tmp/out10" 2>&1 &
pid=$!
await "open-file limit: the store listens" 5 grep -q listening "$tmp/out10"
soft=$(awk '/^Max open files/ {print $4}' "/proc/$pid/limits" 2>/dev/null)
kill -TERM $pid; wait $pid
if [ "$soft" = 256 ] && grep -q "open-file limit 256: room for about 48 agents" "$tmp/out10"; then
  ok "open-file soft limit 64 raised to the hard 256, INFO says 48 agents"
else fail "open-file limit raise" "soft=$soft $(cat "$tmp/out10")"; fi

if "$CDDP" store --help | grep -q "^usage: cddp store"; then ok "--help"; else fail "--help"; fi
pid=
finish
