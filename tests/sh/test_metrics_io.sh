#!/usr/bin/env bash
# test_metrics_io.sh - metrics.jsonl on a full disk and when damaged: a run whose metrics write
# fails (a small tmpfs filled up) stops at once with one line naming the file and the error,
# before that step's checkpoint (the sample log alike), and resumes once there is room (the torn last line dropped);
# a resume refuses a garbage line before its step, naming the line, and a file cut back behind
# its checkpoint. Needs root (mount); a skip otherwise.
cd "$(dirname "$0")/../.." && source tests/sh/lib.sh
if [ "$(id -u)" != 0 ]; then echo "ok 1 - $t_name:full disk # SKIP needs root to mount a tmpfs"; exit 0; fi
T=$(mktemp -d /tmp/cddp-metrics-io.XXXXXX)
cleanup() { umount "$T" 2>/dev/null; rm -rf "$T"; }
trap cleanup EXIT
mount -t tmpfs -o size=2m tmpfs "$T" || { fail "mount a 2 MiB tmpfs on $T"; finish; }
SMALL=(--set model.hidden=[16] --set ddp.threads=1 --set eval.every_epoch=false --set checkpoint.keep=1)
run1() { timeout 60 "$CDDP" train --config configs/fmnist_mlp.yaml --work-dir "$T" --name r "${SMALL[@]}" "$@"; }
steps() { grep -v '"eval"' "$1" | sed -n 's/.*"step":\([0-9]*\).*/\1/p' | tr '\n' ' '; }
M=$T/r/metrics.jsonl

run1 --set train.max_steps=20 --set checkpoint.every_steps=10 >"$T/a.out" 2>&1 || fail "first run" "$(tail -2 "$T/a.out")"

# 1. the disk fills up (all but 24 KiB taken): the run stops with the line, before a checkpoint
avail=$(df --output=avail -B1 "$T" | tail -1)
head -c $((avail - 24576)) /dev/zero >"$T/filler" 2>/dev/null
out=$(run1 --set train.max_steps=2000 --set checkpoint.every_steps=100000 --resume-from latest 2>&1); rc=$?
echo "# $(grep "No space" <<<"$out")"
line=$(grep -c 'cddp train: rank 0: step [0-9]*: cannot write .*/r/metrics.jsonl: No space left on device; stopping' <<<"$out")
if [ $rc = 1 ] && [ "$line" = 1 ] && ! grep -q 'done:' <<<"$out" &&
   [ ! -e "$T/r/checkpoints/step-000002000" ]
then ok "full disk: exit 1 at once, one line naming metrics.jsonl and ENOSPC, no checkpoint after it"
else fail "full disk" "rc=$rc lines=$line: $(tail -2 <<<"$out" | tr '\n' ' ')"; fi

# 2. room again: --resume-from latest (step 20) drops the torn line and the later steps
rm -f "$T/filler"
out=$(run1 --set train.max_steps=30 --set checkpoint.every_steps=10 --resume-from latest 2>&1); rc=$?
if [ $rc = 0 ] && [ "$(steps "$M")" = "$(seq -s ' ' 1 30) " ] && [ -z "$(tail -c 1 "$M")" ] &&
   [ "$(grep -vc '^{.*}$' "$M")" = 0 ]
then ok "resumed after the full disk: torn line dropped, steps 1..30 once each, every line whole"
else fail "resume after full disk" "rc=$rc steps $(steps "$M"): $(tail -2 <<<"$out" | tr '\n' ' ')"; fi

# 3. a garbage line before the resumed step: refused naming line 5, the file left as it was
sed -i '5s/.*/garbage/' "$M"
cp "$M" "$T/before"
out=$(run1 --set train.max_steps=40 --resume-from "$T/r/checkpoints/step-000000030" 2>&1); rc=$?
if [ $rc != 0 ] && [ "$(grep -c "^cddp train: $M line 5 does not parse" <<<"$out")" = 1 ] && cmp -s "$M" "$T/before"
then ok "garbage at line 5 before the resumed step: refused (exit $rc), one line naming line 5, file untouched"
else fail "garbage line refused" "rc=$rc: $(tail -2 <<<"$out" | tr '\n' ' ')"; fi

# 4. a file cut back behind the checkpoint (steps 6..30 gone): refused, not resumed with a hole
head -4 "$T/before" >"$M"
out=$(run1 --set train.max_steps=40 --resume-from latest 2>&1); rc=$?
if [ $rc != 0 ] && [ "$(grep -c "^cddp train: $M ends at step 4, behind step 30" <<<"$out")" = 1 ] &&
   [ "$(steps "$M")" = "1 2 3 4 " ]
then ok "metrics.jsonl cut back to step 4 behind checkpoint 30: refused (exit $rc), the line names both"
else fail "cut-back file refused" "rc=$rc: $(tail -2 <<<"$out" | tr '\n' ' ')"; fi

# 5. the sample log (debug.sample_log) on a full disk: stopped alike, naming its file
head -c $(($(df --output=avail -B1 "$T" | tail -1) - 24576)) /dev/zero >"$T/filler" 2>/dev/null
out=$(timeout 60 "$CDDP" train --config configs/fmnist_mlp.yaml --work-dir "$T" --name s "${SMALL[@]}" \
  --set debug.sample_log=true --set train.max_steps=2000 --set checkpoint.every_steps=100000 2>&1); rc=$?
if [ $rc = 1 ] && [ "$(grep -c "^cddp train: rank 0: step [0-9]*: cannot write $T/s/samples/rank0.txt (debug.sample_log): No space left on device" <<<"$out")" = 1 ]
then ok "sample log on a full disk: exit 1, one line naming samples/rank0.txt and ENOSPC"
else fail "sample log full disk" "rc=$rc: $(tail -2 <<<"$out" | tr '\n' ' ')"; fi
finish
