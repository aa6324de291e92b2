#!/usr/bin/env bash
# test_doctor.sh - `cddp doctor`: healthy on one host (3x3 matrices, exit 0), bad usage (exit 2),
# configs that differ (names the key), and on namespace hosts: a partition between two hosts, a
# host whose link is down, and a CDDP_SOCKET_IFNAME naming no interface (each named, exit 1).
# suite: alone (measures latency and bandwidth; its namespaces share 10.77.x with test_elastic_netns)
cd "$(dirname "$0")/../.." && source tests/sh/lib.sh
T=$(mktemp -d /tmp/cddp-doctor.XXXXXX)
NS=tests/cluster/netns.sh
export CDDP_NETNS_STATE=$T/netns CDDP_NETNS_PREFIX=cddpdoc$$ CDDP_NETNS_SUBNET=10.77.$(($$ % 200 + 20))
NET=$CDDP_NETNS_SUBNET
netns_up=0
cleanup() {
  [ $netns_up = 1 ] && timeout 30 "$NS" down >/dev/null 2>&1
  rm -rf "$T"
}
trap cleanup EXIT

# ---- bad usage: one line, exit 2
"$CDDP" doctor --frobnicate >/dev/null 2>"$T/err"; rc=$?
[ $rc = 2 ] && head -1 "$T/err" | grep -q "^cddp doctor: unknown option '--frobnicate' (cddp doctor --help lists them)$" && ok "unknown flag: exit 2, one line" || fail "unknown flag" "rc=$rc $(head -1 "$T/err")"
"$CDDP" doctor --bytes lots >/dev/null 2>"$T/err"; rc=$?
[ $rc = 2 ] && grep -q "^cddp doctor: --bytes lots: expected a size" "$T/err" && ok "bad --bytes: exit 2" || fail "bad --bytes" "rc=$rc $(cat "$T/err")"
"$CDDP" doctor --set a=b >/dev/null 2>"$T/err"; rc=$?
[ $rc = 2 ] && grep -q "^cddp doctor: --set needs --config$" "$T/err" && ok "--set without --config: exit 2" || fail "--set without --config" "rc=$rc"

# ---- one host, three ranks: healthy, 3x3 matrices
t0=$(date +%s)
timeout 30 "$CDDP" run --standalone --nproc-per-node 3 "$CDDP" doctor --config configs/fmnist_mlp.yaml >"$T/one.out" 2>&1; rc=$?
body=$(sed -E 's/^\[rank [0-9]+\] //' "$T/one.out")
rows=$(echo "$body" | awk '/^latency/ {on=1; next} /^bandwidth/ {on=0} on && $1 ~ /^[0-9]+$/ && NF == 4' | wc -l)
bw=$(echo "$body" | awk '/^bandwidth/ {on=1; next} /^clock/ {on=0} on && $1 ~ /^[0-9]+$/ && NF == 4 && $2 != "x" && $3 != "x" && $4 != "x"' | wc -l)
if [ $rc = 0 ] && echo "$body" | grep -q "^cddp doctor: healthy$" && [ "$rows" = 3 ] && [ "$bw" = 3 ] &&
   echo "$body" | grep -q "^reachability: 6 of 6 connections ok" && ! echo "$body" | grep -q "^problem:"; then
  ok "one host, 3 ranks: healthy, exit 0, 3x3 latency and bandwidth matrices ($(( $(date +%s) - t0 )) s)"
else fail "one host, 3 ranks" "rc=$rc rows=$rows bw=$bw $(tail -5 "$T/one.out" | tr '\n' ' ')"; fi
echo "$body" | grep -q "^config: configs/fmnist_mlp.yaml resolves the same on every rank" && ok "same config on every rank" || fail "config agreement line"
[ "$(grep -vc '^\[rank 0\]' "$T/one.out")" = 0 ] && ok "only rank 0 prints" || fail "other ranks printed" "$(grep -v '^\[rank 0\]' "$T/one.out" | head -3)"

# ---- two ranks (torchrun-style variables) whose configs differ: the first differing key named
P=$(free_port)
for r in 0 1; do
  RANK=$r WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$P timeout 30 "$CDDP" doctor --bytes 1M \
    --config configs/fmnist_mlp.yaml --set optim.lr=0.0$((r + 1)) >"$T/cfg$r.out" 2>&1 & eval "p$r=\$!"
done
wait $p0; rc0=$?; wait $p1; rc1=$?
[ $rc0 = 1 ] && [ $rc1 = 1 ] && grep -q "^problem: rank 1 (host .*) loaded a different config than rank 0: first differing key optim.lr -> " "$T/cfg0.out" &&
  ok "different configs: names optim.lr, every rank exits 1" || fail "different configs" "rc=$rc0/$rc1 $(grep problem "$T/cfg0.out")"

# ---- namespace hosts
if ! ip netns add "cddpdoc$$-probe" 2>/dev/null; then
  echo "ok $((t_n + 1)) - $t_name:netns # SKIP network namespaces are not allowed here"
  finish
fi
ip netns del "cddpdoc$$-probe"
netns_up=1
if ! timeout 30 "$NS" up 3 >"$T/up.log" 2>&1; then fail "netns up" "$(tail -2 "$T/up.log")"; finish; fi

