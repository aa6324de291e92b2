#!/usr/bin/env bash
# elastic_bench.sh - one worker SIGKILLed mid-epoch, under cddp (in-place replacement), under
# cddp run restarting every worker of a PyTorch script, and under torchrun (the same script),
# side by side.
#
# Usage: bench/elastic_bench.sh [--kill-at STEP|random] [--ckpt-every K] [--repeat N] [--out DIR]
#                               [--monitor-interval S]   (torchrun's, default its own: 5 s)
#                               [--agents 1|2] [--rows LIST] [--cddp-only] [--no-reference]
#                               [--python PATH]   (the torch rows' interpreter and torchrun's)
# Every job: the MLP 784-1024-1024-10 on Fashion-MNIST, 1 epoch (234 steps of 256), 2 workers x
# 1 thread on this host (--agents 2: 2 launchers x 2 workers, c10d rendezvous on this host), a
# checkpoint every K steps (default 50), --max-restarts 3. When the job's step log reaches STEP
# (default 75; random: a step drawn from 10-229 for each repeat, the same for every row) rank 1's
# worker (not the launcher) is SIGKILLed. Rows (--rows, comma-separated, run interleaved in that
# order; default cddp,cddp-run,torchrun; --cddp-only = --rows cddp):
#   cddp      cddp run --restart-mode replace + cddp train (the dead worker replaced in place)
#   cddp-run  cddp run --max-restarts 3 (restart-mode all) + bench/peers/ddp_fmnist_elastic.py
#   torchrun  torchrun --max_restarts 3 + the same script (every worker restarted; the script
#             resumes from its newest checkpoint), of --python's torch: default /usr/bin/python3,
#             Debian's torch 1.13; .venv/bin/python is torch 2.x (scripts/install-deps.sh test)
# Columns: recovery = kill -> first step of the recovered job completed (s); steps redone =
# steps computed twice (the completed steps after the restart point, plus the one in flight);
# caught up = kill -> the job completes the step after the last one it had before (recovery
# plus the redone steps); wall = launch -> launcher exit (s); the final test accuracy; the
# rank the launcher's error line blamed (rank 1 is right). --repeat N: median [min-max].
# --no-reference: skip the uninterrupted run of each row (its wall and accuracy).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
ROOT=$PWD
# measure STEPLOG KILLFILE R [AFTER]: "recovery redone caught-up" from a step log, given R, the
# first step the recovered job completed: recovery = the time of the first line of step R after
# the kill (and after the time AFTER: a restarted job's resume line, since the old group may
# still log step R just after the kill), minus the kill time; redone = M - R + 2, M the highest
# step logged before that line (the steps completed twice, plus the one in flight at the kill);
# caught-up = kill -> step M + 1 completed (the job is past where it was: restart and redone
# steps together)
measure() {
  local kt; read -r kt _ _ <"$2"
  [ "$kt" = 0 ] && { echo "- - -"; return; }
  sed -n 's/.*"step": *\([0-9]*\).*"time": *\([0-9.]*\).*/\1 \2/p' "$1" |
    awk -v k="$kt" -v r="$3" -v a="${4:-0}" '
      done && $1 == m + 1 { c = $2 - k; exit }
      !done && $1 == r && $2 > k && $2 > a { rec = $2 - k; done = 1; if ($1 == m + 1) { c = rec; exit } }
      !done && $1 > m { m = $1 }
      END { if (done) printf "%.2f %d %s\n", rec, m - r + 2, c ? sprintf("%.2f", c) : "-"; else print "- - -" }'
}
# stats FILE COLUMN: "median min max count" over the runs with a figure in COLUMN (nothing
# when none has one)
stats() {
  awk -v c="$2" '$c != "-" { v[++k] = $c }
    END { if (!k) exit
      for (i = 1; i <= k; i++) for (j = i + 1; j <= k; j++) if (v[j] < v[i]) { t = v[i]; v[i] = v[j]; v[j] = t }
      print (k % 2 ? v[(k + 1) / 2] : (v[k / 2] + v[k / 2 + 1]) / 2), v[1], v[k], k }' "$1"
}
# cell FILE COLUMN N: the median, and [min-max] when N runs were made (and how many had a figure
# when not all did)
cell() {
  local m lo hi k; read -r m lo hi k <<<"$(stats "$1" "$2")"
  if [ -z "$m" ]; then echo -
  elif [ "$3" = 1 ]; then echo "$m"
  else echo "$m [$lo-$hi]$([ "$k" -lt "$3" ] && echo " ($k/$3)")"; fi
}
# (--measure STEPLOG KILLFILE R [AFTER]: just that, for tests/sh/test_elastic_bench.sh; --cell FILE
# COLUMN N: just that, for bench/torchrun_bench.sh)
[ "${1:-}" = --measure ] && { [ $# = 4 ] || [ $# = 5 ] || exit 2; measure "$2" "$3" "$4" "${5:-}"; exit; }
[ "${1:-}" = --cell ] && { [ $# = 4 ] || exit 2; cell "$2" "$3" "$4"; exit; }
KILL_AT=75
CKPT=50
REPEAT=1
OUT=""
MONITOR=5
AGENTS=1
ROWS=cddp,cddp-run,torchrun
REFERENCE=1
PYTHON=/usr/bin/python3
num() { [[ "${2:-}" =~ ^[1-9][0-9]*$ ]] || { echo "elastic_bench.sh: $1 needs a positive number, got '${2:-}'" >&2; exit 2; }; }
while [ $# -gt 0 ]; do
  case "$1" in
    --kill-at) [[ "${2:-}" =~ ^([1-9][0-9]*|random)$ ]] ||
        { echo "elastic_bench.sh: --kill-at needs a step (a positive number) or 'random', got '${2:-}'" >&2; exit 2; }
      KILL_AT=$2; shift 2 ;;
    --ckpt-every) num "$1" "${2:-}"; CKPT=$2; shift 2 ;;
    --repeat) num "$1" "${2:-}"; REPEAT=$2; shift 2 ;;
    --monitor-interval) MONITOR=${2:-}; shift 2
      if ! [[ "$MONITOR" =~ ^[0-9]*\.?[0-9]+$ ]] || ! awk -v m="$MONITOR" 'BEGIN { exit !(m > 0) }'; then
        echo "elastic_bench.sh: --monitor-interval needs seconds > 0, got '$MONITOR'" >&2; exit 2
      fi ;;
    --out) OUT=${2:?--out needs a directory}; shift 2 ;;
    --agents) [[ "${2:-}" =~ ^[12]$ ]] || { echo "elastic_bench.sh: --agents must be 1 or 2, got '${2:-}'" >&2; exit 2; }
      AGENTS=$2; shift 2 ;;
    --rows) [[ "${2:-}" =~ ^(cddp|cddp-run|torchrun)(,(cddp|cddp-run|torchrun))*$ ]] ||
        { echo "elastic_bench.sh: --rows takes cddp, cddp-run and torchrun, comma-separated, got '${2:-}'" >&2; exit 2; }
      ROWS=$2; shift 2 ;;
    --cddp-only) ROWS=cddp; shift ;;
    --no-reference) REFERENCE=0; shift ;;
    --python) [ -x "${2:-}" ] || { echo "elastic_bench.sh: --python needs an interpreter's path, got '${2:-}'" >&2; exit 2; }
      PYTHON=$2; shift 2 ;;
    -h|--help) sed -n '2,27s/^# \{0,1\}//p' "$0"; exit 0 ;;
    *) echo "elastic_bench.sh: unknown argument '$1' (--kill-at STEP|random, --ckpt-every K, --repeat N, --out DIR, --monitor-interval S, --agents 1|2, --rows LIST, --cddp-only, --no-reference, --python PATH)" >&2; exit 2 ;;
  esac
