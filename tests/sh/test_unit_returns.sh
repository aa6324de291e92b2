#!/usr/bin/env bash
# test_unit_returns.sh - no C test passes by returning early: inside a TEST body of tests/unit,
# a `return` must follow (within its 3 lines before) a skip (CDDP_TEST_SKIP) or a real check
# (CHECK*, TEST_FAIL), as issue 32's grep asks; otherwise the harness counts it as a pass.
cd "$(dirname "$0")/../.." && source tests/sh/lib.sh
T=$(mktemp -d /tmp/cddp-unit-returns.XXXXXX)
trap 'rm -rf "$T"' EXIT
# early_returns FILE...: "file:line: text" for every unchecked return in a TEST body
early_returns() {
  awk '
    FNR == 1 { body = 0 }
    /^TEST[A-Z_]*\(.*}[ \t]*$/ { next } # a one-line body
    /^TEST[A-Z_]*\(/ { body = 1; n = 0; next }
    body && /^}/ { body = 0; next }
    body {
      n++; line[n] = $0
      if ($0 ~ /(^|[^a-z_])return([^a-z_]|$)/) {
        seen = 0
        for (i = n; i >= 1 && i > n - 4; i--) if (line[i] ~ /CDDP_TEST_SKIP|CHECK|TEST_FAIL/) seen = 1
        if (!seen) print FILENAME ":" FNR ": " $0
      }
    }' "$@"
}
bad=$(early_returns tests/unit/test_*.c)
n=$(grep -c '^TEST[A-Z_]*(' tests/unit/test_*.c | awk -F: '{ s += $2 } END { print s }')
[ -z "$bad" ] && [ "$n" -gt 100 ] && ok "no early return in the $n tests of tests/unit that is not a skip or a check" ||
  fail "early returns in tests/unit (make each a CDDP_TEST_SKIP or a check)" "$(echo "$bad" | head -5 | tr '\n' ';') of $n tests"
# the rule itself catches a bare early return, and lets a skip, a checked return and a helper's through
cat >"$T/test_x.c" <<'C'
static int helper(int x) { if (x) return 1; return 0; }
TEST(one_line) { CHECK(helper(0) == 0); }
static void *rank_body(void *a) { return NULL; }
TEST(skips) {
  if (!have()) CDDP_TEST_SKIP("[cpu:x] needs it");
  CHECK(helper(1));
}
TEST(checked) {
  if (env) {
    CHECK_EQ(a, b);
    return;
  }
}
TEST(passes_by_returning) {
  if (!have())
    return;
  CHECK(1);
}
C
got=$(early_returns "$T/test_x.c")
[ "$got" = "$T/test_x.c:16:     return;" ] && ok "the rule finds a bare early return and only it" || fail "the rule" "found: $got"
finish
