#!/usr/bin/env bash
# netns.sh - N test "hosts" on one machine: network namespaces wired to a bridge, with fault injection.
#
#   netns.sh up N               hosts 1..N (namespace PFX-hI, eth0 = SUBNET.I/24) on a bridge
#                               that lives in its own namespace PFX-sw
#   netns.sh down               kill what runs inside the namespaces this script made, delete them
#   netns.sh exec I CMD...      run CMD as host I
#   netns.sh addr I | name I    host I's address | namespace name
#   netns.sh rate I RATE        token-bucket limit host I's link both ways (tc tbf; 1gbit, 100mbit)
#   netns.sh unshape I          remove that limit
#   netns.sh linkdown I | linkup I   pull / plug host I's cable (its switch port)
#   netns.sh partition A B      hosts in list A (1,2) and list B (3) drop each other's packets
#   netns.sh heal [I]           remove partition rules (every host, or host I)
#   netns.sh crash I            SIGKILL every process inside host I (the namespace stays)
#   netns.sh status             namespaces, addresses, qdiscs, rules
#
# CDDP_NETNS_PREFIX (default cddp), CDDP_NETNS_SUBNET (default 10.78.0), CDDP_NETNS_STATE (default
# /tmp/cddp-netns-$UID): the record of what was made, so "down" removes exactly that.
# The root namespace gets one thing: a blackhole route for the subnet, so that a command run
# outside the hosts by mistake fails here instead of leaving the machine by the default route.
set -euo pipefail

PFX=${CDDP_NETNS_PREFIX:-cddp}
NET=${CDDP_NETNS_SUBNET:-10.78.0}
ST=${CDDP_NETNS_STATE:-/tmp/cddp-netns-$(id -u)}
SW="$PFX-sw"

say() { echo "netns: $*" >&2; }
die() { say "$*"; exit 1; }
name() { echo "$PFX-h$1"; }
addr() { echo "$NET.$1"; }
exists() { [ -e "/run/netns/$1" ]; }
made() { grep -qx "$1" "$ST/made" 2>/dev/null; }
host_ok() { [[ "$1" =~ ^[0-9]+$ ]] && exists "$(name "$1")" || die "no host '$1' (netns.sh up N first)"; }

mkns() { # NAME: create it unless present; record it only when we made it
  exists "$1" && return 0
  ip netns add "$1"
  echo "$1" >>"$ST/made"
}

up() {
  local n=${1:-2} i h
  [[ "$n" =~ ^[1-9][0-9]*$ ]] && [ "$n" -le 200 ] || die "host count '$n' must be 1..200"
  mkdir -p "$ST"
  if ! ip route show type blackhole | grep -q "^blackhole $NET.0/24"; then
    ip route add blackhole "$NET.0/24"
    touch "$ST/blackhole"
  fi
  mkns "$SW"
  ip -n "$SW" link set lo up
  ip -n "$SW" link show br0 >/dev/null 2>&1 || ip -n "$SW" link add br0 type bridge
  ip -n "$SW" link set br0 up
  for i in $(seq "$n"); do
    h=$(name "$i")
    mkns "$h"
    ip -n "$h" link set lo up          # 127.0.0.1 inside the host needs lo up
    # the veth pair is born in the switch namespace and its far end moves straight into the host
    ip -n "$h" link show eth0 >/dev/null 2>&1 || ip -n "$SW" link add "p$i" type veth peer name eth0 netns "$h"
    ip -n "$SW" link set "p$i" master br0 up
    ip -n "$h" addr replace "$(addr "$i")/24" dev eth0
    ip -n "$h" link set eth0 up
  done
  for i in $(seq "$n"); do
    for _ in $(seq 50); do ip -n "$(name "$i")" -br link show eth0 | grep -qw UP && break; sleep 0.05; done
  done
  say "up: $n hosts $(addr 1)..$(addr "$n") (state $ST)"
}

down() {
  local ns pids
  if [ -s "$ST/made" ]; then
    for ns in $(sort -u "$ST/made"); do
      exists "$ns" || continue
      pids=$(ip netns pids "$ns" 2>/dev/null | tr '\n' ' ')
      if [ -n "${pids// /}" ]; then
        # shellcheck disable=SC2086
        kill $pids 2>/dev/null || true
        sleep 0.2
        pids=$(ip netns pids "$ns" 2>/dev/null | tr '\n' ' ')
        # shellcheck disable=SC2086
        [ -z "${pids// /}" ] || kill -9 $pids 2>/dev/null || true
      fi
      ip netns del "$ns"
    done
  elif ip netns list | grep -q "^$PFX-"; then
    say "no record in $ST of making the $PFX-* namespaces; leaving them alone"
  fi
  if [ -e "$ST/blackhole" ]; then ip route del blackhole "$NET.0/24" 2>/dev/null || true; fi
  rm -f "$ST/made" "$ST/blackhole"
  say "down"
}