done
[ "$KILL_AT" = random ] || [ "$KILL_AT" -lt 230 ] || { echo "elastic_bench.sh: --kill-at must be below 230 (the epoch has 234 steps)" >&2; exit 2; }
ROWS=${ROWS//,/ }
OUT=${OUT:-$(mktemp -d /tmp/cddp-elastic-bench.XXXXXX)}
mkdir -p "$OUT" && OUT=$(cd "$OUT" && pwd)
make -j"$(nproc)" cli >"$OUT/build.log" 2>&1 || { tail -20 "$OUT/build.log"; exit 1; }
if [ "$ROWS" != cddp ] && ! "$PYTHON" -c 'import torch' 2>/dev/null; then
  echo "elastic_bench.sh: $PYTHON has no torch (scripts/install-deps.sh bench: Debian's; test: .venv's torch 2.x)" >&2; exit 1
fi
# Debian's OpenBLAS does not recognise this VM's CPU: name the best core it runs (SkylakeX needs AVX-512)
OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-$("$ROOT"/scripts/openblas-coretype.sh)}
[ -n "$OPENBLAS_CORETYPE" ] && export OPENBLAS_CORETYPE
echo "elastic_bench.sh: torch $("$PYTHON" -c 'import torch; print(torch.__version__)' 2>/dev/null || echo -) ($PYTHON)" >&2
CDDP=$ROOT/build/cddp
PEER=$ROOT/bench/peers/ddp_fmnist_elastic.py
export OMP_NUM_THREADS=1 OMP_WAIT_POLICY=PASSIVE
bg=()
cleanup() { for p in "${bg[@]}"; do kill -KILL -- "-$p" "$p" 2>/dev/null; done; }
trap cleanup EXIT
say() { echo "elastic_bench.sh: $*" >&2; }

