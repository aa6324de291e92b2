#!/usr/bin/env bash
# store_host_bench.sh - the agent that hosts the rendezvous store SIGKILLed mid-training, under
# torchrun and under cddp run, side by side (issue 13's reference: what the launchers do today
# when the store's host dies; torchrun: pytorch#67742).
#
# Usage: bench/store_host_bench.sh [--nodes 2|3] [--kill-at STEP] [--rows LIST] [--out DIR]
# Each row: --nodes launchers on this host (default 3: 3 x 1 worker, --nnodes 2:3, a global batch
# of 192, 312 steps; 2: 2 x 2 workers, --nnodes 2, 256, 234 steps), c10d rendezvous at
# 127.0.0.1:P, --max-restarts 3, 1 epoch of the MLP; when the step log reaches STEP (default 60)
# the launcher listening on P (the store's host) is SIGKILLed. With 3 nodes cddp's store moves to
# the next node (docs/store.md, "Failover"), in both restart modes (cddp-run: the survivors restart
# their workers on the new store); with 2 and --nnodes 2 the survivor is below MIN and stops. Rows
# (default cddp,cddp-run,torchrun):
#   cddp      cddp run --restart-mode replace --rdzv-timeout 20 + cddp train (a node cut off from
#             the store waits --rdzv-timeout, default 300 s, for it to come back: 20 s here)
#   cddp-run  cddp run + bench/peers/ddp_fmnist_elastic.py (restart-all)
#   torchrun  Debian's torch 1.13 torchrun + the same script
# Columns: the survivors' exit statuses, the steps completed after the kill (all that were left:
# the job finished), kill -> the next step completed, kill -> the survivors' exit, and a
# survivor's last line.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
ROOT=$PWD
KILL_AT=60
NODES=3
ROWS=cddp,cddp-run,torchrun
OUT=""
while [ $# -gt 0 ]; do
  case "$1" in
    --kill-at) [[ "${2:-}" =~ ^[1-9][0-9]*$ ]] && [ "$2" -lt 230 ] ||
        { echo "store_host_bench.sh: --kill-at needs a step from 1 to 229, got '${2:-}'" >&2; exit 2; }
      KILL_AT=$2; shift 2 ;;
    --rows) [[ "${2:-}" =~ ^(cddp|cddp-run|torchrun)(,(cddp|cddp-run|torchrun))*$ ]] ||
        { echo "store_host_bench.sh: --rows takes cddp, cddp-run and torchrun, comma-separated, got '${2:-}'" >&2; exit 2; }
      ROWS=$2; shift 2 ;;
    --nodes) [[ "${2:-}" =~ ^[23]$ ]] || { echo "store_host_bench.sh: --nodes takes 2 or 3, got '${2:-}'" >&2; exit 2; }
      NODES=$2; shift 2 ;;
    --out) OUT=${2:?--out needs a directory}; shift 2 ;;
    -h|--help) sed -n '2,20s/^# \{0,1\}//p' "$0"; exit 0 ;;
    *) echo "store_host_bench.sh: unknown argument '$1' (--nodes N, --kill-at STEP, --rows LIST, --out DIR)" >&2; exit 2 ;;
  esac
done
OUT=${OUT:-$(mktemp -d /tmp/cddp-store-host-bench.XXXXXX)}
mkdir -p "$OUT" && OUT=$(cd "$OUT" && pwd)
make -j"$(nproc)" cli >"$OUT/build.log" 2>&1 || { tail -20 "$OUT/build.log"; exit 1; }
[ "$ROWS" = cddp ] || /usr/bin/python3 -c 'import torch' 2>/dev/null ||
  { echo "store_host_bench.sh: Debian's python3-torch is missing (scripts/install-deps.sh bench)" >&2; exit 1; }
CDDP=$ROOT/build/cddp
export OMP_NUM_THREADS=1 OMP_WAIT_POLICY=PASSIVE OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-$("$ROOT"/scripts/openblas-coretype.sh)}
pids=()
trap 'for p in "${pids[@]}"; do kill -KILL -- "-$p" "$p" 2>/dev/null; done' EXIT

if [ "$NODES" = 3 ]; then NN=2:3 NPROC=1 GB=192 MICRO=32 STEPS=312; else NN=2 NPROC=2 GB=256 MICRO=64 STEPS=234; fi
[ "$KILL_AT" -lt $((STEPS - 4)) ] || { echo "store_host_bench.sh: --kill-at must be below $((STEPS - 4))" >&2; exit 2; }

