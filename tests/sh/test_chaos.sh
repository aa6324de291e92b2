#!/usr/bin/env bash
# test_chaos.sh - the chaos loop: CHAOS_RUNS (20) short `cddp train` jobs under `cddp run
# --restart-mode replace`, 1 agent x 2 workers or 2 agents x 2 workers, each hit by 1-3 SIGKILLs
# of random workers at random moments (mid-step, mid-checkpoint, during another recovery). Every
# run must exit 0, train each sample of its steps exactly once (the sample logs against an
# uninterrupted run's), recompute no committed step, end within 0.5 points of the uninterrupted
# run's accuracy, and leave only checkpoints that verify, the newest of which resumes.
# One TAP line per run, then "chaos: N of N runs completed, ...". The plan (layouts, ranks,
# steps, delays) comes from CHAOS_SEED (printed; $RANDOM when unset): CHAOS_SEED=S CHAOS_ONLY=I
# replays run I's plan (the timing of the machine is not replayed).
cd "$(dirname "$0")/../.." && source tests/sh/lib.sh
SEED=${CHAOS_SEED:-$RANDOM}
RUNS=${CHAOS_RUNS:-20}
ONLY=${CHAOS_ONLY:-}
STEPS=40  # per run: 40 optimizer steps of 256 samples, a checkpoint every 3
T=$(mktemp -d /tmp/cddp-chaos-test.XXXXXX)
bg=()
cleanup() {
  for p in "${bg[@]}"; do kill -KILL "$p" 2>/dev/null; done
  for p in $(pgrep -f -- "--work-dir $T "); do kill -KILL "$p" 2>/dev/null; done
  wait 2>/dev/null
  rm -rf "$T"
}
trap cleanup EXIT
echo "# chaos seed $SEED (replay: CHAOS_SEED=$SEED tests/sh/test_chaos.sh; one run: CHAOS_ONLY=I)"
JOB=(--config configs/fmnist_mlp.yaml --set debug.sample_log=true --set train.max_steps=$STEPS --set ddp.threads=1
     --set checkpoint.every_steps=3 --set checkpoint.keep=3 --set eval.every_epoch=false)

last_step() { grep -v '"eval"' "$1" 2>/dev/null | tail -1 | sed -n 's/.*"step":\([0-9]*\).*/\1/p'; }
acc_of() { grep '"eval"' "$1" 2>/dev/null | tail -1 | sed -n 's/.*"accuracy":\([0-9.]*\).*/\1/p'; }
# worker_pid NAME RANK: the pid of run NAME's worker of that RANK (the agents have no RANK)
worker_pid() {
  local p
  for p in $(pgrep -f -- "--work-dir $T --name $1 "); do
    tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx "RANK=$2" && { echo "$p"; return; }
  done
}
alive() { local p; for p in "$@"; do kill -0 "$p" 2>/dev/null && return 0; done; return 1; }

# ---- the plan: run I = "NODES K KILL..." with KILL = kind:rank:step:delay_ms. kind worker: wait
# for the run's metrics to reach step, then delay, then SIGKILL that rank's worker; ckpt: past
# step, SIGKILL rank 0 as soon as it is writing a checkpoint (a .tmp-step-* exists); burst: no
# wait for a step, delay after the previous kill (it lands in that kill's recovery); agent: the
# hook for agent deaths (see AGENT_KILLS).
# rnd N: X = a number in 0..N-1 from the seeded stream (a 64-bit LCG's high bits; bash's own
# $RANDOM repeats patterns in its low bits)
R=$SEED
rnd() { R=$((R * 6364136223846793005 + 1442695040888963407)); X=$(((R >> 33 & 0x7fffffff) % $1)); }
WHOLE_JOB_KILLS=${CHAOS_WHOLE_JOB_KILLS:-0}
AGENT_KILLS=${CHAOS_AGENT_KILLS:-0} # agent kills need membership changes (a dead agent's ranks leave the world): 1 once they land
declare -a PLAN
for i in $(seq "$RUNS"); do
  rnd 2; nodes=$((1 + X)); rnd 3; k=$((1 + X)); rnd 10; s=$((3 + X)); plan=""
  for j in $(seq "$k"); do
    rnd $((2 * nodes)); rank=$X; rnd 120; delay=$X; kind=worker
    rnd 4; [ "$j" -gt 1 ] && [ "$X" = 0 ] && kind=burst
    rnd 4; [ "$kind" = worker ] && [ "$X" = 0 ] && kind=ckpt rank=0
    # a burst always leaves a worker that holds the state: with 2 workers it hits the one just
    # killed (its replacement), unless WHOLE_JOB_KILLS=1 (every worker dead at once: the job
    # must fall back to its newest disk checkpoint, which in-place recovery does not do yet)
    [ "$kind" = burst ] && [ "$nodes" = 1 ] && [ "$WHOLE_JOB_KILLS" != 1 ] && rank=$prev
    prev=$rank
    rnd 5; [ "$AGENT_KILLS" = 1 ] && [ "$nodes" = 2 ] && [ "$X" = 0 ] && kind=agent rank=1
    plan+=" $kind:$rank:$s:$delay"
    rnd 8; s=$((s + 4 + X))
  done
  PLAN[$i]="$nodes $k$plan"