last_step() { grep '"step"' "$1" 2>/dev/null | tail -1 | sed -n 's/.*"step": *\([0-9]*\).*/\1/p'; }
# worker_pid PATTERN: the pid of rank 1's worker (RANK=1 in its environment; the launchers
# carry the same command line but no RANK)
worker_pid() {
  local p
  for p in $(pgrep -f -- "$1"); do
    tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null | grep -q 'torch.distributed.run' && continue
    tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx "RANK=1" && { echo "$p"; return; }
  done
}

# run_job NAME STEPLOG PATTERN CMD...: starts CMD (its own process group), SIGKILLs rank 1's
# worker once STEPLOG passes KILL_AT (unless NOKILL=1), waits; writes NAME.kill (kill time,
# last step logged, pid), NAME.wall (seconds, launch -> exit) and NAME.rc
run_job() {
  local name=$1 log=$2 pat=$3; shift 3
  local t0 t1 pid p="" i ls kt
  t0=$(date +%s.%N)
  setsid "$@" >"$OUT/$name.out" 2>&1 &
  pid=$!; bg+=("$pid")
  [ "${NOKILL:-0}" = 1 ] && { echo "0 0 0" >"$OUT/$name.kill"; wait "$pid"; echo $? >"$OUT/$name.rc"; t1=$(date +%s.%N)
    awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f\n", b - a }' >"$OUT/$name.wall"; return; }
  # rank 1's worker is looked up as soon as it runs, so that the kill follows the step log
  # within one poll (looking it up after the step took 5-15 steps more)
  for i in $(seq 6000); do # 300 s at most
    [ -n "$p" ] || p=$(worker_pid "$pat")
    [ -n "$p" ] && [ "$(last_step "$log")" -ge "$KILL_AT" ] 2>/dev/null && break
    kill -0 "$pid" 2>/dev/null || { p=""; break; }
    sleep 0.05
  done
  if [ -n "$p" ]; then
    # the step first, then the clock (no fork: $EPOCHREALTIME) right before the kill
    ls=$(last_step "$log")
    kt=${EPOCHREALTIME/,/.}; kill -KILL "$p"
    echo "$kt $ls $p" >"$OUT/$name.kill"
  else
    say "$name: no rank-1 worker to kill at step $KILL_AT"; echo "0 0 0" >"$OUT/$name.kill"
  fi
  wait "$pid"; echo $? >"$OUT/$name.rc"
  t1=$(date +%s.%N)
  awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f\n", b - a }' >"$OUT/$name.wall"
}

acc_of() {
  grep '"eval"' "$1" 2>/dev/null | tail -1 | sed -n 's/.*"accuracy": *\([0-9.]*\).*/\1/p' |
    awk '{ printf "%.4f\n", $1 } END { if (!NR) print "-" }'
}

free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
# launch: the launcher flags for AGENTS; twice CMD...: CMD twice at once (two launchers), exit
# status non-zero when either's is
launch() {
  if [ "$AGENTS" = 1 ]; then echo "$1"; return; fi
  local p; p=$(free_port)
  case $1 in
    cddp*) echo "--nnodes 2 --nproc-per-node 2 --rdzv-backend c10d --rdzv-endpoint 127.0.0.1:$p --rdzv-id E$p" ;;
    torchrun) echo "--nnodes 2 --nproc_per_node 2 --rdzv_backend c10d --rdzv_endpoint 127.0.0.1:$p --rdzv_id E$p" ;;
  esac
}
TWICE=(bash -c '"$@" & a=$!; "$@" & b=$!; wait $a; r=$?; wait $b; exit $((r | $?))' twice)
# one_cddp I: one killed run of cddp train; prints "recovery redone wall accuracy blamed rc caught-up"
one_cddp() {
  local w=$OUT/cddp$1 r rec red cau blamed l pre=()
  rm -rf "$w" # a reused --out: a fresh run, not one refused for the last one's folder
  l=$(launch cddp); [ "$l" = cddp ] && l="--standalone --nproc-per-node 2"
  [ "$AGENTS" = 2 ] && pre=("${TWICE[@]}")
  # shellcheck disable=SC2086
  run_job "cddp$1" "$w/run/metrics.jsonl" "--work-dir $w --name run" \
    timeout 300 "${pre[@]}" "$CDDP" run $l --max-restarts 3 --restart-mode replace \
    "$CDDP" train --config configs/fmnist_mlp.yaml --work-dir "$w" --name run --set train.epochs=1 \
    --set checkpoint.every_steps="$CKPT" --set ddp.threads=1 --set batch.micro=$((128 / AGENTS))
  r=$(sed -n 's/.*cddp train: recovered from the loss of rank .* step \([0-9]*\) redone.*/\1/p' "$OUT/cddp$1.out" | head -1)
  read -r rec red cau <<<"$(measure "$w/run/metrics.jsonl" "$OUT/cddp$1.kill" "${r:-0}")"
  blamed=$(sed -n 's/^cddp run: rank \([0-9]*\) .*killed by signal.*/\1/p' "$OUT/cddp$1.out" | head -1)
  echo "$rec $red $(cat "$OUT/cddp$1.wall") $(acc_of "$w/run/metrics.jsonl") ${blamed:--} $(cat "$OUT/cddp$1.rc") $cau"
}
# one_peer torchrun|cddp-run I: one killed run of the torch script under that launcher
one_peer() {
  local w=$OUT/$1$2 r rt rec red cau blamed kt l pre=() cmd
  l=$(launch "$1"); [ "$AGENTS" = 2 ] && pre=("${TWICE[@]}")
  # shellcheck disable=SC2206
  case $1 in
    torchrun) [ "$l" = torchrun ] && l="--standalone --nproc_per_node 2"
      cmd=("$PYTHON" -m torch.distributed.run $l --max_restarts 3 --monitor_interval "$MONITOR" --redirects 1 --tee 1) ;;
    cddp-run) [ "$l" = cddp-run ] && l="--standalone --nproc-per-node 2"
      cmd=("$CDDP" run $l --max-restarts 3 "$PYTHON") ;;
  esac
  run_job "$1$2" "$w/run/steps.jsonl" "ddp_fmnist_elastic.py --run-dir $w/run" \
    timeout 600 "${pre[@]}" "${cmd[@]}" \
    "$PEER" --run-dir "$w/run" --epochs 1 --ckpt-every "$CKPT"
  read -r kt _ _ <"$OUT/$1$2.kill"
  # the restarted group's resume line after the kill: the step of the checkpoint it loaded + 1,
  # and its time
  read -r r rt <<<"$(sed -n 's/.*"resume": *\([0-9]*\).*"time": *\([0-9.]*\).*/\1 \2/p' "$w/run/steps.jsonl" |
    awk -v k="$kt" '$2 > k { print $1 + 1, $2; exit }')"
  read -r rec red cau <<<"$(measure "$w/run/steps.jsonl" "$OUT/$1$2.kill" "${r:-0}" "${rt:-0}")"
  blamed=$(sed -n -e 's/.*failed (exitcode: .*) local_rank: \([0-9]*\) .*/\1/p' \
    -e 's/^cddp run: rank \([0-9]*\) .*killed by signal.*/\1/p' "$OUT/$1$2.out" | head -1)
  echo "$rec $red $(cat "$OUT/$1$2.wall") $(acc_of "$w/run/steps.jsonl") ${blamed:--} $(cat "$OUT/$1$2.rc") $cau"
}
# one ROW I: one_cddp or one_peer
one() { if [ "$1" = cddp ]; then one_cddp "$2"; else one_peer "$1" "$2"; fi; }