tbf() { # RATE -> tbf arguments; the burst must hold a 64 KiB GSO packet and rate/HZ
  local bits
  case "$1" in
    *gbit) bits=$(( ${1%gbit} * 1000000000 )) ;;
    *mbit) bits=$(( ${1%mbit} * 1000000 )) ;;
    *kbit) bits=$(( ${1%kbit} * 1000 )) ;;
    *) die "rate '$1': use an integer with kbit, mbit or gbit" ;;
  esac
  local burst=$(( bits / 8 / 100 )); [ "$burst" -ge 131072 ] || burst=131072
  echo "rate $1 burst $burst latency 20ms"
}
rate() {
  local a; a=$(tbf "$2")
  # shellcheck disable=SC2086
  tc -n "$(name "$1")" qdisc replace dev eth0 root tbf $a    # host -> switch
  # shellcheck disable=SC2086
  tc -n "$SW" qdisc replace dev "p$1" root tbf $a            # switch -> host
}
unshape() {
  tc -n "$(name "$1")" qdisc del dev eth0 root 2>/dev/null || true
  tc -n "$SW" qdisc del dev "p$1" root 2>/dev/null || true
}

drop_between() { # I J: host I drops everything to and from host J (nftables table PFX_fault)
  ip netns exec "$(name "$1")" nft -f - <<EOF
table inet ${PFX}_fault {
  chain in  { type filter hook input  priority 0; policy accept; ip saddr $(addr "$2") drop; }
  chain out { type filter hook output priority 0; policy accept; ip daddr $(addr "$2") drop; }
}
EOF
}
partition() {
  local i j
  for i in ${1//,/ }; do host_ok "$i"; for j in ${2//,/ }; do host_ok "$j"
    drop_between "$i" "$j"; drop_between "$j" "$i"
  done; done
}
heal() {
  local i
  for i in ${1:-$(ip netns list | sed -n "s/^$PFX-h\([0-9]*\).*/\1/p")}; do
    ip netns exec "$(name "$i")" nft delete table inet "${PFX}_fault" 2>/dev/null || true
  done
}
crash() {
  local pids; pids=$(ip netns pids "$(name "$1")" | tr '\n' ' ')
  # shellcheck disable=SC2086
  [ -z "${pids// /}" ] || kill -9 $pids
}

status() {
  local h
  for h in $(ip netns list | awk '{print $1}' | grep "^$PFX-h" | sort -V); do
    printf '%s (%s) %s\n' "$h" "$(made "$h" && echo ours || echo foreign)" \
      "$(ip -n "$h" -br addr show eth0 2>/dev/null | tr -s ' ')"
    tc -n "$h" qdisc show dev eth0 2>/dev/null | grep tbf | sed 's/^/  /' || true
    ip netns exec "$h" nft list tables 2>/dev/null | sed 's/^/  /'
  done
}

cmd=${1:-}; shift || true
case "$cmd" in
  up) up "${1:-2}" ;;
  down) down ;;
  exec) [ $# -ge 2 ] || die "usage: netns.sh exec I CMD..."; host_ok "$1"; h=$(name "$1"); shift; exec ip netns exec "$h" "$@" ;;
  addr) addr "${1:?host index}" ;;
  name) name "${1:?host index}" ;;
  rate) host_ok "${1:-}"; rate "$1" "${2:?rate}" ;;
  unshape) host_ok "${1:-}"; unshape "$1" ;;
  linkdown) host_ok "${1:-}"; ip -n "$SW" link set "p$1" down ;;
  linkup) host_ok "${1:-}"; ip -n "$SW" link set "p$1" up ;;
  partition) partition "${1:?hosts A}" "${2:?hosts B}" ;;
  heal) heal "${1:-}" ;;
  crash) host_ok "${1:-}"; crash "$1" ;;
  status) status ;;
  *) sed -n '2,/^set -euo/{/^#/s/^# \{0,1\}//p}' "$0" >&2; exit 2 ;;
esac
