#!/usr/bin/env bash
# rdzv_scale.sh - the control plane's cost as the job grows: N agents on the loopback, one store
# host (`cddp store`, a process of its own so its CPU and memory are its own), each agent
# `cddp run --nnodes N --rdzv-backend c10d --nproc-per-node 1` with a worker that only notes the
# time it started.
#
# Usage: bench/rdzv_scale.sh [--sizes 64,128,256,512,1024] [--hb-secs S] [--torchrun PATH]
#                            [--torch-sizes 8,16] [--replace] [--recover N] [--comm]
#                            [--netns K] [--out DIR]
# Columns per N:
#   rdzv    launch -> the last worker started (s): every agent through the rendezvous
#   exited  launch -> the last agent exited (s)
#   cpu     the store host's user+sys CPU over the whole job (s)
#   rss     the store host's max RSS (MB)
#   msgs    requests the store served per agent (its own count, CDDP_DEBUG=INFO at its exit)
#   hb      --hb-secs S > 0: the job again with workers that sleep S s; the extra requests per
#           agent per second of that steady state (heartbeats and the membership watch)
#   hb_us   the store's CPU per request of that steady state (us): the extra CPU over the extra
#           requests, so hb x hb_us x N is the store's load in cores at N agents
# --replace: the agents run --restart-mode replace with --nnodes N:N (elastic membership: each
# agent's monitor, heartbeats and wills), so hb is that mode's steady state.
# --recover N: recovery at size, in replace mode (--nnodes N-2:N, so the round gathers all N and
# two losses leave the job at or above MIN): N agents whose workers sleep; once all started,
# one agent is frozen (SIGSTOP: found by its ring predecessors when its heartbeat stands still
# for CDDP_HEARTBEAT_TIMEOUT_MS) and the time to the generation without it is taken; then another
# is killed (SIGKILL: its connection's will) and the time to the next generation taken.
# (--sizes '' runs the recovery alone.)
# --comm: each N again with workers that form a communicator and do one checked 4-byte
# all-reduce (`cddp bench allreduce`, over TCP: one host cannot give 1,024 ranks shared memory):
#   comm    launch -> the last worker through its all-reduce (s)
#   comm_msgs  requests per agent in that job (the peer exchange is O(1) a rank: rank 0 reads
#           every record and publishes one list; it was every rank reading every record, N each)
# --netns K: the agents (and the store, on host 1) spread over K network-namespace hosts of
# tests/cluster/netns.sh, so every connection crosses a real veth and bridge (root only).
# --torchrun PATH: torchrun's c10d rendezvous (its agents are Python processes) at --torch-sizes,
# in the same run: launch -> the last agent exited. The load average is printed with each row:
# the machine may be shared.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
ROOT=$PWD
CDDP=$ROOT/build/cddp
SIZES=64,128,256,512,1024
HB_SECS=0
TORCHRUN=
TORCH_SIZES=8,16
OUT=
REPLACE=()
RECOVER=
COMM=0
NETNS=0
while [ $# -gt 0 ]; do
  case $1 in
    --sizes) SIZES=$2; shift 2 ;;
    --hb-secs) HB_SECS=$2; shift 2 ;;
    --torchrun) TORCHRUN=$2; shift 2 ;;
    --torch-sizes) TORCH_SIZES=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    --replace) REPLACE=(--restart-mode replace); shift ;;
    --recover) RECOVER=$2; shift 2 ;;
    --comm) COMM=1; shift ;;
    --netns) NETNS=$2; shift 2 ;;
    *) echo "rdzv_scale.sh: unknown argument $1 (see the usage at the top of the script)" >&2; exit 2 ;;
  esac
done
[ -x "$CDDP" ] || { echo "rdzv_scale.sh: build first (make -j2 all): $CDDP is missing" >&2; exit 1; }
ulimit -n "$(ulimit -Hn)" 2>/dev/null
[ -n "$OUT" ] || OUT=$(mktemp -d "${TMPDIR:-/tmp}/cddp-rdzv-scale.XXXXXX")
mkdir -p "$OUT"
HZ=$(getconf CLK_TCK)
unset CDDP_TOKEN CDDP_TOKEN_FILE

now() { date +%s.%N; }
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