# the same jobs uninterrupted, once: the wall time and accuracy a kill is compared with
for row in $ROWS; do
  if [ "$REFERENCE" = 1 ]; then
    say "uninterrupted: $row"
    NOKILL=1 one "$row" 0 | tee "$OUT/$row.ref" >&2
  else
    echo "- - - -" >"$OUT/$row.ref"
  fi
done

SPEC=$KILL_AT kills=()
for i in $(seq "$REPEAT"); do
  # random: one step per repeat, the same for every row
  [ "$SPEC" = random ] && KILL_AT=$((10 + RANDOM % 220))
  kills+=("$KILL_AT")
  for row in $ROWS; do
    say "run $i/$REPEAT: $row, rank 1 killed at step $KILL_AT"
    one "$row" "$i" | tee -a "$OUT/$row.rows" >&2
  done
done

blames() { awk '{ c[$5]++ } END { for (b in c) printf "%s%s", (s++ ? ", " : ""), (length(c) > 1 || NR > 1 ? c[b] "x rank " b : "rank " b); print "" }' "$1"; }
fails() { awk '$6 != 0 { n++ } END { print n + 0 }' "$1"; }

printf '\nrank 1 SIGKILLed at step %s of 234 (checkpoint every %s steps), %s x 1 thread, %s run(s) each; torchrun --monitor_interval %s\n' \
  "$([ "$SPEC" = random ] && echo "${kills[*]} (random)" || echo "$KILL_AT")" "$CKPT" \
  "$([ "$AGENTS" = 1 ] && echo "2 workers" || echo "2 launchers x 2 workers")" "$REPEAT" "$MONITOR"
