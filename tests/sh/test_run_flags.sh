#!/usr/bin/env bash
# test_run_flags.sh - documented `cddp run` behaviours that no other test covered
# (docs/launcher.md, docs/store.md): --run-path runs any PROGRAM with Python; --local-addr is
# the address node 0 publishes (the workers' MASTER_ADDR); a standby store, like the store,
# refuses a wrong token; --rdzv-conf close_timeout bounds the store host's wait at exit; a
# mistyped command under cddp run names what it meant, and the usage comes at most once.
cd "$(dirname "$0")/../.." && source tests/sh/lib.sh
T=$(mktemp -d /tmp/cddp-runflags.XXXXXX)
bg=()
trap 'for p in "${bg[@]}"; do kill -KILL $p $(pgrep -P $p) 2>/dev/null; done; rm -rf "$T"' EXIT

# --run-path: a Python script without .py, not executable, runs with Python; without the flag
# it is refused in one line naming the flag
printf 'import os\nprint("ran by python, rank", os.environ["RANK"])\n' >"$T/prog"
out=$(cd "$T" && timeout 60 "$CDDP" run --standalone --nproc-per-node 2 --run-path prog 2>&1); rc=$?
[ $rc = 0 ] && [ "$(grep -c '^\[rank [01]\] ran by python, rank [01]$' <<<"$out")" = 2 ] &&
  ok "--run-path: PROGRAM 'prog' runs with Python on both ranks" || fail "--run-path" "rc=$rc: $out"
out=$(cd "$T" && timeout 60 "$CDDP" run --standalone --nproc-per-node 1 ./prog 2>&1); rc=$?
[ $rc = 2 ] && [ "$(wc -l <<<"$out")" = 1 ] && grep -q "PROGRAM './prog' is not executable: .*pass --run-path" <<<"$out" &&
  ok "without --run-path: not executable, one line naming --run-path, exit 2" || fail "no --run-path" "rc=$rc: $out"

# --local-addr: node 0's published address, which its workers get as MASTER_ADDR; by default
# the address on the route to the store
c10d_master() { # [OPTION...]: MASTER_ADDR as a one-node c10d job's worker sees it
  local P; P=$(free_port)
  timeout 60 "$CDDP" run --nnodes 1 --nproc-per-node 1 --rdzv-backend c10d --rdzv-endpoint 127.0.0.1:$P "$@" \
    sh -c 'echo "MASTER_ADDR=$MASTER_ADDR"' 2>&1
}
out=$(c10d_master --local-addr 127.0.0.3); rc=$?
[ $rc = 0 ] && grep -q '^\[rank 0\] MASTER_ADDR=127.0.0.3$' <<<"$out" && ok "--local-addr 127.0.0.3: the workers' MASTER_ADDR" ||
  fail "--local-addr" "rc=$rc: $out"
out=$(c10d_master); rc=$?
[ $rc = 0 ] && grep -q '^\[rank 0\] MASTER_ADDR=127.0.0.1$' <<<"$out" && ok "no --local-addr: the address toward the store (127.0.0.1)" ||
  fail "default local address" "rc=$rc: $out"

