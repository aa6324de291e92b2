#!/usr/bin/env bash
# test_hang_blame.sh - the watchdog names the rank it judged hung, whichever it is, in every
# restart mode: a SIGSTOPped rank 0 or rank 1 of a 2-worker job under --hang-timeout 2, with
# --max-restarts 0 (the job ends on one line naming it), --max-restarts 1 (restarted) and
# --restart-mode replace. It judges the worker once: the stack file is of the live, stopped
# process (its threads listed, not "a zombie"), and it is named stopped. Each trial starts with no
# data cache, so rank 0 writes it while its peer waits: no verdict may come of that. Over tcp (HANG_TRANSPORT), where the peer exits
# by itself on the reset connection, racing the killed worker's reap. HANG_REPS (default 1)
# repeats each case; HANG_MODES picks the modes. Last, a job whose TMPDIR does not exist: the
# agent says so once and keeps its folders in /tmp, so the watchdog still judges (CI once raced
# the agent's start against this test's mkdir of TMPDIR, and the agent watched nothing, silently).
cd "$(dirname "$0")/../.." && source tests/sh/lib.sh
T=$(mktemp -d /tmp/cddp-hang-blame.XXXXXX)
trap 'kill -KILL $(jobs -p) 2>/dev/null; rm -rf "$T"' EXIT
REPS=${HANG_REPS:-1}
TR=(--config configs/fmnist_mlp.yaml --work-dir "$T" --set model.hidden=[32] --set batch.micro=64
    --set eval.every_epoch=false --set ddp.threads=1 --set train.max_steps=400 --transport ${HANG_TRANSPORT:-tcp})

# trial MODE RANK K [notmp]: one job, its worker RANK stopped after step 5; checks the line naming
# it. notmp: its TMPDIR is never made
trial() {
  local mode=$1 victim=$2 k=$3 notmp=${4:-} name="$1-r$2-$3${4:+-$4}" args=() v="" q pid rc out line
  local label="$mode, rank $victim stopped${4:+, no TMPDIR} (try $k)"
  case $mode in
  none) args=(--max-restarts 0) ;;
  restart) args=(--max-restarts 1) ;;
  replace) args=(--restart-mode replace --max-restarts 1) ;;
  esac
  [ -n "$notmp" ] || mkdir -p "$T/$name.tmp" # before the agent starts: it makes its folders there at once
  # the data cache in the trial's own folder, never /tmp's shared one, also when TMPDIR is missing
  CDDP_DATA_CACHE=$T/$name.tmp/cddp-cache-x TMPDIR=$T/$name.tmp timeout 90 "$CDDP" run --standalone --nproc-per-node 2 --hang-timeout "$(scaled 2)" --grace-period 1 \
    "${args[@]}" "$CDDP" train --name "$name" "${TR[@]}" >"$T/$name.out" 2>&1 &
  pid=$!
  if await "$mode, rank $victim (try $k): step 5" 30 step_reached "$T/$name/metrics.jsonl" 5; then
    for q in $(pgrep -f -- "train --name $name --config configs/fmnist_mlp.yaml --work-dir $T "); do
      tr '\0' '\n' <"/proc/$q/environ" 2>/dev/null | grep -qx "RANK=$victim" && v=$q; done
  fi
  [ -n "$v" ] && kill -STOP "$v"
  wait $pid; rc=$?
  out=$(grep "cddp run: rank [0-9]* (host" "$T/$name.out")
  line=$(head -1 <<<"$out")
  local flight stack want_tmp="$T/$name.tmp"
  flight=$(sed -n 's/.*; flight records and stack in \(\/[^;]*\).*/\1/p' <<<"$line")
  stack="$flight/rank$victim.stack.txt"
  local want_rc=0; [ $mode = none ] && want_rc=137
  [ -n "$notmp" ] && want_tmp=/tmp/
  local said=1 # without TMPDIR, the agent's one line says so
  [ -n "$notmp" ] && said=$(grep -v '^\[rank' "$T/$name.out" | grep -c "TMPDIR=$T/$name.tmp cannot hold temporary folders (No such file or directory): using /tmp")
  if [ -n "$v" ] && [ "$said" = 1 ] && [ $rc = $want_rc ] && [[ "$flight" == "$want_tmp"* ]] &&
     [[ "$line" == "cddp run: rank $victim (host "*", pid $v) "*"by the watchdog: hung"*"stopped (SIGSTOP or a debugger)"* ]] &&
     ! grep -q "cddp run: rank $((1 - victim)) (host" <<<"$out" && [ -f "$stack" ] && grep -q "threads of pid $v" "$stack" &&
     ! grep -q zombie "$stack" && [ "$(grep -c "by the watchdog" "$T/$name.out")" = 1 ]
  then ok "$label: exit $rc, named once: ${line:0:90}..."
  else fail "$label" "pid '$v' rc=$rc TMPDIR said $said time(s), stack '$stack': $(grep -v 'epoch [0-9]' "$T/$name.out" | tail -4 | tr '\n' ' ')"; fi
  rm -rf "$T/$name.tmp"/cddp-cache-* "$T/$name" # each trial writes the 188 MB data cache afresh: 120 would fill /tmp
  if [ -n "$notmp" ] && [[ "$flight" == /tmp/cddp-flight-* ]]; then rm -rf "$flight"; fi
}

for mode in ${HANG_MODES:-none restart replace}; do
  for victim in 0 1; do
    for k in $(seq "$REPS"); do trial $mode $victim $k; done
  done
done
trial none 0 1 notmp
finish
