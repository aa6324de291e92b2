#!/usr/bin/env bash
# test_train_runs.sh - a run folder holds one run: a fresh start into another run's folder is
# refused (on every rank), as is one into a folder a live run holds (its lock), `--name auto`
# gives a new folder that all ranks and a restarted job share, config.yaml is written only once
# the start succeeded, a resume cuts metrics.jsonl back to its checkpoint; the `done:` line counts
# this process's own steps and time; resuming a finished run says so in one line and touches
# nothing; epochs are numbered from 1 alike on the console and in metrics.jsonl.
cd "$(dirname "$0")/../.." && source tests/sh/lib.sh
T=$(mktemp -d /tmp/cddp-runs-test.XXXXXX)
bg=()
cleanup() { for p in "${bg[@]}"; do kill -KILL "$p" 2>/dev/null; done; wait 2>/dev/null; rm -rf "$T"; }
trap cleanup EXIT
CFG=configs/fmnist_mlp.yaml
SMALL=(--set model.hidden=[32] --set ddp.threads=1)
run1() { timeout 120 "$CDDP" train --config "$CFG" --work-dir "$T" "$@"; }
run2() { timeout 120 "$CDDP" run --standalone --nproc-per-node 2 "$CDDP" train --config "$CFG" --work-dir "$T" "$@"; }
# steps FILE: the step numbers of a metrics.jsonl's step lines, one per line
steps() { grep -v '"eval"' "$1" | sed -n 's/.*"step":\([0-9]*\).*/\1/p'; }
run_at() { m=$(ls "$T"/rs/*/metrics.jsonl 2>/dev/null | head -1); [ -n "$m" ] && step_reached "$m" "$1"; } # N: the run folder's metrics (m) at step N

run1 --name a "${SMALL[@]}" --set train.max_steps=30 --set checkpoint.every_steps=10 >"$T/a.out" 2>&1 ||
  fail "first run" "$(tail -2 "$T/a.out")"

# 1. resumed from its step-20 checkpoint, run a trains steps 21-30 again: metrics.jsonl has each
# step once (cut back to step 20 before the resume appends), and its eval lines too
out=$(run1 --name a "${SMALL[@]}" --set train.max_steps=30 --set checkpoint.every_steps=10 \
  --resume-from "$T/a/checkpoints/step-000000020" 2>&1); rc=$?
n=$(steps "$T/a/metrics.jsonl" | wc -l); u=$(steps "$T/a/metrics.jsonl" | sort -u | wc -l)
if [ $rc = 0 ] && [ "$n" = 30 ] && [ "$u" = 30 ] && [ "$(steps "$T/a/metrics.jsonl" | tr '\n' ' ')" = "$(seq -s ' ' 1 30) " ] &&
   [ "$(grep -c '"eval":true' "$T/a/metrics.jsonl")" = 1 ]
then ok "resumed at step 20 of a 30-step run: metrics.jsonl holds steps 1..30 once each, one eval line"
else fail "metrics cut back on resume" "rc=$rc $n lines, $u distinct: $(tail -2 <<<"$out" | tr '\n' ' ')"; fi

# 2. the done line: this process's steps, its wall time, and samples/s over its training steps
# (rate x training time = the samples it trained); a resumed run counts only its own steps
run1 --name d --set ddp.threads=1 --set train.max_steps=20 --set eval.every_epoch=false >"$T/d1.out" 2>&1
run1 --name d --set ddp.threads=1 --set train.max_steps=40 --set eval.every_epoch=false --resume-from latest >"$T/d2.out" 2>&1; rc=$?
# done_ok FILE STEPS SPAN: the done line says STEPS steps (SPAN: its parenthesis, or empty), and adds up
done_ok() {
  local line w s r
  line=$(grep '^cddp train: done: ' "$1")
  read -r w s r < <(sed -n 's/.* in \([0-9.]*\) s, \([0-9.]*\) s of it in training steps at \([0-9]*\) samples\/s;.*/\1 \2 \3/p' <<<"$line")
  [[ "$line" == "cddp train: done: $2 steps$3 in "* ]] && [ -n "$r" ] &&
    awk -v w="$w" -v s="$s" -v r="$r" -v n=$(($2 * 256)) 'BEGIN { d = r * s / n - 1; exit !(s > 0 && w >= s && d < 0.05 && d > -0.05) }'
}
if done_ok "$T/d1.out" 20 "" && [ $rc = 0 ] && done_ok "$T/d2.out" 20 " (steps 21-40 of 40)"; then
  ok "done line: $(grep -ho 'done: [^;]*' "$T/d2.out") (rate x training time = 20 x 256 samples)"
else fail "done line" "rc=$rc $(grep -h 'done:' "$T"/d?.out | tr '\n' ' ')"; fi

# 2b. resuming a finished run (run d, 40 of 40): one line saying so and how to go on, exit 0 (as
# a requeued job that resumes until done expects), its folder as the run left it; alike with 2 ranks
sums() { stat -c '%n %Y %s' "$T/d/config.yaml" "$T/d/metrics.jsonl"; md5sum "$T/d/config.yaml" "$T/d/metrics.jsonl" "$T/d/endpoint" 2>/dev/null; }
before=$(sums); sleep 1
out1=$(run1 --name d --set ddp.threads=1 --set train.max_steps=40 --set eval.every_epoch=false --resume-from latest 2>&1); rc1=$?
out2=$(run2 --name d --set ddp.threads=1 --set train.max_steps=40 --set eval.every_epoch=false --resume-from latest 2>&1); rc2=$?
want="cddp train: nothing to do: $T/d/checkpoints/step-000000040 is at step 40 of 40, the run is finished; --set train.max_steps=N (more than 40) trains it further"
if [ $rc1 = 0 ] && [ $rc2 = 0 ] && [ "$(wc -l <<<"$out1")" = 1 ] && [[ "$out1" == "$want"* ]] &&
   [ "$(grep -c . <<<"$out2")" = 1 ] && [[ "$out2" == "[rank 0] $want"* ]] && [ "$(sums)" = "$before" ]
then ok "a finished run resumed: exit 0, one line (${out1:12:40}...), config.yaml and metrics.jsonl untouched, alike with 2 ranks"
else fail "resuming a finished run" "rc=$rc1/$rc2: $out1 | $out2 | $(diff <(echo "$before") <(sums) | tr '\n' ' ')"; fi

# 3. epochs: 240 steps at 234 an epoch reach into 2 (not train.epochs' 3); the progress line's epoch
# for a step is metrics.jsonl's, numbered from 1; an eval after the last step (mid-epoch) says so
run1 --name e "${SMALL[@]}" --set train.max_steps=240 --set log.every_steps=6 >"$T/e.out" 2>&1; rc=$?
bad=$(grep -o 'epoch [0-9]*/[0-9]*  step [0-9]*' "$T/e.out" | while read -r _ es _ s; do
  m=$(grep "^{\"step\":$s," "$T/e/metrics.jsonl" | sed -n 's/.*"epoch":\([0-9]*\).*/\1/p')
  [ "${es%/*}" = "$m" ] && [ "${es#*/}" = 2 ] || echo "step $s: console $es, metrics $m"; done)
if [ $rc = 0 ] && [ -z "$bad" ] && grep -q "epoch 2/2  step 240/240" "$T/e.out" &&
   grep -q '^{"step":1,"epoch":1,' "$T/e/metrics.jsonl" && grep -q '^{"step":235,"epoch":2,' "$T/e/metrics.jsonl" &&
   grep -q '"eval":true,"epoch":1,"step":234,' "$T/e/metrics.jsonl" && grep -q "^eval after epoch 1 (step 234)" "$T/e.out" &&
   grep -q "^eval after step 240 (in epoch 2)" "$T/e.out"
then ok "epochs from 1 alike on the console and in metrics.jsonl; max_steps 240: epoch 2/2; the last eval is 'after step 240 (in epoch 2)'"
else fail "epoch labels" "rc=$rc $bad $(grep -m3 'epoch' "$T/e.out" | tr '\n' ' ')"; fi

# 4. a fresh start into a folder that holds a run: refused, one line, nothing of the run touched
cp "$T/a/metrics.jsonl" "$T/a.metrics" && cp "$T/a/config.yaml" "$T/a.config"
out=$(run1 --name a "${SMALL[@]}" --set train.max_steps=50 2>&1); rc=$?
want="cddp train: run folder $T/a already holds a run's checkpoints (newest step-000000030) and metrics.jsonl: --resume-from latest continues that run; --name auto (or another --name) starts a new one"
if [ $rc = 2 ] && [ "$out" = "$want" ] && cmp -s "$T/a/metrics.jsonl" "$T/a.metrics" && cmp -s "$T/a/config.yaml" "$T/a.config" &&
   [ "$(ls "$T/a/checkpoints")" = "$(printf 'step-000000010\nstep-000000020\nstep-000000030')" ]
then ok "a fresh start into run a's folder: exit 2, one line naming the folder and what to do; its metrics, config and checkpoints untouched"
else fail "reused folder refused" "rc=$rc: $out"; fi
# the same with 2 ranks under cddp run: every rank stops, rank 0's line is said once
out=$(run2 --name a "${SMALL[@]}" --set train.max_steps=50 2>&1); rc=$?
if [ $rc != 0 ] && [ "$(grep -c "run folder $T/a already holds a run's checkpoints" <<<"$out")" = 1 ] &&
   ! grep -q "differs\|could not load\|REMOTE\|closed" <<<"$out" && cmp -s "$T/a/metrics.jsonl" "$T/a.metrics"
then ok "2 ranks: refused on every rank (exit $rc), the line once, no rank reports a lost peer"
else fail "reused folder, 2 ranks" "rc=$rc: $(tr '\n' ' ' <<<"$out")"; fi

# 5. config.yaml is written once the start succeeded: a bad --resume-from or a missing data
# directory leaves the folder's config as it was
out=$(run1 --name a "${SMALL[@]}" --set model.hidden=[64] --resume-from "$T/nope/step-000000001" 2>&1); rc1=$?
out2=$(run1 --name a "${SMALL[@]}" --set data.dir="$T/nodata" --resume-from latest 2>&1); rc2=$?
if [ $rc1 = 2 ] && [ $rc2 = 2 ] && cmp -s "$T/a/config.yaml" "$T/a.config"; then
  ok "a start that fails (bad --resume-from, missing data dir) leaves config.yaml as it was"
else fail "config.yaml after a failed start" "rc $rc1/$rc2: $(diff "$T/a.config" "$T/a/config.yaml" | head -3 | tr '\n' ' ')"; fi

# 6. --name auto: a new folder <config>-<time>, one for every rank (each writes its sample log there)
run2 --name auto "${SMALL[@]}" --set train.max_steps=10 --set debug.sample_log=true >"$T/auto1.out" 2>&1; rc1=$?
run2 --name auto "${SMALL[@]}" --set train.max_steps=10 --set debug.sample_log=true >"$T/auto2.out" 2>&1; rc2=$?
dirs=$(ls -d "$T"/fmnist_mlp-* 2>/dev/null)
ok_dirs=1
for d in $dirs; do [ -s "$d/samples/rank0.txt" ] && [ -s "$d/samples/rank1.txt" ] && [ -s "$d/config.yaml" ] || ok_dirs=0; done
if [ $rc1 = 0 ] && [ $rc2 = 0 ] && [ "$(wc -w <<<"$dirs")" = 2 ] && [ $ok_dirs = 1 ] &&
   basename "$(head -1 <<<"$dirs")" | grep -Eq '^fmnist_mlp-[0-9]{8}-[0-9]{6}(-[0-9]+)?$'
then ok "--name auto twice: 2 new folders ($(for d in $dirs; do basename "$d"; done | tr '\n' ' ')), each with both ranks' sample logs"
else fail "--name auto" "rc $rc1/$rc2, dirs: $dirs; $(tail -2 "$T/auto1.out" | tr '\n' ' ')"; fi

# 6b. two runs of one --name started together: the folder's lock lets one in; the other exits 2
# with one line naming the holder (this host, the pid run.lock records), writing nothing
run2 --name same "${SMALL[@]}" --set train.max_steps=200 >"$T/same1.out" 2>&1 & p1=$!; bg+=($p1)
run2 --name same "${SMALL[@]}" --set train.max_steps=200 >"$T/same2.out" 2>&1 & p2=$!; bg+=($p2)
wait $p1; rc1=$?; wait $p2; rc2=$?
if [ $rc1 = 0 ]; then won=same1 lost=same2 rcl=$rc2; else won=same2 lost=same1 rcl=$rc1; fi
holder=$(cat "$T/same/run.lock" 2>/dev/null)
want="run folder $T/same is in use by another run (host ${holder% *}, pid ${holder#* })"
bad=$(grep -v '"eval"' "$T/same/metrics.jsonl" | grep -vc '^{"step":[0-9]*,.*}$')
if [ $((rc1 + rc2)) = 2 ] && [ $rcl = 2 ] && [ "$(grep -c "$want" "$T/$lost.out")" = 1 ] && [ "$holder" != "${holder% *}" ] &&
   [ "$bad" = 0 ] && [ "$(steps "$T/same/metrics.jsonl" | tr '\n' ' ')" = "$(seq -s ' ' 1 200) " ]
then ok "two runs of --name same at once: one trains (steps 1..200 once, every line whole), the other exits 2 naming $holder"
else fail "one run per folder" "rc $rc1/$rc2, $bad bad lines: $(grep -v 'epoch [0-9]' "$T/$lost.out" | tail -2 | tr '\n' ' ')"; fi

# 7. a job restarted by its launcher (--max-restarts, restart-mode all) is the same run: its
# restarted workers (CDDP_RESTART_COUNT 1) are not refused the folder they wrote, and --name auto
# keeps them in it (the name is in the job's store). restarted NAME: rank 1 killed after step 20.
restarted() {
  local name=$1 p w q m at rc
  timeout 120 "$CDDP" run --standalone --nproc-per-node 2 --max-restarts 1 "$CDDP" train --config "$CFG" --work-dir "$T/rs" \
    --name "$name" --set ddp.threads=1 --set train.max_steps=120 --set checkpoint.every_steps=10 >"$T/rs-$name.out" 2>&1 &
  p=$!; bg+=($p)
  m=""; await "$name: step 20 in its run folder" 30 run_at 20
  w=""; for q in $(pgrep -f -- "--work-dir $T/rs --name $name"); do
    tr '\0' '\n' <"/proc/$q/environ" 2>/dev/null | grep -qx "RANK=1" && w=$q; done
  at=$(steps "$m" | tail -1)
  [ -n "$w" ] && kill -KILL "$w"
  wait $p; rc=$?
  if [ $rc = 0 ] && [ -n "$w" ] && grep -q "restarting the workers (restart 1 of 1)" "$T/rs-$name.out" &&
     [ "$(ls "$T/rs" | wc -l)" = 1 ] && grep -q "cddp train: done: 120 steps" "$T/rs-$name.out" && ! grep -q "already holds" "$T/rs-$name.out" &&
     [ "$at" -lt 120 ] && [ "$(steps "$m" | tr '\n' ' ')" = "$(seq -s ' ' 1 120) " ] &&
     { [ "$name" != auto ] || ls "$T/rs" | grep -Eq '^fmnist_mlp-[0-9]{8}-[0-9]{6}$'; }
  then ok "--name $name, rank 1 killed at step $at, the job restarted: not refused, one folder ($(ls "$T/rs")), its metrics steps 1..120 once"
  else fail "--name $name: restart in the same folder" "rc=$rc pid=$w $(grep -v 'epoch [0-9]' "$T/rs-$name.out" | tail -4 | tr '\n' ' ')"; fi
  rm -rf "$T/rs"
}
restarted rs
restarted auto
# per-rank timings: every log.rank_every steps the ranks gather their own compute, data, optimizer
# and exposed-comm time; metrics.jsonl names the slowest and each rank; a rank slowed on purpose
# (debug.slow_rank) is named a straggler on the progress line once it stays slower. Ranks at the
# same pace first: their mean compute per step sets the slowed rank's delay (3 times it, 3 times
# the line of 100%), so a loaded host, whose steps take 10 times longer, does not hide the
# straggler. The line is 100%, not the default 20%: with two busy loops beside two ranks on 2
# cores, one rank of an even pair was starved 52% above the other for 3 windows (stress run)
LINE=(--set log.straggler_pct=100)
run2 --name even --set train.max_steps=40 --set eval.every_epoch=false --set log.rank_every=5 "${LINE[@]}" >"$T/even.out" 2>&1; rc=$?
if [ $rc = 0 ] && ! grep -q straggler: "$T/even.out" && [ "$(grep -c '"straggler":-1,' "$T/even/metrics.jsonl")" = 7 ]; then
  ok "ranks at the same pace: no straggler named"
else fail "no straggler" "rc=$rc: $(grep straggler: "$T/even.out")"; fi
slow_ms=$(sed -n 's/.*"compute_ms":\([0-9.]*\).*/\1/p' "$T/even/metrics.jsonl" |
  awk '{ s += $1; n++ } END { d = n ? 3 * s / n : 0; printf "%d", (d > 25 ? d : 25) }')
run2 --name slow --set train.max_steps=60 --set eval.every_epoch=false --set log.rank_every=5 "${LINE[@]}" \
  --set debug.slow_rank=1 --set "debug.slow_ms=$slow_ms" >"$T/slow.out" 2>&1; rc=$?
line=$(grep "straggler: rank" "$T/slow.out")
g=$(grep -c '"ranks":\[{"rank":0,.*},{"rank":1,' "$T/slow/metrics.jsonl")
last=$(grep '"ranks"' "$T/slow/metrics.jsonl" | tail -1)
if [ $rc = 0 ] && [ "$(grep -c . <<<"$line")" = 1 ] && [[ "$line" == *"straggler: rank 1's own work is "*"% above the other ranks' median for 3 windows of 5 steps"* ]] &&
   [ "$g" = 11 ] && [[ "$last" == *'"slowest_rank":1,'*'"straggler":1,'* ]]; then
  ok "a slowed rank ($slow_ms ms a step) is named a straggler once; metrics.jsonl has every rank every 5 steps ($g gathers)"
else fail "straggler" "rc=$rc slow_ms=$slow_ms line '$line', $g gathers, last: ${last:0:200}"; fi
# bad names: --work-dir "" put the run at /NAME; a long --name was cut to 127 characters silently
o=$(cd "$T" && "$CDDP" train --config "$OLDPWD/$CFG" --work-dir "" --name wd_empty 2>&1); rc=$?
[ $rc = 2 ] && [ "$(grep -c . <<<"$o")" = 1 ] && grep -q -- "--work-dir '': name a folder" <<<"$o" && [ ! -e /wd_empty ] &&
  ok "--work-dir '': one line, exit 2, nothing written" || fail "--work-dir ''" "rc=$rc $o"
long=$(printf 'n%.0s' $(seq 10000))
o=$("$CDDP" train --config $CFG --work-dir "$T/long" --name "$long" 2>&1); rc=$?
[ $rc = 2 ] && [ "$(grep -c . <<<"$o")" = 1 ] && grep -q "10000 characters, at most 127" <<<"$o" && [ ! -e "$T/long" ] &&
  ok "a 10,000-character --name: one line naming the limit, exit 2" || fail "long --name" "rc=$rc ${o:0:300}"
# eval.at_end false: no evaluation at the end (with eval.every_epoch false, none at all); true,
# the default, evaluates after the last step
run1 --name noeval "${SMALL[@]}" --set train.max_steps=5 --set eval.every_epoch=false --set eval.at_end=false \
  >"$T/noeval.out" 2>&1; rc1=$?
run1 --name ateend "${SMALL[@]}" --set train.max_steps=5 --set eval.every_epoch=false >"$T/atend.out" 2>&1; rc2=$?
e1=$(grep -c '"eval":true' "$T/noeval/metrics.jsonl"); e2=$(grep -c '"eval":true' "$T/ateend/metrics.jsonl")
[ $rc1 = 0 ] && [ $rc2 = 0 ] && [ "$e1" = 0 ] && [ "$e2" = 1 ] && ! grep -q "test accuracy" "$T/noeval.out" &&
  grep -q "eval after step 5" "$T/atend.out" &&
  ok "eval.at_end=false: no evaluation; by default one, after step 5" ||
  fail "eval.at_end" "rc $rc1 $rc2, eval lines $e1 $e2: $(tail -2 "$T/noeval.out" | tr '\n' ' ')"
finish
