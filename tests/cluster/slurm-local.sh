#!/usr/bin/env bash
# slurm-local.sh - a throw-away Slurm cluster (munge + slurmctld + N slurmd) on this one machine, for tests.
#
#   slurm-local.sh install        install Slurm and munge (scripts/install-deps.sh test)
#   slurm-local.sh up N           loopback: N slurmd (node1..nodeN) on 127.0.0.1, one port each
#   slurm-local.sh up-netns N     one slurmd per network-namespace host (tests/cluster/netns.sh);
#                                 host i is "nodei" at SUBNET.i, slurmctld runs in host 1
#   slurm-local.sh run CMD...     run a client (srun, sbatch, sinfo...) against the cluster
#   slurm-local.sh status         daemons and sinfo
#   slurm-local.sh down           stop what this script started (pid files in the state dir)
#   slurm-local.sh env            print the export line a shell needs to use the cluster
#
# State (config, munge key and socket, spool, logs, pids) lives in $CDDP_SLURM_STATE, which the
# caller chooses (default: /tmp/cddp-slurm-$UID); nothing is written to /etc or to the repo.
# CDDP_SLURM_PORT: slurmctld port (default: a free one, picked at "up"); slurmd i uses PORT+i.
# CDDP_SLURM_CPUS: CPUs each node claims (default 2). Node names never go through DNS: in
# loopback mode every node's address is 127.0.0.1; in netns mode a private /etc/hosts maps them.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
NETNS="$ROOT/tests/cluster/netns.sh"
ST=${CDDP_SLURM_STATE:-/tmp/cddp-slurm-$(id -u)}
CONF="$ST/slurm.conf"
export SLURM_CONF="$CONF"
# the namespace hosts this cluster uses (netns mode) live in their own state dir, beside ours
export CDDP_NETNS_STATE=${CDDP_NETNS_STATE:-$ST/netns}

say() { echo "slurm-local: $*" >&2; }
die() { say "$*"; exit 1; }
now_ms() { date +%s%3N; }

# ---- processes: a pid is ours only while its command line names our state dir
pid_of() { # PIDFILE -> prints the pid when that process is alive, not a zombie, and ours
  local p
  p=$(cat "$1" 2>/dev/null) || return 1
  [ -n "$p" ] && [ -r "/proc/$p/cmdline" ] || return 1
  [ "$(awk '{print $3}' "/proc/$p/stat" 2>/dev/null)" != Z ] || return 1
  tr '\0' ' ' <"/proc/$p/cmdline" | grep -qF -- "$ST" || return 1
  echo "$p"
}
stop() { # PIDFILE: TERM, wait up to 5 s, then KILL
  local p i
  if p=$(pid_of "$1"); then
    kill "$p" 2>/dev/null || true
    for i in $(seq 50); do pid_of "$1" >/dev/null || break; sleep 0.1; done
    if pid_of "$1" >/dev/null; then kill -9 "$p" 2>/dev/null || true; fi
  fi
  rm -f "$1"
}

mode() { cat "$ST/mode" 2>/dev/null || echo down; }

port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
pick_port() { # N -> a base port P with P..P+N free (for slurmctld and N slurmd)
  local n=$1 base i ok
  for base in $(shuf -i 20000-29000 -n 40); do
    ok=1
    for i in $(seq 0 "$n"); do port_free $((base + i)) || { ok=0; break; }; done
    [ $ok = 1 ] && { echo "$base"; return 0; }
  done
  die "no free port range found"
}

# ---- munge with its own key, socket and pid file under the state dir
munge_up() {
  local m="$ST/munge"
  mkdir -p "$m" && chmod 755 "$m"                # munged wants o+x on the socket's directory
  [ -s "$m/key" ] || { head -c 1024 /dev/urandom >"$m/key"; chmod 400 "$m/key"; }
  pid_of "$m/pid" >/dev/null && return 0
  munged --socket="$m/socket" --key-file="$m/key" --pid-file="$m/pid" \
         --log-file="$m/log" --seed-file="$m/seed"
}

