#!/usr/bin/env bash
# test_ckpt.sh - `cddp ckpt info|verify`: on checkpoints written by the library, compared with an
# independent Python reader of the safetensors spec; corrupt ones named; bad usage; SIGKILL of a
# writer at random instants always leaves a verifiable latest checkpoint.
source "$(dirname "$0")/lib.sh"
WRITER=${WRITER:-$PWD/build/tests/helpers/ckpt_writer}
PY=$(command -v python3 || echo /usr/bin/python3)
tmp=$(mktemp -d /tmp/cddp-ckpt-sh.XXXXXX)
wpid=
trap '[ -n "$wpid" ] && kill -9 $wpid 2>/dev/null; rm -rf "$tmp"' EXIT
root=$tmp/run/checkpoints

"$WRITER" "$root" 1 3 2 16 >/dev/null 2>"$tmp/werr"
if [ "$(ls "$root")" = "$(printf 'step-000000002\nstep-000000003')" ]; then ok "writer saved 3 steps, keep 2 left the last two"
else fail "keep 2" "$(ls -a "$root"; cat "$tmp/werr")"; fi

out=$("$CDDP" ckpt verify "$root"); rc=$?
if [ $rc -eq 0 ] && [ "$out" = "ok $root/step-000000003 (step 3)" ]; then ok "verify ROOT picks the newest: $out"
else fail "verify ROOT" "rc=$rc $out"; fi

"$CDDP" ckpt info "$root/step-000000003" >"$tmp/info"; rc=$?
if [ $rc -eq 0 ] && grep -q '^verify: ok$' "$tmp/info" && grep -q '^step: 3$' "$tmp/info" &&
   grep -q 'tensor model.safetensors fc1.weight F32 \[16, 1024\]' "$tmp/info"; then ok "info prints step, shapes, verify status"
else fail "info" "rc=$rc $(cat "$tmp/info")"; fi

# the independent reader accepts the files and sees the same names, shapes, sums and metadata
if "$PY" tests/ref/check_safetensors.py "$root/step-000000003/model.safetensors" "$root/step-000000003/state.safetensors" >"$tmp/py" 2>"$tmp/pyerr"; then
  grep -E '^  (tensor|meta) ' "$tmp/info" | sed 's/^  //' >"$tmp/c"
  if [ -s "$tmp/c" ] && diff "$tmp/c" "$tmp/py" >"$tmp/diff"; then ok "Python spec reader agrees with cddp ckpt info ($(wc -l <"$tmp/py") lines)"
  else fail "Python spec reader agrees" "$(cat "$tmp/diff")"; fi
else fail "Python spec reader accepts the files" "$(cat "$tmp/pyerr")"; fi

# the Python reader rejects what the spec forbids (it is a real check, not an echo)
cp "$root/step-000000003/model.safetensors" "$tmp/trunc.safetensors"
truncate -s -4 "$tmp/trunc.safetensors"
if ! "$PY" tests/ref/check_safetensors.py "$tmp/trunc.safetensors" >/dev/null 2>"$tmp/pyerr" && grep -q "data section" "$tmp/pyerr"; then
  ok "Python reader rejects a truncated file: $(cat "$tmp/pyerr")"
else fail "Python reader rejects a truncated file" "$(cat "$tmp/pyerr")"; fi

# a flipped byte: verify of that dir fails naming the file; verify of the root falls back, with a warning
"$WRITER" "$root" 4 1 0 16 >/dev/null 2>&1
f=$root/step-000000004/state.safetensors
printf '\x7f' | dd of="$f" bs=1 seek=$(( $(stat -c %s "$f") - 10 )) conv=notrunc 2>/dev/null
err=$("$CDDP" ckpt verify "$root/step-000000004" 2>&1); rc=$?
if [ $rc -eq 1 ] && [ "$(echo "$err" | wc -l)" -eq 1 ] && echo "$err" | grep -q "step-000000004 is corrupt: state.safetensors: CRC-32"; then
  ok "corrupt dir: exit 1, one line: $err"
