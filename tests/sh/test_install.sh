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
for f in bin/cddp lib/libcddp.a lib/libcddp.so lib/libcddp.so.0 include/cddp/cddp.h include/cddp/ddp.h \
         include/cddp/comm.h include/cddp/store.h include/cddp/env.h include/cddp/ckpt.h lib/pkgconfig/cddp.pc; do
  [ -e "$P/$f" ] || missing="$missing $f"
done
real=$(readlink -f "$P/lib/libcddp.so")
soname=$(readelf -d "$real" | sed -n 's/.*Library soname: \[\(.*\)\]/\1/p')
[ -z "$missing" ] && [ "$soname" = libcddp.so.0 ] && [ -f "$real" ] && ok "installed: binary, headers, cddp.pc, $(basename "$real") (soname $soname)" ||
  fail "installed files" "missing:$missing; soname '$soname'"

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