done

# agent_kill NAME NODE: the hook for agent deaths (membership changes): SIGKILL node NODE's
# `cddp run` (the child of its `timeout`; its workers follow through PR_SET_PDEATHSIG). The
# checks after it must then expect that agent's exit status non-zero (137 from timeout) and the
# world to shrink, with the samples still exactly once.
agent_kill() { local a; a=$(pgrep -P "${AGENTS[$2]}" -f "$CDDP run"); [ -n "$a" ] && kill -KILL $a; }

# killer NAME KILL...: carries out a run's kills; one line per kill in $T/NAME.kills:
# "time last-step-logged rank pid kind mid-checkpoint|-"
killer() {
  local name=$1 m=$T/$1/metrics.jsonl kind rank step delay p i w; shift
  for kill in "$@"; do
    IFS=: read -r kind rank step delay <<<"$kill"
    if [ "$kind" != burst ]; then
      for i in $(seq 1200); do [ "$(last_step "$m")" -ge "$step" ] 2>/dev/null && break; alive "${AGENTS[@]}" || return; sleep 0.05; done
    fi
    p=""
    if [ "$kind" = ckpt ]; then # rank 0 found first, then 2 s at most for its next checkpoint write
      p=$(worker_pid "$name" 0)
      for i in $(seq 400); do compgen -G "$T/$name/checkpoints/.tmp-step-*" >/dev/null && break; sleep 0.003; done
    else
      sleep "$(awk -v d="$delay" 'BEGIN { printf "%.3f", d / 1000 }')"
    fi
    if [ "$kind" = agent ]; then
      echo "$(date +%s.%N) $(last_step "$m") agent ${AGENTS[1]} agent" >>"$T/$name.kills"; agent_kill "$name" 1; continue
    fi
    for i in $(seq 100); do [ -n "$p" ] && break; p=$(worker_pid "$name" "$rank"); [ -n "$p" ] && break; sleep 0.01; done
    [ -n "$p" ] || { echo "# $name: no worker of rank $rank to kill" >&2; continue; }
    # a rank 0 killed while a checkpoint's .tmp- directory exists died writing it
    w=-; [ "$rank" = 0 ] && compgen -G "$T/$name/checkpoints/.tmp-step-*" >/dev/null && w=mid-checkpoint
    echo "$(date +%s.%N) $(last_step "$m") $rank $p $kind $w" >>"$T/$name.kills"
    kill -KILL "$p" 2>/dev/null
  done
}

# episodes NAME: one line "ms redone" per recovery episode. An episode starts at a kill (time t,
# L the last step logged then) and ends at the first step line after t of the step it redid: R,
# the lowest "step R redone" of the trainer's recovery lines above L; every kill before that
# line belongs to the episode (a kill during a recovery). redone = the highest step logged
# before that line, minus R, plus 2: the one in flight, plus any committed step computed again.
episodes() {
  local name=$1
  { grep -h 'cddp train: recovered from the loss of rank' "$T/$name".out* | sed -n 's/.* step \([0-9]*\) redone.*/R \1/p'
    awk '{ print "K", $1, $2 }' "$T/$name.kills"
    grep -v '"eval"' "$T/$name/metrics.jsonl" | sed -n 's/.*"step":\([0-9]*\).*"time":\([0-9.]*\).*/M \1 \2/p'
  } >"$T/$name.ep"
  awk '$1 == "R" { r[++nr] = $2 } $1 == "K" { kt[++nk] = $2; kl[nk] = $3 } $1 == "M" { ms[++nm] = $2; mt[nm] = $3 }
    END {
      ki = 1
      while (ki <= nk) {
        t0 = kt[ki]; want = -1
        for (e = 1; e <= nr; e++) if (r[e] > kl[ki] && (want < 0 || r[e] < want)) want = r[e]
        if (want < 0) break
        hi = 0; end = 0
        for (j = 1; j <= nm; j++) {
          if (mt[j] > t0 && ms[j] >= want) { end = mt[j]; break }
          if (ms[j] > hi) hi = ms[j]
        }
        if (!end) break
        red = hi - want + 2; if (red < 1) red = 1
        printf "%d %d\n", (end - t0) * 1000, red
        while (ki <= nk && kt[ki] < end) ki++
      }
    }' "$T/$name.ep"
}

