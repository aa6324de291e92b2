#!/usr/bin/env bash
# test_install.sh - libcddp as a library: make install into a prefix puts the binary, the shared
# library with its soname, the headers and cddp.pc in place; examples/train_linear.c, built
# outside the tree with `pkg-config --cflags --libs cddp` against the installed shared library,
# trains with 2 ranks under the installed `cddp run`; the library exports only the public
# cddp_ API and needs no BLAS or YAML; make uninstall removes everything it installed.
cd "$(dirname "$0")/../.." && source tests/sh/lib.sh
T=$(mktemp -d /tmp/cddp-install.XXXXXX)
trap 'rm -rf "$T"' EXIT
P=$T/prefix
if make --no-print-directory install PREFIX="$P" >"$T/install.log" 2>&1; then ok "make install PREFIX=..."
else fail "make install" "$(tail -3 "$T/install.log" | tr '\n' ' ')"; finish; fi
missing=""
for f in bin/cddp libexec/cddp/cddp-full lib/libcddp.a lib/libcddp.so lib/libcddp.so.0 include/cddp/cddp.h include/cddp/ddp.h \
         include/cddp/comm.h include/cddp/store.h include/cddp/env.h include/cddp/ckpt.h lib/pkgconfig/cddp.pc; do
  [ -e "$P/$f" ] || missing="$missing $f"
done
real=$(readlink -f "$P/lib/libcddp.so")
soname=$(readelf -d "$real" | sed -n 's/.*Library soname: \[\(.*\)\]/\1/p')
[ -z "$missing" ] && [ "$soname" = libcddp.so.0 ] && [ -f "$real" ] && ok "installed: binary, headers, cddp.pc, $(basename "$real") (soname $soname)" ||
  fail "installed files" "missing:$missing; soname '$soname'"
# one version everywhere: the Makefile's, the library's file, cddp.pc, `cddp --version`, the
# header's macros and what a checkpoint records (0.1.0 was left in cddp.h once)
V=$(sed -n 's/^VERSION *:= *//p' Makefile)
"$P/bin/cddp" train --config configs/fmnist_mlp.yaml --work-dir "$T/runs" --name v --set model.hidden=[16] \
  --set train.max_steps=2 --set checkpoint.every_steps=2 --set eval.every_epoch=false >"$T/v.out" 2>&1
ck=$(grep -aho '"cddp_version" *: *"[^"]*"' "$T"/runs/v/checkpoints/step-000000002/* 2>/dev/null | head -1 | sed 's/.*: *"//; s/"$//')
hv=$(printf '#include <cddp/cddp.h>\nCDDP_VERSION_MAJOR CDDP_VERSION_MINOR CDDP_VERSION_PATCH CDDP_VERSION_STRING\n' |
     cc -E -P -I"$P/include" - 2>/dev/null | tail -1)
if [ -n "$V" ] && [ "$("$P/bin/cddp" --version | head -1)" = "cddp $V" ] && [ "$(basename "$real")" = "libcddp.so.$V" ] &&
   grep -qx "Version: $V" "$P/lib/pkgconfig/cddp.pc" && [ "$ck" = "$V" ] && [ "$hv" = "${V//./ } \"$V\"" ]
then ok "version $V alike: cddp --version, libcddp.so.$V, cddp.pc, the installed header, a checkpoint's cddp_version"
else fail "one version" "Makefile '$V', --version '$("$P/bin/cddp" --version | head -1)', lib $(basename "$real"), header '$hv', checkpoint '$ck'"; fi

# only the public API leaves the shared library, and it needs no BLAS or YAML
bad=$(nm -D --defined-only "$real" | awk '$2 ~ /[TDBRVW]/ { print $3 }' | sed 's/@.*//' | grep -v '^cddp_[a-z]' | grep -v '^CDDP_0$')
n=$(nm -D --defined-only "$real" | awk '$2 == "T"' | grep -c ' cddp_[a-z]')
needed=$(readelf -d "$real" | sed -n 's/.*Shared library: \[\(.*\)\]/\1/p' | tr '\n' ' ')
if [ -z "$bad" ] && [ "$n" -gt 50 ] && ! grep -q "openblas\|yaml\|blas" <<<"$needed"; then
  ok "libcddp.so exports $n cddp_ functions and nothing else; needs: $needed"
else fail "exports/needs" "non-API symbols: $(echo $bad | head -c 300); needs: $needed"; fi

# a user's program, outside the tree, through pkg-config, against the installed shared library
mkdir -p "$T/user" && cp examples/train_linear.c "$T/user/"
flags=$(PKG_CONFIG_PATH=$P/lib/pkgconfig pkg-config --cflags --libs cddp 2>&1)
(cd "$T/user" && cc -O2 train_linear.c $flags -lm -o train_linear) >"$T/cc.log" 2>&1; rc=$?
if [ $rc = 0 ] && readelf -d "$T/user/train_linear" | grep -q "Shared library: \[libcddp.so.0\]"; then
  ok "examples/train_linear.c built outside the tree with pkg-config ($flags)"
else fail "pkg-config build" "rc=$rc: $(head -3 "$T/cc.log" | tr '\n' ' ')"; fi
out=$(cd "$T/user" && LD_LIBRARY_PATH=$P/lib timeout 60 "$P/bin/cddp" run --standalone --nproc-per-node 2 ./train_linear "$T/run" 20 2>&1); rc=$?
if [ $rc = 0 ] && grep -q "weights checksum" <<<"$out"; then ok "the installed cddp runs it: 2 ranks, 20 steps"
else fail "installed run" "rc=$rc: $(tail -3 <<<"$out" | tr '\n' ' ')"; fi
"$P/bin/cddp" run --help >/dev/null 2>&1 && ok "installed cddp answers --help" || fail "installed --help"

make --no-print-directory uninstall PREFIX="$P" >"$T/uninstall.log" 2>&1
left=$(find "$P" -type f -o -type l | sed "s|^$P/||")
[ -z "$left" ] && ok "make uninstall removes all of it" || fail "uninstall" "left: $(echo $left)"
finish