# agents I...: one `cddp run` agent per host, each with one doctor rank; ENV_<host> adds variables
agents() {
  local id=$1; shift
  local P; P=$(free_port)
  local pids=() i
  for i in 1 2 3; do
    local extra=ENV_$i
    timeout 25 "$NS" exec $i env ${!extra} "$CDDP" run --nnodes 3 --nproc-per-node 1 --rdzv-endpoint "$NET.1:$P" \
      --rdzv-id "$id" --rdzv-timeout 10 "$CDDP" doctor --timeout 5 --bytes 2M "$@" >"$T/$id.$i" 2>&1 & pids+=($!)
  done
  rc=()
  for i in 0 1 2; do wait "${pids[$i]}"; rc+=($?); done
  sed -E 's/^\[rank [0-9]+\] //' "$T/$id.1" "$T/$id.2" "$T/$id.3" >"$T/$id.all"
}

# healthy across hosts first: the report lists 3 hosts with eth0 chosen
t0=$(date +%s)
agents OK
# the master is node 0's host: whichever agent joined the round first (usually host 1, not always)
master=$(grep -oE "routes to the master $NET\.[123]\)" "$T/OK.all" | sort -u)
if [ "${rc[*]}" = "0 0 0" ] && grep -q "^cddp doctor: healthy$" "$T/OK.all" && grep -q "3 of 3 ranks reported, on 3 hosts" "$T/OK.all" &&
   [ "$(echo "$master" | wc -l)" = 1 ] && [ "$(grep -c "chosen: eth0 $NET\.[123] ($master" "$T/OK.all")" = 3 ]; then
  ok "3 namespace hosts: healthy, eth0 chosen on each by the route to the master ($(( $(date +%s) - t0 )) s)"
else fail "3 namespace hosts healthy" "rc=${rc[*]} $(grep -E 'problem|healthy|chosen' "$T/OK.all" | head -5 | tr '\n' ' ')"; fi

# (a) hosts 2 and 3 drop each other's packets (the store, on host 1, stays reachable)
"$NS" partition 2 3
t0=$(date +%s)
agents CUT
dt=$(( $(date +%s) - t0 ))
n23=$(grep -cE "^problem: rank [0-9] \(host [^ ]*$NET\.([23])\]?, $NET\.[23]\) cannot reach rank [0-9] \(host [^ ]*$NET\.[23]\]?, $NET\.[23]:[0-9]+\): connection timed out -> " "$T/CUT.all")
if [ "${rc[0]}" = 1 ] && [ "$n23" = 2 ] && [ "$(grep -c '^problem:' "$T/CUT.all")" = 2 ] && [ $dt -le 20 ] &&
   grep -q "^reachability: 4 of 6 connections ok" "$T/CUT.all"; then
  ok "partition between hosts 2 and 3: both directions named (timed out), nothing else, exit 1 in ${dt} s"
else fail "partition 2|3" "rc=${rc[*]} n23=$n23 ${dt}s $(grep -E '^(problem|reach)' "$T/CUT.all" | tr '\n' ' ')"; fi
"$NS" heal

# (a') host 3's cable pulled: its rank cannot reach the store and says so; rank 0 names the missing rank
"$NS" linkdown 3
P=$(free_port)
t0=$(date +%s)
for i in 1 2 3; do
  timeout 25 "$NS" exec $i env RANK=$((i - 1)) WORLD_SIZE=3 MASTER_ADDR=$NET.1 MASTER_PORT=$P \
    "$CDDP" doctor --timeout 3 --bytes 1M >"$T/DOWN.$i" 2>&1 & eval "q$i=\$!"
done
wait $q1; r1=$?; wait $q2; r2=$?; wait $q3; r3=$?
dt=$(( $(date +%s) - t0 ))
if [ $r1 = 1 ] && [ $r3 = 1 ] && grep -q "^problem: rank 2 did not report within 3.0 s -> it cannot reach the store at $NET.1:$P" "$T/DOWN.1" &&
   grep -q "^cddp doctor: rank 2 (host .*, eth0 $NET.3) cannot reach the job's store at $NET.1:$P within 3.0 s: .* -> check this host's link" "$T/DOWN.3" &&
   [ $dt -le "$(scaled 20)" ]; then
  ok "host 3's link down: rank 0 names rank 2, rank 2 names its host and the store, exit 1 in ${dt} s"
else fail "linkdown 3" "rc=$r1/$r2/$r3 ${dt}s $(grep problem "$T/DOWN.1" | tr '\n' ' ') / $(cat "$T/DOWN.3")"; fi
"$NS" linkup 3

# (b) a wrong interface on host 2
ENV_2=CDDP_SOCKET_IFNAME=bogus0
t0=$(date +%s)
agents IF
dt=$(( $(date +%s) - t0 ))
unset ENV_2
if [ "${rc[0]}" = 1 ] && grep -q "^problem: interface bogus0 chosen by CDDP_SOCKET_IFNAME does not exist on host [^ ]*$NET\.2\]\? (it has: lo, eth0) -> set CDDP_SOCKET_IFNAME=eth0 there" "$T/IF.all" &&
   [ "$(grep -c '^problem:' "$T/IF.all")" = 1 ] && [ $dt -le "$(scaled 20)" ]; then
  ok "CDDP_SOCKET_IFNAME=bogus0 on host 2: named, eth0 suggested, exit 1 in ${dt} s"
else fail "wrong interface" "rc=${rc[*]} ${dt}s $(grep -E '^problem' "$T/IF.all" | tr '\n' ' ') $(tail -2 "$T/IF.2")"; fi

# teardown, not a test: only its failure is reported
if timeout 30 "$NS" down >/dev/null 2>&1 && ! ip netns list | grep -q "^cddpdoc$$-"; then netns_up=0; echo "# namespaces removed"
else fail "netns down" "$(ip netns list | grep "cddpdoc$$" | tr '\n' ' ')"; fi
finish