# ---- the uninterrupted reference: its samples and accuracy
timeout 120 "$CDDP" run --standalone --nproc-per-node 2 "$CDDP" train "${JOB[@]}" --work-dir "$T" --name ref >"$T/ref.out" 2>&1
REF_ACC=$(acc_of "$T/ref/metrics.jsonl")
[ -n "$REF_ACC" ] && [ "$(samples_verdict "$T/ref" $STEPS 256)" = clean ] &&
  ok "reference: $STEPS steps uninterrupted, test accuracy $REF_ACC" ||
  { fail "reference run" "$(tail -3 "$T/ref.out" | tr '\n' ' ')"; finish; }

completed=0 corrupt=0 ckpts=0 total=0 midckpt=0 nkills=0
: >"$T/all.ep"
for i in $(seq "$RUNS"); do
  [ -n "$ONLY" ] && [ "$ONLY" != "$i" ] && continue
  total=$((total + 1))
  read -r nodes k kills <<<"${PLAN[$i]}"
  name=c$i
  AGENTS=()
  P=$(free_port)
  for n in $(seq 0 $((nodes - 1))); do
    if [ "$nodes" = 1 ]; then launch=(--standalone --nproc-per-node 2)
    else launch=(--nnodes 2 --nproc-per-node 2 --rdzv-backend c10d --rdzv-endpoint 127.0.0.1:$P --rdzv-id C$P); fi
    timeout 120 "$CDDP" run "${launch[@]}" --max-restarts "$k" --restart-mode replace \
      "$CDDP" train "${JOB[@]}" --work-dir "$T" --name "$name" --set batch.micro=$((256 / (2 * nodes))) >"$T/$name.out$n" 2>&1 &
    AGENTS[$n]=$!; bg+=($!)
  done
  : >"$T/$name.kills"
  read -ra kl <<<"$kills"
  killer "$name" "${kl[@]}"
  rc=0
  for n in "${!AGENTS[@]}"; do wait "${AGENTS[$n]}"; r=$?; [ "$r" = 0 ] || rc=$r; done
  why=()
  [ "$rc" = 0 ] || why+=("exit $rc: $(cat "$T/$name".out* | grep -v '^\[rank' | grep -v 'epoch 1/1' | tail -2 | tr '\n' ' ')")
  nk=$(wc -l <"$T/$name.kills")
  nkills=$((nkills + nk)) midckpt=$((midckpt + $(grep -c 'mid-checkpoint' "$T/$name.kills")))
  nrec=$(cat "$T/$name".out* | grep -c 'cddp train: recovered from the loss of rank')
  [ "$nrec" -ge 1 ] || why+=("no recovery line after $nk kill(s)")
  # the metrics: no step twice; a step rank 0 committed but died before logging may be missing
  m=$T/$name/metrics.jsonl
  lines=$(grep -vc '"eval"' "$m" 2>/dev/null) uniq=$(grep -v '"eval"' "$m" 2>/dev/null | sed -n 's/.*"step":\([0-9]*\).*/\1/p' | sort -u | wc -l)
  k0=$(awk '$3 == 0' "$T/$name.kills" | wc -l)
  { [ "$lines" = "$uniq" ] && [ "$lines" -le $STEPS ] && [ "$lines" -ge $((STEPS - k0)) ]; } ||
    why+=("metrics: $lines step lines, $uniq distinct (want $STEPS, each once)")
  s=$(samples_verdict "$T/$name" $STEPS 256 "$T/ref")
  [ "$s" = clean ] || why+=("samples: $s")
  acc=$(acc_of "$m")
  awk -v a="$acc" -v b="$REF_ACC" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(a != "" && d <= 0.005) }' ||
    why+=("accuracy '$acc' vs $REF_ACC uninterrupted")
  # the checkpoints: every step-* verifies; no half-written one is left
  nc=0 nbad=0
  for d in "$T/$name"/checkpoints/step-*; do
    [ -d "$d" ] || continue
    nc=$((nc + 1))
    "$CDDP" ckpt verify "$d" >"$T/$name.verify" 2>&1 || { nbad=$((nbad + 1)); why+=("corrupt checkpoint: $(head -1 "$T/$name.verify")"); }
  done
  ckpts=$((ckpts + nc)) corrupt=$((corrupt + nbad))
  [ "$nc" -ge 1 ] || why+=("no checkpoint")
  left=$(find "$T/$name/checkpoints" -maxdepth 1 -name '.tmp-*' 2>/dev/null | wc -l)
  [ "$left" = 0 ] || why+=("$left half-written checkpoint dir(s) left")
  # recovery times and steps redone (before the resume appends to the logs)
  episodes "$name" >"$T/$name.times"
  cat "$T/$name.times" >>"$T/all.ep"
  red=$(awk '$2 > m { m = $2 } END { print m + 0 }' "$T/$name.times")
  [ "$red" -le 1 ] || why+=("$red steps redone in one recovery")
  # the newest checkpoint resumes: 2 more steps on 1 rank
  timeout 60 "$CDDP" train "${JOB[@]}" --work-dir "$T" --name "$name" --set train.max_steps=$((STEPS + 2)) \
    --resume-from latest >"$T/$name.resume" 2>&1; r=$?
  { [ $r = 0 ] && grep -q "resuming from .*step-0*$STEPS (step $STEPS," "$T/$name.resume" && grep -q "done: $((STEPS + 2)) steps" "$T/$name.resume"; } ||
    why+=("resume from latest: exit $r: $(grep -v 'epoch' "$T/$name.resume" | tail -1)")
  desc="$([ "$nodes" = 1 ] && echo "1x2" || echo "2x2"), kills$(for x in "${kl[@]}"; do IFS=: read -r kd rk st dl <<<"$x"; case $kd in burst) printf ' r%s+%sms' "$rk" "$dl" ;; ckpt) printf ' r0@%s-in-ckpt' "$st" ;; agent) printf ' agent%s@%s+%sms' "$rk" "$st" "$dl" ;; *) printf ' r%s@%s+%sms' "$rk" "$st" "$dl" ;; esac; done)"
  times=$(awk '{ printf("%s%d", (NR > 1 ? "," : ""), $1) } END { if (!NR) printf "-" }' "$T/$name.times")
  if [ ${#why[@]} = 0 ]; then
    completed=$((completed + 1))
    ok "run $i ($desc): exit 0, $nrec recover$([ "$nrec" = 1 ] && echo y || echo ies) in $times ms, samples exactly once, acc $acc, $nc checkpoints verified, resumed"
  else
    fail "run $i ($desc)" "$(IFS=';'; echo "${why[*]}") -- replay: CHAOS_SEED=$SEED CHAOS_ONLY=$i"
    mkdir -p /tmp/cddp-chaos-failed && cp -r "$T/$name" "$T/$name".* /tmp/cddp-chaos-failed/ 2>/dev/null &&
      echo "# run $i: its logs kept in /tmp/cddp-chaos-failed/"
  fi
  rm -rf "${T:?}/$name"
done

# the hook for agent deaths: a case in the plan (kind agent) and agent_kill above
if [ "$AGENT_KILLS" = 1 ]; then ok "agent kills in the plan"
else echo "ok $((t_n += 1)) - $t_name:agent kills # SKIP agent kills need membership changes"; fi

stats=$(sort -n "$T/all.ep" | awk '{ v[NR] = $1; if ($2 > r) r = $2 } END {
  if (!NR) { print "- - 0"; exit }
  printf "%d %d %d\n", NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2, v[NR], r }')
read -r med max red <<<"$stats"
echo "chaos: $completed of $total runs completed, $corrupt corrupt checkpoints ($ckpts verified), recovery median $med ms, max $max ms, steps redone max $red (seed $SEED; $nkills kills, $midckpt of rank 0 mid-checkpoint-write)"
finish
