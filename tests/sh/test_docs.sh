#!/usr/bin/env bash
# test_docs.sh - docs that match the code: every file under src/ is listed in
# docs/architecture.md under its own folder; every environment knob in src/common/knobs.h and
# every log subsystem in src/common/log.h is in docs/knobs.md; every file a doc names under
# src/ or include/ exists; the count of exported functions it gives is nm -D's.
cd "$(dirname "$0")/../.." && source tests/sh/lib.sh
missing=""
for f in $(cd src && find . -name '*.c' -o -name '*.h' | sed 's|^\./||' | sort); do
  dir=$(dirname "$f"); base=$(basename "$f")
  # the file's line, inside the block of its folder ("app/launcher: ..." or "comm: ...")
  awk -v d="$dir:" -v b="$base" '$1 == d { on = 1; next } /^[a-z\/]+: / { on = 0 } on && $1 == b { found = 1 } END { exit !found }' \
    docs/architecture.md || missing="$missing src/$f"
done
[ -z "$missing" ] && ok "every file under src/ is in docs/architecture.md, under its folder" ||
  fail "docs/architecture.md lacks" "$missing"
knobs=$(sed -n 's/.*X([A-Z_]*, "\(CDDP_[A-Z_]*\)".*/\1/p' src/common/knobs.h)
nk=0; lacking=""
for k in $knobs; do nk=$((nk + 1)); grep -q "\`$k\`" docs/knobs.md || lacking="$lacking $k"; done
[ -z "$lacking" ] && [ "$nk" -gt 10 ] && ok "docs/knobs.md lists all $nk knobs" || fail "docs/knobs.md lacks" "$lacking"
subs=$(sed -n 's/.*CDDP_SUBSYS_MAP(X)//p; /X([A-Z]*, [0-9]*)/p' src/common/log.h | grep -o 'X([A-Z]*,' | tr -d 'X(,')
lacking=""
for s in $subs; do grep -q "CDDP_DEBUG_SUBSYS.*[^A-Z]$s[^A-Z]" docs/knobs.md || lacking="$lacking $s"; done
# an empty list (log.h's X-macro reshaped) would pass everything: there are more than 5
[ -z "$lacking" ] && [ "$(echo $subs | wc -w)" -gt 5 ] && ok "docs/knobs.md names every log subsystem ($(echo $subs | tr ' ' ','))" || fail "log subsystems missing from docs/knobs.md" "found [$(echo $subs)], lacking [$lacking]"
dead=""
for p in $(grep -ohE '`(src|include)/[a-zA-Z0-9_/.-]+\.(c|h|map|in)`' docs/*.md README.md | tr -d '`' | sort -u); do
  [ -e "$p" ] || dead="$dead $p"
done
[ -z "$dead" ] && ok "every src/ and include/ path the docs name exists" || fail "docs name missing files" "$dead"
# the count of exported functions docs/architecture.md gives is the shared library's own
said=$(sed -n 's/.*`nm -D --defined-only build\/libcddp.so`: \([0-9]*\) functions.*/\1/p' docs/architecture.md)
if [ -f build/libcddp.so ]; then
  n=$(nm -D --defined-only build/libcddp.so | awk '$2 == "T" && $3 ~ /^cddp_[a-z]/' | wc -l)
  [ -n "$said" ] && [ "$said" = "$n" ] && ok "docs/architecture.md's count of exported functions is nm -D's ($n)" ||
    fail "docs/architecture.md says ${said:-no count of} exported functions" "nm -D counts $n"
else fail "no build/libcddp.so to count exported functions in" "make lib first"; fi
finish