for n in ${SIZES//,/ } ${TORCH_SIZES//,/ }; do
  [[ $n =~ ^[1-9][0-9]{0,4}$ ]] || { echo "rdzv_scale.sh: --sizes/--torch-sizes take agent counts 1-99999, not '$n'" >&2; exit 2; }
done
[ -z "$RECOVER" ] || [[ $RECOVER =~ ^[1-9][0-9]{0,4}$ && $RECOVER -ge 4 ]] ||
  { echo "rdzv_scale.sh: --recover takes an agent count 4-99999, not '$RECOVER'" >&2; exit 2; }
[[ $HB_SECS =~ ^[0-9]+$ ]] || { echo "rdzv_scale.sh: --hb-secs takes whole seconds, not '$HB_SECS'" >&2; exit 2; }
[[ $NETNS =~ ^[0-9]+$ && $NETNS -le 200 ]] || { echo "rdzv_scale.sh: --netns takes a host count 0-200, not '$NETNS'" >&2; exit 2; }
FAILED=0
HOST=127.0.0.1
# on_host I: sets pre, the words that run a command as agent I's host (none on the loopback;
# `ip netns exec` runs the command itself, so $! is still its pid)
pre=()
on_host() { pre=(); [ "$NETNS" = 0 ] || pre=(ip netns exec "$CDDP_NETNS_PREFIX-h$(($1 % NETNS + 1))"); }
if [ "$NETNS" -gt 0 ]; then
  [ "$(id -u)" = 0 ] || { echo "rdzv_scale.sh: --netns needs root (network namespaces)" >&2; exit 2; }
  export CDDP_NETNS_PREFIX=cddprs$$ CDDP_NETNS_SUBNET=10.87.0 CDDP_NETNS_STATE=$OUT/netns
  NS=$ROOT/tests/cluster/netns.sh
  trap '"$NS" down >/dev/null 2>&1' EXIT
  "$NS" up "$NETNS" >/dev/null || { echo "rdzv_scale.sh: --netns $NETNS: cannot make the hosts" >&2; exit 1; }
  HOST=$("$NS" addr 1)
fi

start_store() { # DIR: a store of its own on a free port; sets port, spid
  port=$(free_port)
  on_host 0
  CDDP_DEBUG=INFO CDDP_DEBUG_SUBSYS=STORE "${pre[@]}" "$CDDP" store --host "$HOST" --port "$port" \
    >"$1/store.out" 2>"$1/store.err" &
  spid=$!
  for _ in $(seq 100); do grep -q listening "$1/store.out" 2>/dev/null && break; sleep 0.05; done
}
# job N WORKER_SECS TAG [comm]: one job of N agents; prints "rdzv exited cpu rss_mb requests
# failed" (comm: the workers form a communicator, and rdzv is the last one through it)
job() {
  local n=$1 secs=$2 dir=$OUT/$3 port spid t0 i work
  work="date +%s.%N >>'$dir/starts'; sleep $secs"
  [ "${4:-}" = comm ] && work="CDDP_TRANSPORT=tcp '$CDDP' bench allreduce -b 4 -e 4 -w 0 -n 1 -c 1 >/dev/null && $work"
  mkdir -p "$dir"
  : >"$dir/starts"
  start_store "$dir"
  t0=$(now)
  local pids=()
  for ((i = 0; i < n; i++)); do
    on_host "$i"
    "${pre[@]}" "$CDDP" run --nnodes "${REPLACE:+$n:}$n" "${REPLACE[@]}" --rdzv-backend c10d --rdzv-endpoint "$HOST:$port" \
      --rdzv-id scale --nproc-per-node 1 --no-python sh -c "$work" >>"$dir/agents.log" 2>&1 &
    pids+=($!)
  done
  local bad=0
  for p in "${pids[@]}"; do wait "$p" || bad=$((bad + 1)); done
  local t1 cpu rss
  t1=$(now)
  read -r cpu rss < <(awk -v hz="$HZ" 'NR==1 {print ($14 + $15) / hz}' "/proc/$spid/stat" |
    tr '\n' ' '; awk '/VmHWM/ {print $2 / 1024}' "/proc/$spid/status")
  kill -TERM "$spid"; wait "$spid"
  [ "$bad" = 0 ] || echo "rdzv_scale.sh: $bad of $n agents failed (see $dir/agents.log)" >&2
  local req last
  req=$(sed -n 's/.*stopped: \([0-9]*\) requests.*/\1/p' "$dir/store.err")
  last=$(sort -n "$dir/starts" | tail -1)
  awk -v t0="$t0" -v t1="$t1" -v last="${last:-0}" -v cpu="$cpu" -v rss="$rss" -v req="${req:-0}" \
    -v bad="$bad" 'BEGIN {printf "%.2f %.2f %.2f %.1f %d %d\n", last ? last - t0 : -1, t1 - t0, cpu, rss, req, bad}'
}

printf '%-6s %-8s %-8s %-8s %-8s %-8s %-10s %-7s %-7s %-9s %s\n' agents rdzv_s exited_s cpu_s rss_MB msgs hb_msg/s hb_us comm_s comm_msgs load
for n in ${SIZES//,/ }; do
  read -r rdzv ex cpu rss req bad < <(job "$n" 0 "n$n")
  [ "${bad:-1}" = 0 ] && [ "${req:-0}" -gt 0 ] || FAILED=1
  hb=- hb_us=-
  if [ "$HB_SECS" != 0 ]; then
    read -r _ _ cpu2 _ req2 bad < <(job "$n" "$HB_SECS" "n$n-hb")
    [ "${bad:-1}" = 0 ] || FAILED=1
    hb=$(awk -v a="$req" -v b="$req2" -v n="$n" -v s="$HB_SECS" 'BEGIN {printf "%.2f", (b - a) / n / s}')
    hb_us=$(awk -v a="$req" -v b="$req2" -v c="$cpu" -v d="$cpu2" 'BEGIN {printf "%.1f", (b > a ? (d - c) * 1e6 / (b - a) : 0)}')
  fi
  comm=- comm_msgs=-
  if [ "$COMM" = 1 ]; then
    read -r comm _ _ _ req3 bad < <(job "$n" 0 "n$n-comm" comm)
    [ "${bad:-1}" = 0 ] && awk -v c="$comm" 'BEGIN {exit !(c > 0)}' || FAILED=1
    comm_msgs=$(awk -v r="$req3" -v n="$n" 'BEGIN {printf "%.1f", r / n}')
  fi
  printf '%-6s %-8s %-8s %-8s %-8s %-8s %-10s %-7s %-7s %-9s %s\n' "$n" "$rdzv" "$ex" "$cpu" "$rss" \
    "$(awk -v r="$req" -v n="$n" 'BEGIN {printf "%.1f", r / n}')" "$hb" "$hb_us" "$comm" "$comm_msgs" "$(cut -d' ' -f1 /proc/loadavg)"
done

# seen FILE REGEX BOUND_S: waits for a line; prints the seconds it took, or -1
seen() {
  local t0 t
  t0=$(now)
  while ! grep -q -- "$2" "$1" 2>/dev/null; do
    t=$(awk -v a="$t0" -v b="$(now)" 'BEGIN {print b - a}')
    awk -v t="$t" -v b="$3" 'BEGIN {exit !(t > b)}' && { echo -1; return; }
    sleep 0.02
  done
  awk -v a="$t0" -v b="$(now)" 'BEGIN {printf "%.2f", b - a}'
}
# recover N: prints "frozen_s killed_s" (-1: not seen within the bound)
recover() {
  local n=$1 dir=$OUT/recover-$1 port spid i frozen killed
  mkdir -p "$dir"
  : >"$dir/starts"
  start_store "$dir"
  local pids=()
  for ((i = 0; i < n; i++)); do
    on_host "$i"
    "${pre[@]}" "$CDDP" run --nnodes "$((n - 2)):$n" --rdzv-last-call 120 --restart-mode replace --rdzv-backend c10d \
      --rdzv-endpoint "$HOST:$port" --rdzv-id recover --nproc-per-node 1 --no-python sh -c "date +%s.%N >>'$dir/starts'; exec sleep 600" \
      >>"$dir/agents.log" 2>&1 &
    pids+=($!)
  done
  for _ in $(seq 3000); do [ "$(wc -l <"$dir/starts")" -ge "$n" ] && break; sleep 0.1; done
  if [ "$(wc -l <"$dir/starts")" -ge "$n" ]; then
    kill -STOP "${pids[$((n / 2))]}"
    frozen=$(seen "$dir/agents.log" ' lost: no heartbeat for ' 60)
    kill -KILL "${pids[$((n / 3))]}"
    killed=$(seen "$dir/agents.log" ' lost: its connection closed' 60)
    kill -KILL "${pids[$((n / 2))]}" # not thawed: it would come back as a pending node and wait
  else
    echo "rdzv_scale.sh: recover $n: only $(wc -l <"$dir/starts") workers started (see $dir/agents.log)" >&2
    frozen=-1 killed=-1
  fi
  kill -TERM "${pids[@]}" 2>/dev/null
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null; done
  kill -TERM "$spid"; wait "$spid"
  echo "$frozen $killed"
}

if [ -n "$RECOVER" ]; then
  read -r frozen killed < <(recover "$RECOVER")
  echo "recovery at $RECOVER agents (heartbeat ${CDDP_HEARTBEAT_MS:-500} ms, timeout ${CDDP_HEARTBEAT_TIMEOUT_MS:-3000} ms):" \
    "frozen -> next generation $frozen s, killed -> next generation $killed s (load $(cut -d' ' -f1 /proc/loadavg))"
  awk -v f="$frozen" -v k="$killed" 'BEGIN {exit !(f > 0 && k > 0)}' || FAILED=1
fi

if [ -n "$TORCHRUN" ]; then
  echo "torchrun (c10d, its agents are Python processes):"
  printf '%-6s %-8s %s\n' agents exited_s failed
  for n in ${TORCH_SIZES//,/ }; do
    port=$(free_port)
    t0=$(now)
    pids=()
    for ((i = 0; i < n; i++)); do
      "$TORCHRUN" --nnodes "$n" --nproc-per-node 1 --rdzv-backend c10d --rdzv-endpoint "127.0.0.1:$port" \
        --rdzv-id scale --no-python true >>"$OUT/torchrun-$n.log" 2>&1 &
      pids+=($!)
    done
    bad=0
    for p in "${pids[@]}"; do wait "$p" || bad=$((bad + 1)); done
    printf '%-6s %-8s %s\n' "$n" "$(awk -v a="$t0" -v b="$(now)" 'BEGIN {printf "%.2f", b - a}')" "$bad"
  done
fi
echo "logs: $OUT"
exit $FAILED