# a standby store refuses a wrong token (docs/store.md: "the standbys require it too"): two
# agents under one token; the second one's standby is the port it listens on
listening_ports() { # PID: the TCP ports the process PID listens on
  local inodes h
  inodes=$(ls -l /proc/"$1"/fd 2>/dev/null | sed -n 's/.*socket:\[\([0-9]*\)\]$/\1/p' | tr '\n' ' ')
  for h in $(awk -v ino=" $inodes" '$4 == "0A" && index(ino, " " $10 " ") { split($2, a, ":"); print a[2] }' \
               /proc/net/tcp /proc/net/tcp6 2>/dev/null); do echo $((16#$h)); done | sort -u
}
P=$(free_port)
sb_agent() { # OUT: an agent of job sb$P under the right token, in the background
  CDDP_TOKEN=right timeout 60 "$CDDP" run --nnodes 2:3 --nproc-per-node 1 --rdzv-backend c10d \
    --rdzv-endpoint 127.0.0.1:$P --rdzv-id sb$P --max-restarts 3 --restart-mode replace sleep 30 >"$T/$1" 2>&1 &
  bg+=($!)
}
sb_agent a1.out; await "agent 1 hosts the store" 10 port_listening $P
sb_agent a2.out
agent2() { pgrep -P "${bg[1]}" -x cddp; }
standby_up() { sb=$(listening_ports "$(agent2)" | grep -vx "$P" | head -1); [ -n "$sb" ]; }
if wait_for 20 standby_up; then
  out=$(CDDP_TOKEN=wrong timeout 60 "$CDDP" run --nnodes 2:3 --nproc-per-node 1 --rdzv-backend c10d \
    --rdzv-endpoint 127.0.0.1:$sb --rdzv-id sb$P --max-restarts 3 --restart-mode replace true 2>&1); rc=$?
  [ $rc != 0 ] && [ "$(wc -l <<<"$out")" = 1 ] && grep -q "token refused by store 127.0.0.1:$sb" <<<"$out" &&
    ok "a standby refuses a wrong token: one line, exit $rc" || fail "standby, wrong token" "rc=$rc: $out"
else fail "standby, wrong token" "agent 2 started no standby: $(tail -2 "$T/a2.out" | tr '\n' ' ')"; fi
kill -TERM "${bg[@]}" 2>/dev/null; wait_all 30 "${bg[@]}"; bg=()

# --rdzv-conf close_timeout: at exit the store's host waits that long for the other nodes to count
# out of the round (default: --grace-period). Node 1's agent is frozen, so it never counts out;
# SIGTERM to the host then ends it after close_timeout, not sooner and not much later.
host_exit_after() { # CONF: seconds from SIGTERM to the store host's exit, node 1 frozen
  local P; P=$(free_port); : >"$T/h.out"; : >"$T/n.out"
  timeout 60 "$CDDP" run --nnodes 2 --nproc-per-node 1 --rdzv-backend c10d --rdzv-endpoint 127.0.0.1:$P \
    --grace-period 2 --rdzv-conf "is_host=true$1" sh -c 'echo up; exec sleep 60' >"$T/h.out" 2>&1 & local h=$!
  timeout 60 "$CDDP" run --nnodes 2 --nproc-per-node 1 --rdzv-backend c10d --rdzv-endpoint 127.0.0.1:$P \
    --rdzv-conf is_host=false sh -c 'echo up; exec sleep 60' >"$T/n.out" 2>&1 & local n=$!
  bg+=($h $n)
  both_up() { [ "$(cat "$T/h.out" "$T/n.out" | grep -c '\] up$')" = 2 ]; }
  if ! wait_for 30 both_up; then echo "never up: $(tail -2 "$T/h.out" | tr '\n' ' ')"; kill -KILL $h $n; return; fi
  local agent; agent=$(pgrep -P $n -x cddp) # timeout's child: the agent itself
  kill -STOP $agent
  local t0; t0=$(date +%s.%N); kill -TERM $h; wait $h; local rc=$?
  echo "rc=$rc $(echo "$(date +%s.%N) - $t0" | bc)"
  kill -CONT $agent; kill -TERM $n; wait_all 20 $n
}
for c in "1:,close_timeout=1" "4:,close_timeout=4" "2:"; do
  want=${c%%:*}; out=$(host_exit_after "${c#*:}"); rc=${out%% *}; dt=${out##* }
  name="--rdzv-conf ${c#*:,}"; [ -z "${c#*:}" ] && name="close_timeout unset (the grace period, 2 s)"
  if [ "$rc" = rc=143 ] && awk -v d="$dt" -v w="$want" -v k="$(scaled 1)" 'BEGIN { exit !(d >= w - 0.1 && d < w + 1.5 * k) }'; then
    ok "$name: the store's host waits ${dt%???????} s for a frozen node at exit"
  else fail "$name" "$out (wanted rc=143 after about $want s)"; fi
done

# a mistyped command under cddp run: a line naming the command it meant, no usage; a command
# unlike any: the usage from local rank 0 only (the first rank to fail stops the others, so a
# rank's line may not come at all)
out=$(timeout 60 "$CDDP" run --standalone --nproc-per-node 2 "$CDDP" trian 2>&1); rc=$?
[ $rc != 0 ] && grep -q "cddp: unknown command 'trian' (did you mean train?)" <<<"$out" &&
  ! grep -q "usage:" <<<"$out" && ok "cddp trian under 2 ranks: did you mean train, no usage" || fail "cddp trian" "rc=$rc: $out"
out=$(timeout 60 "$CDDP" run --standalone --nproc-per-node 2 "$CDDP" zzzzzzzz 2>&1); rc=$?
[ $rc != 0 ] && grep -q "unknown command 'zzzzzzzz'" <<<"$out" && [ "$(grep -c "usage: cddp <command>" <<<"$out")" -le 1 ] &&
  ! grep -q "^\[rank 1\] usage:" <<<"$out" && ok "an unknown command under 2 ranks: the usage at most once, never from rank 1" || fail "usage once" "rc=$rc: $out"
finish
