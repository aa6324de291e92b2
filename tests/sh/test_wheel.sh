#!/usr/bin/env bash
# test_wheel.sh - `pip install cddp` from the repository: `pip wheel .` builds a wheel (pyproject.toml,
# scripts/wheel/cddp_wheel.py), installed into a fresh venv that sees .venv's torch 2.x (a .pth
# file: torch is not downloaded again), it puts cddp on the venv's PATH and libcddp, its headers
# and cddp.pc in its prefix; `cddp run --standalone --nproc-per-node 2 train.py` runs from there
# with the venv's own python3; pip uninstall takes it all away. Reuses build/ (WERROR=1, as run.sh).
cd "$(dirname "$0")/../.." && source tests/sh/lib.sh
ROOT=$PWD PY=$PWD/.venv/bin/python
if ! "$PY" -c 'import torch.distributed, pip' 2>/dev/null; then
  echo "ok 1 - $t_name # SKIP $PY has no torch (scripts/install-deps.sh test)"; exit 0
fi
T=$(mktemp -d /tmp/cddp-wheel.XXXXXX)
trap 'rm -rf "$T"' EXIT

CDDP_WHEEL_BUILD=build CDDP_WHEEL_MAKEFLAGS=WERROR=1 timeout 600 "$PY" -m pip wheel . -w "$T/dist" --no-deps \
  --no-build-isolation -q --disable-pip-version-check >"$T/wheel.log" 2>&1
whl=$(ls "$T"/dist/cddp-*.whl 2>/dev/null)
[ -n "$whl" ] && ok "pip wheel . builds $(basename "$whl")" || { fail "pip wheel ." "$(tail -3 "$T/wheel.log" | tr '\n' ' ')"; finish; }

"$PY" -m venv "$T/v" && site=$("$T/v/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])') &&
  "$PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])' >"$site/torch-venv.pth" &&
  "$T/v/bin/python" -m pip install -q --no-index --disable-pip-version-check "$whl" >"$T/install.log" 2>&1
if [ -x "$T/v/bin/cddp" ] && [ -f "$T/v/lib/libcddp.so.0" ] && [ -f "$T/v/include/cddp/cddp.h" ] &&
   [ "$(PKG_CONFIG_PATH=$T/v/lib/pkgconfig pkg-config --variable=includedir cddp 2>/dev/null | xargs realpath 2>/dev/null)" = "$(realpath "$T/v/include")" ]
then ok "pip install: cddp in the venv's bin, libcddp, headers and a relocatable cddp.pc in its prefix"
else fail "pip install" "$(ls "$T/v/bin" | tr '\n' ' ') $(tail -2 "$T/install.log" | tr '\n' ' ')"; fi

cp tests/torch/allreduce.py "$T/train.py"
out=$(cd "$T" && env -u CDDP_PYTHON PATH="$T/v/bin:$PATH" bash -c 'command -v cddp; timeout 120 cddp run --standalone --nproc-per-node 2 train.py' 2>&1); rc=$?
n=$(grep -c 'allreduce ok rank [01] of 2' <<<"$out")
if [ $rc = 0 ] && [ "$n" = 2 ] && [ "$(head -1 <<<"$out")" = "$T/v/bin/cddp" ]; then
  ok "from the venv: cddp run --standalone --nproc-per-node 2 train.py (its python3, torch $("$T/v/bin/python" -c 'import torch; print(torch.__version__)'))"
else fail "cddp run from the venv" "rc $rc, $n ranks: $(tail -3 <<<"$out" | tr '\n' ' ')"; fi

"$T/v/bin/python" -m pip uninstall -y -q cddp >/dev/null 2>&1
[ ! -e "$T/v/bin/cddp" ] && [ ! -e "$T/v/lib/libcddp.so.0" ] && ok "pip uninstall cddp removes it" || fail "pip uninstall" "$(ls "$T/v/bin")"
finish
