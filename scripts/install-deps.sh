#!/usr/bin/env bash
# install-deps.sh - apt-get what cddp's build, tests and benchmarks need, only what is missing.
# Usage: scripts/install-deps.sh [build|test|bench]   (default: test; each includes the previous)
set -euo pipefail
what=${1:-test}
pkgs=(build-essential libssl-dev libopenblas-dev libyaml-dev zlib1g-dev dataset-fashion-mnist
      bible-kjv bible-kjv-text)
case "$what" in
  build) ;;
  test) pkgs+=(python3 clang libclang-rt-14-dev libopenmpi-dev openmpi-bin iproute2 nftables iptables
               iputils-ping slurmctld slurmd slurm-client munge gnuplot-nox python3-torch) ;;
  bench) pkgs+=(clang libclang-rt-14-dev libopenmpi-dev openmpi-bin iproute2 python3-torch hyperfine iperf3) ;;
  *) echo "install-deps.sh: unknown set '$what' (build, test or bench)" >&2; exit 2 ;;
esac
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" != 0 ]; then
  echo "install-deps.sh: missing packages ${missing[*]}; run as root (or sudo) to install them" >&2
  exit 1
fi
echo "install-deps.sh: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -q -o DPkg::Lock::Timeout=600 >/dev/null
apt-get install -y -q -o DPkg::Lock::Timeout=600 --no-install-recommends "${missing[@]}" >/dev/null
