#!/usr/bin/env bash
# test_store_host_bench.sh - bench/store_host_bench.sh runs small: the store-hosting launcher is
# killed, and the row says what the survivor did (today: it ends, naming the lost store), and
# bad flags get one line.
cd "$(dirname "$0")/../.." && source tests/sh/lib.sh
T=$(mktemp -d /tmp/cddp-store-host-test.XXXXXX)
trap 'rm -rf "$T"' EXIT
timeout 300 bench/store_host_bench.sh --kill-at 10 --rows cddp --out "$T" >"$T/out" 2>"$T/err"; rc=$?
row=$(grep '^cddp ' "$T/out")
if [ $rc = 0 ] && [[ "$row" =~ ^cddp\ +[0-9]+\ +[0-9]+\ of\ 224\ +[0-9.]+\ +cddp\ run: ]] && grep -q 'store' <<<"$row"
then ok "the store's host killed: the row gives the survivor's exit, steps, time and its line about the store"
else fail "store host bench" "rc $rc: $(cat "$T/out" "$T/err" | tail -4 | tr '\n' ' ')"; fi
bench/store_host_bench.sh --kill-at 0 >"$T/bad" 2>&1; rc=$?
[ $rc = 2 ] && [ "$(grep -c . "$T/bad")" = 1 ] && grep -q -- '--kill-at' "$T/bad" && ok "bad input: --kill-at 0" || fail "bad --kill-at" "rc $rc: $(cat "$T/bad")"
finish