# one ROW: prints "rcs steps-after next-step-s exit-s last-line"
one() {
  local row=$1 w=$OUT/$1 p log cmd host t0 kt i n
  rm -rf "$w"; mkdir -p "$w"
  p=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  case $row in
    cddp) log=$w/run/metrics.jsonl
      cmd=("$CDDP" run --nnodes $NN --nproc-per-node $NPROC --rdzv-endpoint "127.0.0.1:$p" --rdzv-id "S$p" --max-restarts 3
           --restart-mode replace --rdzv-timeout 20 "$CDDP" train --config configs/fmnist_mlp.yaml --work-dir "$w" --name run
           --set train.epochs=1 --set checkpoint.every_steps=50 --set ddp.threads=1 --set batch.global=$GB --set batch.micro=$MICRO) ;;
    cddp-run) log=$w/run/steps.jsonl
      cmd=("$CDDP" run --nnodes $NN --nproc-per-node $NPROC --rdzv-endpoint "127.0.0.1:$p" --rdzv-id "S$p" --max-restarts 3
           /usr/bin/python3 bench/peers/ddp_fmnist_elastic.py --run-dir "$w/run" --ckpt-every 50 --global-batch $GB) ;;
    torchrun) log=$w/run/steps.jsonl
      cmd=(/usr/bin/python3 -m torch.distributed.run --nnodes $NN --nproc_per_node $NPROC --rdzv_backend c10d
           --rdzv_endpoint "127.0.0.1:$p" --rdzv_id "S$p" --max_restarts 3 --redirects 1 --tee 1
           bench/peers/ddp_fmnist_elastic.py --run-dir "$w/run" --ckpt-every 50 --global-batch $GB) ;;
  esac
  local l=()
  for i in $(seq 0 $((NODES - 1))); do setsid timeout 300 "${cmd[@]}" >"$w/n$i.out" 2>&1 & pids+=($!); l+=($!); done
  for i in $(seq 3000); do
    n=$(grep '"step"' "$log" 2>/dev/null | tail -1 | sed -n 's/.*"step": *\([0-9]*\).*/\1/p')
    [ "${n:-0}" -ge "$KILL_AT" ] && break; sleep 0.05
  done
  # the store's host: the launcher process listening on P (setsid made each launcher a group leader)
  host=$(ss -Hltnp "sport = :$p" | grep -o 'pid=[0-9]*' | head -1 | cut -d= -f2)
  local sid; sid=$(ps -o sid= -p "$host" 2>/dev/null | tr -d ' ')
  local b; b=$(grep '"step"' "$log" 2>/dev/null | tail -1 | sed -n 's/.*"step": *\([0-9]*\).*/\1/p')
  kt=$(date +%s.%N); kill -KILL "$host"
  local rcs="" sout=""
  for i in $(seq 0 $((NODES - 1))); do
    [ "$sid" = "${l[$i]}" ] && continue
    wait "${l[$i]}"; rcs="$rcs${rcs:+,}$?"; sout=$w/n$i.out
  done
  t0=$(date +%s.%N)
  n=$(awk -v k="$kt" -F'"time": *' '/"step"/ { split($2, a, /[,}]/); if (a[1] > k) c++ } END { print c + 0 }' "$log")
  local next; next=$(awk -v k="$kt" -F'"time": *' '/"step"/ { split($2, a, /[,}]/); if (a[1] > k) { printf "%.2f", a[1] - k; exit } }' "$log")
  echo "$rcs $n $((STEPS - ${b:-0})) ${next:--} $(awk -v a="$kt" -v b="$t0" 'BEGIN { printf "%.1f", b - a }') $(grep -v '^\[' "$sout" | grep . | tail -1 | cut -c1-150)"
}
printf 'the store-hosting launcher SIGKILLed at step %s of %s; %s launchers x %s workers, c10d, --nnodes %s\n' "$KILL_AT" $STEPS $NODES $NPROC $NN
printf '%-9s %-16s %-18s %-16s %-14s %s\n' "" "survivors' exit" "steps after kill" "kill->step (s)" "kill->exit (s)" "a survivor's last line"
for row in ${ROWS//,/ }; do
  echo "store_host_bench.sh: $row" >&2
  read -r rc n left nx s line <<<"$(one "$row")"
  printf '%-9s %-16s %-18s %-16s %-14s %s\n' "$row" "$rc" "$n of $left" "$nx" "$s" "$line"
done
echo "logs in $OUT"
