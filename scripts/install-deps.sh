#!/usr/bin/env bash
# install-deps.sh - apt-get what cddp's build, tests and benchmarks need, only what is missing.
# Usage: scripts/install-deps.sh [build|test|bench]   (default: test; each includes the previous)
# `test` also makes .venv at the repository root (torch 2.x, Lightning, py-spy, pinned in
# scripts/requirements-torch.txt) from PyPI; when .venv already holds the pins it only checks them.
set -euo pipefail
what=${1:-test}
pkgs=(build-essential libssl-dev libopenblas-dev libyaml-dev zlib1g-dev dataset-fashion-mnist
      bible-kjv bible-kjv-text)
case "$what" in
  build) ;;
  test) pkgs+=(python3 clang libclang-rt-14-dev libopenmpi-dev openmpi-bin iproute2 nftables iptables
               iputils-ping slurmctld slurmd slurm-client munge gnuplot-nox python3-torch
               python3-venv) ;;
  bench) pkgs+=(clang libclang-rt-14-dev libopenmpi-dev openmpi-bin iproute2 python3-torch hyperfine iperf3) ;;
  *) echo "install-deps.sh: unknown set '$what' (build, test or bench)" >&2; exit 2 ;;
esac
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" != 0 ]; then
    echo "install-deps.sh: missing packages ${missing[*]}; run as root (or sudo) to install them" >&2
    exit 1
  fi
  echo "install-deps.sh: installing ${missing[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q -o DPkg::Lock::Timeout=600 >/dev/null
  apt-get install -y -q -o DPkg::Lock::Timeout=600 --no-install-recommends "${missing[@]}" >/dev/null
fi
[ "$what" = test ] || exit 0

# .venv: every pin in requirements-torch.txt installed at its version, or (re)installed from PyPI
root=$(cd "$(dirname "$0")/.." && pwd)
req=$root/scripts/requirements-torch.txt venv=$root/.venv
pins_held() { # the venv's python reports each NAME==VERSION of the file
  [ -x "$venv/bin/python" ] && "$venv/bin/python" - "$req" <<'PY'
import sys
from importlib.metadata import version, PackageNotFoundError
for line in open(sys.argv[1]):
    line = line.split("#")[0].strip()
    if not line:
        continue
    name, _, want = line.partition("==")
    try:
        have = version(name)
    except PackageNotFoundError:
        sys.exit(f"install-deps.sh: .venv lacks {name}")
    if have.split("+")[0] != want:
        sys.exit(f"install-deps.sh: .venv has {name} {have}, the pin is {want}")
PY
}
pins_held 2>/dev/null && exit 0
# No pip cache (it would keep a second 3.5 GB copy of the wheels); at the peak pip holds every wheel
# beside what it has unpacked: 8 GB, 5.5 GB once done. Say so before, rather than fail half-way.
need_mb=$((9000 - $( [ -d "$venv" ] && du -sm "$venv" | cut -f1 || echo 0)))
free_mb=$(df -Pm "$root" | awk 'NR == 2 { print $4 }')
if [ "${free_mb:-0}" -lt "$need_mb" ]; then
  echo "install-deps.sh: $root has $free_mb MB free; making .venv (torch 2.x) needs about $need_mb MB" >&2
  exit 1
fi
echo "install-deps.sh: installing $(grep -c '^[^#]' "$req") pinned packages (torch, lightning, py-spy and theirs) into $venv (a few minutes, 5.5 GB)" >&2
[ -x "$venv/bin/python" ] || /usr/bin/python3 -m venv "$venv"
"$venv/bin/python" -m pip install -q --disable-pip-version-check --no-cache-dir --no-deps -r "$req"
pins_held