else fail "corrupt dir" "rc=$rc $err"; fi
# verify ROOT (or the run folder) checks the newest: corrupt, it is an error, not a silent fallback
for p in "$root" "$tmp/run"; do
  out=$("$CDDP" ckpt verify "$p" 2>"$tmp/err"); rc=$?
  if [ $rc -eq 1 ] && [ -z "$out" ] && [ "$(wc -l <"$tmp/err")" -eq 1 ] &&
     grep -q "step-000000004 is corrupt: state.safetensors: CRC-32 .*(the newest under the root; --resume-from latest would fall back" "$tmp/err"; then
    ok "verify $([ "$p" = "$root" ] && echo ROOT || echo RUN_DIR) with a corrupt newest checkpoint: exit 1, one line naming it"
  else fail "verify $p with a corrupt newest" "rc=$rc $out $(cat "$tmp/err")"; fi
done
out=$("$CDDP" ckpt info "$tmp/run" 2>"$tmp/err"); rc=$?
if [ $rc -eq 0 ] && grep -q '^step: 3$' <<<"$out" && grep -q "step-000000004 is corrupt: state.safetensors: CRC-32 .*, using step-000000003" "$tmp/err"; then
  ok "info RUN_DIR: the newest complete checkpoint (step 3), the corrupt newer one reported"
else fail "info RUN_DIR" "rc=$rc $out $(cat "$tmp/err")"; fi
"$CDDP" ckpt info "$root/step-000000004" >"$tmp/info" 2>"$tmp/err"; rc=$?
if [ $rc -eq 1 ] && grep -q "^verify: FAILED: .*CRC-32" "$tmp/info"; then ok "info on a corrupt dir: exit 1, verify FAILED line"
else fail "info on a corrupt dir" "rc=$rc $(cat "$tmp/info" "$tmp/err")"; fi

rm "$root/step-000000003/DONE"
err=$("$CDDP" ckpt verify "$root/step-000000003" 2>&1); rc=$?
if [ $rc -eq 1 ] && echo "$err" | grep -q "step-000000003 is incomplete (no DONE)"; then ok "no DONE: $err"
else fail "no DONE" "rc=$rc $err"; fi

# bad usage and bad paths
for args in "" "info" "frob $root" "verify a b"; do
  # shellcheck disable=SC2086
  err=$("$CDDP" ckpt $args 2>&1); rc=$?
  if [ $rc -eq 2 ] && [ "$(echo "$err" | wc -l)" -eq 1 ]; then ok "usage 'ckpt $args': exit 2, one line"
  else fail "usage 'ckpt $args'" "rc=$rc $err"; fi
done
mkdir -p "$tmp/empty"
for p in "$tmp/nope" "$tmp/empty"; do
  err=$("$CDDP" ckpt verify "$p" 2>&1); rc=$?
  if [ $rc -eq 1 ] && [ "$(echo "$err" | wc -l)" -eq 1 ] && echo "$err" | grep -q "$p"; then ok "verify $(basename "$p"): exit 1: $err"
  else fail "verify $(basename "$p")" "rc=$rc $err"; fi
done

# SIGKILL at random instants (0-30 ms) while a writer saves ~2 MiB checkpoints in a loop
croot=$tmp/crash
"$WRITER" "$croot" 0 1 3 256 >/dev/null 2>&1
bad=0; steps=""
for round in $(seq 20); do
  start=$(ls "$croot" | grep '^step-' | sort | tail -1 | sed 's/step-0*//; s/^$/0/')
  "$WRITER" "$croot" "$start" 0 3 256 2>"$tmp/werr" &
  wpid=$!
  sleep "0.0$(printf '%02d' $((RANDOM % 31)))"
  kill -9 $wpid 2>/dev/null; wait $wpid 2>/dev/null; wpid=
  out=$("$CDDP" ckpt verify "$croot" 2>&1); rc=$?
  latest=$(ls "$croot" | grep '^step-' | sort | tail -1)
  if [ $rc -ne 0 ] || [ "$out" != "ok $croot/$latest (step $((10#${latest#step-})))" ] ||
     ! "$PY" tests/ref/check_safetensors.py "$croot/$latest/model.safetensors" "$croot/$latest/state.safetensors" >/dev/null 2>>"$tmp/pyerr"; then
    bad=$((bad + 1)); echo "# round $round: rc=$rc $out (newest dir $latest) $(cat "$tmp/werr")"
  fi
  steps="$steps ${latest#step-}"
done
if [ $bad -eq 0 ]; then ok "20 SIGKILLs of a saving writer: the newest checkpoint always verifies (steps:$(echo "$steps" | tr -s ' ' | sed 's/ 0*/ /g'))"
else fail "SIGKILL loop" "$bad rounds without a verifiable newest checkpoint"; fi
finish
