#!/usr/bin/env bash
# test_chaos.sh - the chaos loop: CHAOS_RUNS (20) short `cddp train` jobs under `cddp run
# --restart-mode replace`, 1 agent x 2 workers or 2 agents x 2 workers (`--nnodes 1:2`), each hit
# by 1-3 SIGKILLs at random moments (mid-step, mid-checkpoint, during another recovery): of random
# workers, of the agent that does not host the store (its workers die with it: the world shrinks
# 4 -> 2), or of both workers of a 1 x 2 job at once (no rank holds the state: the job falls back
# to its newest disk checkpoint). Every run must complete (exit 0; a killed agent's non-zero),
# train each sample of its steps exactly once (the sample logs against an uninterrupted run's),
# recompute no committed step (but those since the checkpoint when the whole job was lost), end
# within 0.5 points of the uninterrupted run's accuracy, and leave only checkpoints that verify,
# the newest of which resumes.
# CHAOS_NODES=3 (tests/sh/test_chaos_store.sh): every run is 3 agents x 1 worker under `--nnodes
# 2:3` (global batch 192), and the agent killed may be the one that hosts the store (node 0): the
# store moves to a survivor (docs/store.md, "Failover"), which must say so, and the checks above hold.
# One TAP line per run, then "chaos: N of N runs completed, ...". The plan (layouts, ranks,
# steps, delays) comes from CHAOS_SEED (printed; $RANDOM when unset): CHAOS_SEED=S CHAOS_ONLY=I
# replays run I's plan (the timing of the machine is not replayed).
cd "$(dirname "$0")/../.." && source tests/sh/lib.sh
SEED=${CHAOS_SEED:-$RANDOM}
RUNS=${CHAOS_RUNS:-20}
ONLY=${CHAOS_ONLY:-}
MAXN=${CHAOS_NODES:-2} # the most nodes a run has: 2 (1 x 2 or 2 x 2) or 3 (3 x 1)
STEPS=40  # per run: 40 optimizer steps of GB samples, a checkpoint every 3
T=$(mktemp -d /tmp/cddp-chaos-test.XXXXXX)
bg=()
cleanup() {
  for p in "${bg[@]}"; do kill -KILL "$p" 2>/dev/null; done
  for p in $(pgrep -f -- "--work-dir $T "); do kill -KILL "$p" 2>/dev/null; done
  wait 2>/dev/null
  rm -rf "$T"
}
trap cleanup EXIT
JOB=(--config configs/fmnist_mlp.yaml --set debug.sample_log=true --set train.max_steps=$STEPS --set ddp.threads=1
     --set checkpoint.every_steps=3 --set checkpoint.keep=3 --set eval.every_epoch=false)
# NPROC workers per agent; GB global batch, MICRO micro-batch of a multi-node run (the batch must
# split over every world the run goes through: 4 and 2, or 3 and 2, and 1 for the resume)
case $MAXN in
  2) NPROC=2 GB=256 MICRO=64 ;;
  3) NPROC=1 GB=192 MICRO=32 t_name=test_chaos_store JOB+=(--set batch.global=$GB --set batch.micro=$MICRO) ;;
  *) echo "CHAOS_NODES=$MAXN: 2 or 3" >&2; exit 2 ;;
esac
echo "# chaos seed $SEED (replay: CHAOS_SEED=$SEED tests/sh/$t_name.sh; one run: CHAOS_ONLY=I)"