write_conf() { # CTLD_NAME CTLD_ADDR NODE_LINES...
  local name=$1 addr=$2; shift 2
  {
    echo "# written by tests/cluster/slurm-local.sh"
    echo "ClusterName=cddptest"
    echo "SlurmctldHost=$name($addr)"
    echo "SlurmctldPort=$(cat "$ST/port")"
    echo "SlurmUser=root"
    echo "SlurmdUser=root"
    echo "AuthType=auth/munge"
    echo "CredType=cred/munge"
    echo "AuthInfo=socket=$ST/munge/socket"
    echo "StateSaveLocation=$ST/ctld"
    echo "SlurmdSpoolDir=$ST/spool/%n"
    echo "SlurmctldPidFile=$ST/pid/slurmctld.pid"
    echo "SlurmdPidFile=$ST/pid/slurmd-%n.pid"
    echo "SlurmctldLogFile=$ST/log/slurmctld.log"
    echo "SlurmdLogFile=$ST/log/slurmd-%n.log"
    # linuxproc + task/none: no cgroup plugin to set up (and none is visible inside a netns)
    echo "ProctrackType=proctrack/linuxproc"
    echo "TaskPlugin=task/none"
    echo "JobAcctGatherType=jobacct_gather/none"
    echo "AccountingStorageType=accounting_storage/none"
    echo "SelectType=select/cons_tres"
    echo "SelectTypeParameters=CR_CPU"
    echo "MpiDefault=none"
    echo "MailProg=/bin/true"
    echo "SlurmdParameters=config_overrides"   # nodes may claim more CPUs than the machine has
    echo "ReturnToService=2"
    echo "SlurmctldTimeout=10"
    echo "SlurmdTimeout=10"
    echo "MessageTimeout=5"
    echo "InactiveLimit=0"
    echo "KillWait=2"
    echo "Waittime=0"
    echo "MinJobAge=30"
    echo "SchedulerParameters=batch_sched_delay=0,sched_min_interval=0"
    printf '%s\n' "$@"
    echo "PartitionName=test Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4"
  } >"$CONF"
}

hw() { local c=${CDDP_SLURM_CPUS:-2}; echo "CPUs=$c Boards=1 SocketsPerBoard=1 CoresPerSocket=$c ThreadsPerCore=1 RealMemory=1000"; }

client() { # run a Slurm client against this cluster (inside host 1 in netns mode)
  if [ "$(mode)" = netns ]; then in_host 1 "$@"; else "$@"; fi
}

wait_ready() { # N: every node idle and a step runs on all of them (30 s bound)
  local n=$1 t0 i; t0=$(now_ms)
  for i in $(seq 300); do
    if [ "$(client sinfo -h -N -t idle -o %N 2>/dev/null | sort -u | wc -l)" -ge "$n" ] &&
       client timeout 20 srun -N"$n" -n"$n" true 2>/dev/null; then
      say "$n nodes ready after $(($(now_ms) - t0)) ms"; return 0
    fi
    sleep 0.1
  done
  client sinfo -N >&2 || true
  die "nodes not ready after 30 s; logs in $ST/log"
}