printf '%-10s %-18s %-14s %-20s %-20s %-26s %-22s %s\n' "" "kill->step (s)" "steps redone" "kill->caught up (s)" "wall (s)" \
  "test accuracy" "error line blamed" "uninterrupted: wall, accuracy"
for row in $ROWS; do
  f=$OUT/$row.rows
  read -r _ _ rw ra _ _ <"$OUT/$row.ref"; [ "$rw" = - ] || rw="$rw s, $ra"
  printf '%-10s %-18s %-14s %-20s %-20s %-26s %-22s %s\n' "$row" \
    "$(cell "$f" 1 "$REPEAT")" "$(cell "$f" 2 "$REPEAT")" "$(cell "$f" 7 "$REPEAT")" "$(cell "$f" 3 "$REPEAT")" \
    "$(cell "$f" 4 "$REPEAT")" "$(blames "$f")" "$rw"
  n=$(fails "$f"); [ "$n" = 0 ] || echo "  ($n run(s) of $row exited non-zero: see $OUT/${row}*.out)"
done
# issue 17's goal, when both launchers ran the torch script: cddp-run's kill->step at most a
# third of torchrun's (medians), and no run redoing more steps than the checkpoint interval
if [ -s "$OUT/cddp-run.rows" ] && [ -s "$OUT/torchrun.rows" ]; then
  read -r c _ <<<"$(stats "$OUT/cddp-run.rows" 1)"; read -r t _ <<<"$(stats "$OUT/torchrun.rows" 1)"
  cat "$OUT/cddp-run.rows" "$OUT/torchrun.rows" | awk -v c="${c:--}" -v t="${t:--}" -v k="$CKPT" '
    $2 != "-" && $2 > r { r = $2 }
    END { if (c == "-" || t == "-") { print "goal: no figure (a run did not recover)"; exit }
      printf "goal: cddp-run kill->step %.2f s = %.2f x torchrun'"'"'s %.2f s (at most 1/3: %s); most steps redone %d (at most the checkpoint interval %d: %s)\n",
        c, c / t, t, c * 3 <= t ? "met" : "missed", r, k, r <= k ? "met" : "missed" }'
fi
echo "logs in $OUT"