acc_of() { grep '"eval"' "$1" 2>/dev/null | tail -1 | sed -n 's/.*"accuracy":\([0-9.]*\).*/\1/p'; }
# run_of NODE: the `cddp run` of node NODE (its subshell's `timeout`'s child); workers_of NODE: its workers
run_of() { local t; t=$(pgrep -P "${AGENTS[$1]}" -x timeout) && pgrep -P "$t" -f "$CDDP run"; }
workers_of() { local a; a=$(run_of "$1"); [ -n "$a" ] && pgrep -P "$a"; }
# worker_pid NODE LOCAL: the pid of that node's worker of LOCAL_RANK (ranks are renumbered when
# the world shrinks; a node and a local rank are not)
worker_pid() {
  local p
  for p in $(workers_of "$1"); do
    tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx "LOCAL_RANK=$2" && { echo "$p"; return; }
  done
}
# writes_metrics PID...: one of them is rank 0 (it holds metrics.jsonl open)
writes_metrics() { local p; for p in "$@"; do ls -l "/proc/$p/fd" 2>/dev/null | grep -q 'metrics.jsonl$' && return 0; done; return 1; }
alive() { local p; for p in "$@"; do kill -0 "$p" 2>/dev/null && return 0; done; return 1; }
# the killer's waits (each sets its p): a worker of NODE LOCAL; the writer of NAME's next
# checkpoint, by the pid its .tmp- name ends with; step_or_gone METRICS N: step N, or every agent gone
victim_of() { p=$(worker_pid "$1" "$2"); [ -n "$p" ]; }
ckpt_writer() { local d; for d in $(compgen -G "$T/$1/checkpoints/.tmp-step-*"); do kill -0 "${d##*-}" 2>/dev/null && p=${d##*-}; done; [ -n "$p" ]; }
step_or_gone() { step_reached "$1" "$2" || ! alive "${AGENTS[@]}"; }

# ---- the plan: run I = "NODES K KILL..." with KILL = kind:rank:step:delay_ms; rank R is local
# rank R%NPROC of node R/NPROC (the next node once that node's agent is dead). kind worker: wait
# for the run's metrics to reach step, then delay, then SIGKILL that worker; ckpt: past step,
# SIGKILL rank 0 as soon as it is writing a checkpoint (the writer's pid ends its .tmp-step-*
# name); burst: no wait for a step, delay after the previous kill (it lands in that kill's
# recovery); agent: SIGKILL the `cddp run` of node "rank" (2 nodes: node 1, never node 0, whose
# store cannot move; 3 nodes: node 0, the store's host, too), after its step or, as an agent
# burst (step "-"), inside the previous kill's recovery; both: after step and delay, SIGKILL
# rank's worker and, delay % 21 ms later, the other worker of its node (found beforehand).
# rnd N: X = a number in 0..N-1 from the seeded stream (a 64-bit LCG's high bits; bash's own
# $RANDOM repeats patterns in its low bits)
R=$SEED
rnd() { R=$((R * 6364136223846793005 + 1442695040888963407)); X=$(((R >> 33 & 0x7fffffff) % $1)); }
# Agent kills: runs 2, 6, 10, ... are 2 x 2 with one agent kill among their kills, and any other
# 2 x 2 run may have one (at most one a run: the other agent hosts the store). Whole-job kills:
# runs 3, 9, 15, ... are 1 x 2 and start with both workers killed 0-20 ms apart, and a random
# burst in a 1 x 2 run hits either worker (the other one: the whole job). CHAOS_AGENT_KILLS=0 /
# CHAOS_WHOLE_JOB_KILLS=0 leave them out. With CHAOS_NODES=3 every run is 3 x 1 and none loses
# the whole job; odd runs kill the store's host among their kills, runs 2, 6, 10, ... another
# agent, and runs 4, 8, ... may kill any one agent (at most one a run: 1 survivor of 2 is no
# majority to move the store, so a second agent lost could end the job).
WHOLE_JOB_KILLS=${CHAOS_WHOLE_JOB_KILLS:-1}
AGENT_KILLS=${CHAOS_AGENT_KILLS:-1}
declare -a PLAN
for i in $(seq "$RUNS"); do
  rnd 2; nodes=$((1 + X)); rnd 3; k=$((1 + X)); rnd 10; s=$((3 + X)); plan=""
  rnd 3; aj=$((1 + X)) wj=0 # the agent kill's place among a forced run's kills
  av=1 # the agent an agent kill hits
  if [ "$MAXN" = 3 ]; then
    nodes=3; rnd 3; av=$X
    [ $((i % 2)) = 1 ] && av=0
    [ $((i % 4)) = 2 ] && av=$((1 + X % 2))
    [ $((i % 4)) = 0 ] && aj=0
    [ "$aj" -gt "$k" ] && aj=$k
  elif [ "$AGENT_KILLS" = 1 ] && [ $((i % 4)) = 2 ]; then nodes=2; [ "$aj" -gt "$k" ] && aj=$k
  elif [ "$WHOLE_JOB_KILLS" = 1 ] && [ $((i % 6)) = 3 ]; then nodes=1 wj=1
  else aj=0; fi
  agent=0
  for j in $(seq "$k"); do
    rnd $((NPROC * nodes)); rank=$X; rnd 120; delay=$X; kind=worker
    rnd 4; [ "$j" -gt 1 ] && [ "$X" = 0 ] && kind=burst
    rnd 4; [ "$kind" = worker ] && [ "$X" = 0 ] && kind=ckpt rank=0
    # a burst in a 1 x 2 job hits the replacement of the worker just killed or, with
    # WHOLE_JOB_KILLS=1, either worker: the other one leaves no rank holding the state
    [ "$kind" = burst ] && [ "$nodes" = 1 ] && [ "$WHOLE_JOB_KILLS" != 1 ] && rank=$prev
    [ "$wj" = 1 ] && [ "$j" = 1 ] && kind=both
    prev=$rank
    rnd 5; at=$s
    if [ "$AGENT_KILLS" = 1 ] && [ "$nodes" -ge 2 ] && [ "$agent" = 0 ] && { [ "$j" = "$aj" ] || { [ "$aj" = 0 ] && [ "$X" = 0 ]; }; }; then
      [ "$kind" = burst ] && at=- # an agent burst: inside the previous kill's recovery
      kind=agent rank=$av agent=1
    fi
    plan+=" $kind:$rank:$at:$delay"
    rnd 8; s=$((s + 4 + X))
  done
  PLAN[$i]="$nodes $k$plan"
done
# CHAOS_PRINT_PLAN=1: the plan only ("NODES K kind:rank:step:delay_ms ..." per run), nothing run
[ -n "${CHAOS_PRINT_PLAN:-}" ] && { for i in $(seq "$RUNS"); do echo "run $i: ${PLAN[$i]}"; done; exit 0; }

# killer NAME KILL...: carries out a run's kills; one line per kill in $T/NAME.kills:
# "time last-step-logged who pid kind mid-checkpoint|-", who 0 when the victim was rank 0 (the
# metrics writer, or for an agent one of its workers), else nNlL (node, local rank) or agent.
# An agent kill SIGKILLs that node's `cddp run` (under its `timeout`; its workers follow
# through PR_SET_PDEATHSIG) and writes the node to $T/NAME.dead; with 2 nodes node 0 hosts the
# store, whose loss ends the job (one survivor of two is no majority to move it).
killer() {
  local name=$1 m=$T/$1/metrics.jsonl kind rank step delay p i w who node lr d gone=-1; shift
  for kill in "$@"; do
    IFS=: read -r kind rank step delay <<<"$kill"
    if [ "$kind" != burst ] && [ "$step" != - ]; then
      wait_for 60 step_or_gone "$m" "$step"; alive "${AGENTS[@]}" || return
      # a live job stuck short of the step is a hang: the run fails with this reason
      step_reached "$m" "$step" || { echo "no step $step to kill at within $(scaled 60) s" >>"$T/$name.stuck"; return; }
    fi
    p="" who=""
    if [ "$kind" = ckpt ]; then # the writer of the next checkpoint (2 s at most), by the pid its .tmp- name ends with
      poll_every=0.003 wait_for 2 ckpt_writer "$name"
      if [ -z "$p" ]; then # no checkpoint write seen: rank 0 anyway
        for d in $(for n in "${!AGENTS[@]}"; do workers_of "$n"; done); do writes_metrics "$d" && { p=$d; break; }; done
      fi
    else
      sleep "$(awk -v d="$delay" 'BEGIN { printf "%.3f", d / 1000 }')"
    fi
    w=-
    if [ "$kind" = agent ]; then
      p=$(run_of "$rank")
      [ -n "$p" ] || { echo "# $name: no agent of node $rank to kill" >&2; continue; }
      # shellcheck disable=SC2046
      writes_metrics $(pgrep -P "$p") && who=0 && compgen -G "$T/$name/checkpoints/.tmp-step-*" >/dev/null && w=mid-checkpoint
      echo "$(date +%s.%N) $(last_step "$m") ${who:-agent} $p agent $w" >>"$T/$name.kills"
      kill -KILL "$p" 2>/dev/null; gone=$rank; echo "$rank" >"$T/$name.dead"
      continue
    fi
    node=$((rank / NPROC)) lr=$((rank % NPROC)); [ "$node" = "$gone" ] && node=$(((node + 1) % ${#AGENTS[@]}))
    if [ "$kind" = both ]; then # both workers of the node, the second delay % 21 ms after the first
      p=$(worker_pid "$node" "$lr") q=$(worker_pid "$node" $((1 - lr)))
      [ -n "$p" ] && [ -n "$q" ] || { echo "# $name: no two workers of node $node to kill" >&2; continue; }
      local lines=() gap; gap=$(awk -v d="$delay" 'BEGIN { printf "%.3f", d % 21 / 1000 }')
      for x in "$p:$lr" "$q:$((1 - lr))"; do # everything looked up first: the kills come close together
        w=- who=n${node}l${x#*:}
        writes_metrics "${x%:*}" && who=0 && compgen -G "$T/$name/checkpoints/.tmp-step-*" >/dev/null && w=mid-checkpoint
        lines+=("$(last_step "$m") $who ${x%:*} both $w")
      done
      t1=$(date +%s.%N); kill -KILL "$p" 2>/dev/null; sleep "$gap"; t2=$(date +%s.%N); kill -KILL "$q" 2>/dev/null
      printf '%s %s\n%s %s\n' "$t1" "${lines[0]}" "$t2" "${lines[1]}" >>"$T/$name.kills"
      continue
    fi
    [ -n "$p" ] || poll_every=0.01 wait_for 1 victim_of "$node" "$lr" # one being replaced comes back
    [ "$kind" = ckpt ] && node=x lr=x
    [ -n "$p" ] || { echo "# $name: no worker n${node}l$lr to kill" >&2; continue; }
    # rank 0 holds metrics.jsonl open; killed while a checkpoint's .tmp- directory exists, it died writing it
    writes_metrics "$p" && who=0 && compgen -G "$T/$name/checkpoints/.tmp-step-*" >/dev/null && w=mid-checkpoint
    echo "$(date +%s.%N) $(last_step "$m") ${who:-n${node}l$lr} $p $kind $w" >>"$T/$name.kills"
    kill -KILL "$p" 2>/dev/null
  done
}

# episodes NAME: one line "ms redone kind" per recovery episode (kind i: in place, w: the whole
# job from disk). An episode starts at a kill (time t, L the last step logged then) and ends at
# the first step line after t of the first step it redid. In place that is R, the lowest "step R
# redone" of the trainer's recovery lines above L, and redone = the highest step logged before
# that line, minus R, plus 2: the one in flight, plus any committed step computed again. From
# disk ("restored step S ..., N steps redone": S + N above L) it is S + 1, and redone is N.
# Every kill before the end belongs to the episode (a kill during a recovery).
episodes() {
  local name=$1
  { grep -h 'cddp train: recovered from the loss of' "$T/$name".out* | sed -n 's/.* step \([0-9]*\) redone.*/R \1 \1 -1 i/p'
    grep -h 'cddp train: no survivor holds the state' "$T/$name".out* |
      sed -n 's/.*restored step \([0-9]*\) from .*, \([0-9]*\) steps redone.*/\1 \2/p' | awk '{ print "R", $1 + $2, $1 + 1, $2, "w" }'
    awk '{ print "K", $1, $2 }' "$T/$name.kills"
    grep -v '"eval"' "$T/$name/metrics.jsonl" | sed -n 's/.*"step":\([0-9]*\).*"time":\([0-9.]*\).*/M \1 \2/p'
  } >"$T/$name.ep"
  awk '$1 == "R" { r[++nr] = $2; re[nr] = $3; rr[nr] = $4; rk[nr] = $5 } $1 == "K" { kt[++nk] = $2; kl[nk] = $3 }
    $1 == "M" { ms[++nm] = $2; mt[nm] = $3 }
    END {
      ki = 1
      while (ki <= nk) {
        t0 = kt[ki]; e0 = 0
        for (e = 1; e <= nr; e++) if (r[e] > kl[ki] && (!e0 || r[e] < r[e0])) e0 = e
        if (!e0) break
        want = re[e0]; hi = 0; end = 0
        for (j = 1; j <= nm; j++) {
          if (mt[j] > t0 && ms[j] >= want) { end = mt[j]; break }
          if (ms[j] > hi) hi = ms[j]
        }
        if (!end) break
        red = rr[e0] >= 0 ? rr[e0] : hi - want + 2; if (red < 1) red = 1
        printf "%d %d %s\n", (end - t0) * 1000, red, rk[e0]
        while (ki <= nk && kt[ki] < end) ki++
      }
    }' "$T/$name.ep"
}

# ---- the uninterrupted reference: its samples and accuracy
timeout 120 "$CDDP" run --standalone --nproc-per-node 2 "$CDDP" train "${JOB[@]}" --work-dir "$T" --name ref >"$T/ref.out" 2>&1
REF_ACC=$(acc_of "$T/ref/metrics.jsonl")
[ -n "$REF_ACC" ] && [ "$(samples_verdict "$T/ref" $STEPS $GB)" = clean ] &&
  ok "reference: $STEPS steps uninterrupted, test accuracy $REF_ACC" ||
  { fail "reference run" "$(tail -3 "$T/ref.out" | tr '\n' ' ')"; finish; }


completed=0 corrupt=0 ckpts=0 total=0 midckpt=0 nkills=0 nagent=0 nwhole=0 nhost=0
: >"$T/all.ep"
for i in $(seq "$RUNS"); do
  [ -n "$ONLY" ] && [ "$ONLY" != "$i" ] && continue
  total=$((total + 1))
  read -r nodes k kills <<<"${PLAN[$i]}"
  name=c$i
  AGENTS=()
  P=$(free_port)
  for n in $(seq 0 $((nodes - 1))); do
    # 2 x 2: --nnodes 1:2, so that losing node 1's agent leaves a job of world 2 (micro 64 x 4
    # ranks, then 64 x 2 ranks x 2 accumulation: global batch 256 kept); 3 x 1: --nnodes 2:3
    # (micro 32 x 3 ranks x 2, then 32 x 2 x 3: 192 kept), a last call long enough that all 3
    # start together on a loaded host. Node 0 starts first and hosts the store; the others start
    # once the port listens (they then join as clients, each with a standby of its own).
    if [ "$nodes" = 1 ]; then launch=(--standalone --nproc-per-node 2) micro=()
    else launch=(--nnodes $((nodes - 1)):$nodes --nproc-per-node $NPROC --rdzv-backend c10d --rdzv-endpoint 127.0.0.1:$P
                 --rdzv-id C$P --rdzv-last-call 10) micro=(--set batch.micro=$MICRO); fi
    [ "$n" = 1 ] && ! wait_for 5 port_listening "$P" && echo "node 0 did not host the store within $(scaled 5) s" >>"$T/$name.stuck"
    # in a subshell that exits (not execs): a SIGKILLed agent then raises no "Killed" job notice here
    ( timeout 120 "$CDDP" run "${launch[@]}" --max-restarts $((2 * k)) --restart-mode replace \
      "$CDDP" train "${JOB[@]}" --work-dir "$T" --name "$name" "${micro[@]}"; exit $? ) >"$T/$name.out$n" 2>&1 &
    AGENTS[$n]=$!; bg+=($!)
  done
  : >"$T/$name.kills"; rm -f "$T/$name.dead"
  read -ra kl <<<"$kills"
  killer "$name" "${kl[@]}"
  # every agent exits 0 but a killed one (SIGKILL: 137 from its timeout)
  ka=$(awk '$5 == "agent"' "$T/$name.kills" | wc -l) dead=$(cat "$T/$name.dead" 2>/dev/null)
  rc=0 rcs=""
  for n in "${!AGENTS[@]}"; do
    wait "${AGENTS[$n]}" 2>/dev/null; r=$?; rcs+=" $r"
    if [ "$n" = "$dead" ]; then [ "$r" != 0 ] || rc=killed-agent-exit-0; else [ "$r" = 0 ] || rc=$r; fi
  done
  why=()
  [ -s "$T/$name.stuck" ] && why+=("$(cat "$T/$name.stuck")")
  [ "$rc" = 0 ] || why+=("exit$rcs: $(cat "$T/$name".out* | grep -v '^\[rank' | grep -v 'epoch 1/1' | tail -2 | tr '\n' ' ')")
  w0=$((nodes * NPROC)) w1=$(((nodes - 1) * NPROC))
  [ "$nodes" = 1 ] || grep -q "cddp train: MLP, .* world $w0 " "$T/$name.out0" || why+=("the ${nodes} x $NPROC job did not start with world $w0")
  pa=$(echo "$kills" | grep -o 'agent:' | wc -l)
  [ "$ka" = "$pa" ] || why+=("$ka of the $pa agent kill(s) planned done")
  nk=$(wc -l <"$T/$name.kills")
  nkills=$((nkills + nk)) midckpt=$((midckpt + $(grep -c 'mid-checkpoint' "$T/$name.kills"))) nagent=$((nagent + ka))
  nrec=$(cat "$T/$name".out* | grep -c 'cddp train: recovered from the loss of')
  nw=$(cat "$T/$name".out* | grep -c 'cddp train: no survivor holds the state: restored step')
  # each restore from disk with its count of steps redone, from the trainer's own lines (an
  # episode can hold a restore and an in-place recovery: counted from episodes, a count went missing)
  wred=$(cat "$T/$name".out* | sed -n 's/.*cddp train: no survivor holds the state: restored step [0-9]* from .*, \([0-9]*\) steps redone .*/\1/p' |
    awk '{ printf "%s%d steps redone", (NR > 1 ? ", " : ""), $1 }')
  [ "$(grep -o 'steps redone' <<<"$wred" | wc -l)" = "$nw" ] || why+=("a restore from disk without its count of steps redone")
  nwhole=$((nwhole + nw))
  [ $((nrec + nw)) -ge 1 ] || why+=("no recovery line after $nk kill(s)")
  # an agent lost: the world shrank 4 -> 2 (3 -> 2) and the accumulation was re-derived (once)
  # (the node's loss may be folded with a worker's lost just before it: "loss of rank 2 pid P, then node ...");
  # or every worker was lost with it (the node's others killed too, a replacement not yet holding the
  # state): the agents' "world 4 -> 2" and one restore from disk into world 2, whose steps the metrics check
  if [ "$ka" = 1 ]; then
    a0=$((GB / (w0 * MICRO))) a1=$((GB / (w1 * MICRO)))
    shrink="cddp train: recovered from the loss of .*node .* world $w0 -> $w1 (accumulation $a0 -> $a1, global batch $GB kept)"
    ns=$(cat "$T/$name".out* | grep -c "$shrink")
    [ "$ns" = 1 ] ||
      { [ "$ns" = 0 ] && [ "$nw" = 1 ] && cat "$T/$name".out* | grep -q "^cddp run: .* world $w0 -> $w1, " &&
        cat "$T/$name".out* | grep -q "cddp train: no survivor holds the state: restored step .*, world $w1)$"; } ||
      why+=("no (single) 'world $w0 -> $w1 (accumulation $a0 -> $a1' line: $(cat "$T/$name".out* | grep 'cddp train: recovered' | grep -c "world $w0 -> $w1") of the trainer's, $(cat "$T/$name".out* | grep -c "world $w0 -> $w1") in all")
  fi
  # 3 nodes: the store's host lost, one survivor took the store over (one line); another agent lost, nobody did
  took=$(cat "$T/$name".out* | grep -c "^cddp run: the store's host (agent [0-9]* at 127.0.0.1:$P) is lost; agent [0-9]* took the store over")
  if [ "$nodes" = 3 ] && [ "$dead" = 0 ]; then
    nhost=$((nhost + 1))
    [ "$took" = 1 ] || why+=("the store's host killed: $took take-over lines (want 1): $(cat "$T/$name".out* | grep -h 'store' | grep -v '^\[rank' | head -2 | tr '\n' ' ')")
  else [ "$took" = 0 ] || why+=("$took take-over line(s), but the store's host was not killed"); fi
  # the metrics: every step once, in order (a step rank 0 committed but died before logging is
  # logged by the new rank 0 from the state's source's record)
  m=$T/$name/metrics.jsonl
  got=$(grep -v '"eval"' "$m" 2>/dev/null | sed -n 's/.*"step":\([0-9]*\).*/\1/p' | tr '\n' ' ')
  [ "$got" = "$(seq -s ' ' 1 $STEPS) " ] ||
    why+=("metrics: step lines '$got' (want 1-$STEPS, each once, in order)")
  s=$(samples_verdict "$T/$name" $STEPS $GB "$T/ref")
  [ "$s" = clean ] || why+=("samples: $s")
  acc=$(acc_of "$m")
  awk -v a="$acc" -v b="$REF_ACC" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(a != "" && d <= 0.005) }' ||
    why+=("accuracy '$acc' vs $REF_ACC uninterrupted")
  # the checkpoints: every step-* verifies; no half-written one is left
  verify_checkpoints "$T/$name"
  ckpts=$((ckpts + nc)) corrupt=$((corrupt + nbad))
  [ "$nc" -ge 1 ] || why+=("no checkpoint")
  left=$(find "$T/$name/checkpoints" -maxdepth 1 -name '.tmp-*' -printf '%f ' 2>/dev/null)
  [ -z "$left" ] || why+=("half-written checkpoint dir(s) left: $left")
  # recovery times and steps redone (before the resume appends to the logs)
  episodes "$name" >"$T/$name.times"
  cat "$T/$name.times" >>"$T/all.ep"
  # in place: the one step in flight; the whole job from disk: those since its checkpoint (one every
  # 3 steps; 3 more when rank 0 died writing the newest) and the one in flight
  red=$(awk '$3 == "i" && $2 > m { m = $2 } END { print m + 0 }' "$T/$name.times")
  [ "$red" -le 1 ] || why+=("$red steps redone in one in-place recovery")
  red=$(awk '$3 == "w" && $2 > m { m = $2 } END { print m + 0 }' "$T/$name.times")
  [ "$red" -le 7 ] || why+=("$red steps redone from the disk checkpoint")
  # the newest checkpoint resumes: 2 more steps on 1 rank
  timeout 60 "$CDDP" train "${JOB[@]}" --work-dir "$T" --name "$name" --set train.max_steps=$((STEPS + 2)) \
    --resume-from latest >"$T/$name.resume" 2>&1; r=$?
  { [ $r = 0 ] && grep -q "resuming from .*step-0*$STEPS (step $STEPS," "$T/$name.resume" && grep -q "done: 2 steps (steps $((STEPS + 1))-$((STEPS + 2)) of $((STEPS + 2)))" "$T/$name.resume"; } ||
    why+=("resume from latest: exit $r: $(grep -v 'epoch' "$T/$name.resume" | tail -1)")
  desc="$([ "$nodes" = 1 ] && echo "1x2" || echo "${nodes}x$NPROC"), kills$(for x in "${kl[@]}"; do IFS=: read -r kd rk st dl <<<"$x"; case $kd in both) printf ' r%s+r%s@%s+%sms+%sms' "$rk" "$((1 - rk))" "$st" "$dl" "$((dl % 21))" ;; burst) printf ' r%s+%sms' "$rk" "$dl" ;; ckpt) printf ' r0@%s-in-ckpt' "$st" ;; agent) printf ' agent%s%s@%s+%sms' "$rk" "$([ "$nodes" = 3 ] && [ "$rk" = 0 ] && echo '(store)')" "$st" "$dl" ;; *) printf ' r%s@%s+%sms' "$rk" "$st" "$dl" ;; esac; done)"
  times=$(awk '{ printf("%s%d", (NR > 1 ? "," : ""), $1) } END { if (!NR) printf "-" }' "$T/$name.times")
  if [ ${#why[@]} = 0 ]; then
    completed=$((completed + 1))
    ok "run $i ($desc): exit$rcs, $nrec recover$([ "$nrec" = 1 ] && echo y || echo ies) in place$([ "$nw" -gt 0 ] && echo ", $nw from disk ($wred)") in $times ms, samples exactly once, acc $acc, $nc checkpoints verified, resumed"
  else
    fail "run $i ($desc)" "$(IFS=';'; echo "${why[*]}") -- replay: CHAOS_SEED=$SEED CHAOS_ONLY=$i"
    echo "# run $i: its logs kept in $(keep_failed chaos "$T/$name" "$T/$name".*)"
  fi
  rm -rf "${T:?}/$name"
done

# the whole plan ran its agent kills and lost the whole job at least once (a replay of one run need not);
# 3 nodes: it killed the store's host (run 1 does)
if [ -z "$ONLY" ] && [ "$RUNS" -ge 12 ] && [ "$MAXN" = 2 ]; then
  [ "$AGENT_KILLS" != 1 ] || [ "$nagent" -ge 3 ] && ok "agent kills: $nagent" || fail "agent kills" "only $nagent in $RUNS runs"
  [ "$WHOLE_JOB_KILLS" != 1 ] || [ "$nwhole" -ge 1 ] && ok "whole job lost and restored from disk: $nwhole" ||
    fail "whole-job kills" "no run lost every worker at once"
fi
if [ -z "$ONLY" ] && [ "$MAXN" = 3 ] && [ "$AGENT_KILLS" = 1 ]; then
  [ "$nhost" -ge $(((RUNS + 1) / 2)) ] && ok "kills of the store's host: $nhost, the store moved each time" ||
    fail "kills of the store's host" "$nhost in $RUNS runs (want one in each odd run)"
fi

stats=$(awk '$3 == "i"' "$T/all.ep" | sort -n | awk '{ v[NR] = $1; if ($2 > r) r = $2 } END {
  if (!NR) { print "- - 0"; exit }
  printf "%d %d %d\n", NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2, v[NR], r }')
read -r med max red <<<"$stats"
wstats=$(awk '$3 == "w" { n++; if ($1 > t) t = $1; if ($2 > r) r = $2 } END { printf "%d %d\n", t, r }' "$T/all.ep")
read -r wmax wred <<<"$wstats"
echo "chaos: $completed of $total runs completed, $corrupt corrupt checkpoints ($ckpts verified), recovery in place median $med ms, max $max ms, steps redone max $red; whole job from disk $nwhole times, max $wmax ms, $wred steps redone max (seed $SEED; $nkills kills: $nagent of an agent$([ "$MAXN" = 3 ] && echo " ($nhost of the store's host)"), $midckpt of rank 0 mid-checkpoint-write)"
finish