prepare() { # N: fresh dirs, a port range, munge
  local n=$1
  [ "$(mode)" = down ] || die "already up ($(mode) mode, state $ST); run down first"
  command -v slurmctld >/dev/null && command -v munged >/dev/null ||
    die "Slurm is not installed (tests/cluster/slurm-local.sh install)"
  mkdir -p "$ST"/{ctld,spool,log,pid}
  chmod a+x "$ST"                               # munged wants every directory above its socket o+x
  # A fresh controller numbers jobs from 1 again, so the slurmds' spools must go too: a
  # slurmd remembers revoked credentials by job id there and would refuse the new job 1
  # ("Job credential revoked").
  rm -rf "${ST:?}/ctld"/* "${ST:?}/spool"/* 2>/dev/null || true
  echo "${CDDP_SLURM_PORT:-$(pick_port $((n + 1)))}" >"$ST/port"
  munge_up
}

up_loopback() {
  local n=${1:-2} port i
  prepare "$n"; port=$(cat "$ST/port")
  echo loopback >"$ST/mode"
  write_conf "$(hostname)" 127.0.0.1 \
    "NodeName=node[1-$n] NodeHostname=$(hostname) NodeAddr=127.0.0.1 Port=$((port + 1))-$((port + n)) $(hw) State=UNKNOWN"
  slurmctld -f "$CONF" -i
  for i in $(seq "$n"); do mkdir -p "$ST/spool/node$i"; slurmd -f "$CONF" -N "node$i"; done
  wait_ready "$n"
}

# host I of the netns cluster as node I: own network, hostname nodeI, private /etc/hosts.
# nsenter --net (not "ip netns exec", which remounts /sys and hides the cgroup fs slurmd probes).
in_host() { # I CMD...
  local i=$1; shift
  nsenter --net="/run/netns/$("$NETNS" name "$i")" unshare --uts --mount -- /bin/sh -c \
    'hostname "$1" && mount --bind "$2" /etc/hosts && shift 2 && exec "$@"' sh "node$i" "$ST/hosts" "$@"
}

up_netns() {
  local n=${1:-2} i lines=()
  prepare "$n"
  "$NETNS" up "$n"
  echo netns >"$ST/mode"
  { echo "127.0.0.1 localhost"; for i in $(seq "$n"); do echo "$("$NETNS" addr "$i") node$i"; done; } >"$ST/hosts"
  for i in $(seq "$n"); do lines+=("NodeName=node$i NodeAddr=$("$NETNS" addr "$i") Port=$(($(cat "$ST/port") + 1)) $(hw) State=UNKNOWN"); done
  write_conf node1 "$("$NETNS" addr 1)" "${lines[@]}"
  in_host 1 slurmctld -f "$CONF" -i
  for i in $(seq "$n"); do mkdir -p "$ST/spool/node$i"; in_host "$i" slurmd -f "$CONF"; done
  wait_ready "$n"
}

down() {
  local f i
  if pid_of "$ST/pid/slurmctld.pid" >/dev/null; then
    client scancel --full -u "$(id -un)" 2>/dev/null || true
    for i in $(seq 25); do [ -z "$(client squeue -h 2>/dev/null)" ] && break; sleep 0.2; done
  fi
  for f in "$ST"/pid/slurmd-*.pid; do [ -e "$f" ] && stop "$f"; done
  stop "$ST/pid/slurmctld.pid"
  stop "$ST/munge/pid"
  [ "$(mode)" = netns ] && "$NETNS" down
  rm -f "$ST/mode"
  say "down"
}

status() {
  local f p n
  echo "mode: $(mode)  state: $ST"
  for f in "$ST/munge/pid" "$ST"/pid/*.pid; do
    [ -e "$f" ] || continue
    n=$(basename "$f" .pid); [ "$n" = pid ] && n=munged
    if p=$(pid_of "$f"); then echo "  $n: pid $p"; else echo "  $n: gone"; fi
  done
  [ "$(mode)" = down ] || client sinfo -N
}

cmd=${1:-}; shift || true
case "$cmd" in
  install) "$ROOT/scripts/install-deps.sh" test ;;
  up) up_loopback "${1:-2}" ;;
  up-netns) up_netns "${1:-2}" ;;
  run) [ "$(mode)" != down ] || die "not up (state $ST)"; client "$@" ;;
  status) status ;;
  down) down ;;
  env) echo "export SLURM_CONF=$CONF" ;;
  *) sed -n '2,/^set -euo/{/^#/s/^# \{0,1\}//p}' "$0" >&2; exit 2 ;;
esac
