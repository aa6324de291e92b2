#!/usr/bin/env bash
# test_slurm_token.sh - a multi-node Slurm job is authenticated without a flag: `cddp run --launcher
# slurm` in a batch script gives the agents it starts through srun a fresh token in their
# environment, and a hand-written `srun cddp run` reads the job's token from a private file in
# the (shared) home folder; either way every node holds the same token, no node warns that the
# store is open, a stranger's client without it is refused by the job's store, and the token file
# is gone once the job ends. Runs on the local Slurm cluster
# (tests/cluster/slurm-local.sh; by hand: under flock /tmp/cddp-cluster.lock).
# suite: alone (the machine-global local Slurm cluster)
set -u
cd "$(dirname "$0")/../.." || exit 1
. tests/sh/lib.sh
SL=tests/cluster/slurm-local.sh
export CDDP_SLURM_STATE
CDDP_SLURM_STATE=$(mktemp -d /tmp/cddp-test-slurm-token.XXXXXX)
trap 'timeout 30 "$SL" down >/dev/null 2>&1; rm -rf "$CDDP_SLURM_STATE"' EXIT
if ! command -v srun >/dev/null || ! command -v sbatch >/dev/null; then
  echo "ok 1 - test_slurm_token # SKIP Slurm is not installed (scripts/install-deps.sh test)"; exit 0
fi
if timeout 60 "$SL" up 2 >"$CDDP_SLURM_STATE/up.log" 2>&1; then ok cluster_up
else fail cluster_up "$(tail -3 "$CDDP_SLURM_STATE/up.log" | tr '\n' ' ')"; finish; fi
export MASTER_ADDR=127.0.0.1 # loopback node names resolve nowhere (tests/cluster/README.md)
export MASTER_PORT
# each worker says its token; rank 0 also sends a stranger at the job's store (CDDP_STORE)
cat >"$CDDP_SLURM_STATE/worker.sh" <<EOF
#!/bin/sh
echo "rank \$RANK token \${CDDP_TOKEN:-none}"
[ "\$RANK" = 0 ] && echo "stranger: \$(python3 $PWD/tests/sh/store_attack.py 127.0.0.1 \${CDDP_STORE##*:} read rdzv-watch/latest)"
exit 0
EOF
chmod +x "$CDDP_SLURM_STATE/worker.sh"
# job NAME COMMAND: runs COMMAND as a 2-node batch job with no token given, then checks that both
# nodes hold one 32-digit token, none warns of an open store, and the stranger was refused
job() {
  local name=$1 out=$CDDP_SLURM_STATE/$2.out
  MASTER_PORT=$(free_port)
  timeout 120 "$SL" run sbatch --wait -N2 -o "$out" --wrap "env -u CDDP_TOKEN -u CDDP_TOKEN_FILE $3" \
    >"$CDDP_SLURM_STATE/$2.submit.log" 2>&1
  local rc=$? tokens n got
  if [ $rc -eq 0 ]; then ok "$name: the job ends well"; else fail "$name: the job" "sbatch exit $rc: $(tail -5 "$out" 2>/dev/null | tr '\n' ' ')"; fi
  tokens=$(grep -o 'rank [01] token [0-9a-f]*' "$out" | awk '{ print $4 }' | sort -u)
  n=$(grep -c 'rank [01] token [0-9a-f]\{32\}$' "$out")
  if [ "$n" = 2 ] && [ "$(echo "$tokens" | wc -l)" = 1 ]; then ok "$name: both nodes hold the same 32-digit token, no flag given"
  else fail "$name: both nodes hold one token" "$(grep 'token' "$out" | tr '\n' ' ')"; fi
  if grep -q "unauthenticated" "$out"; then fail "$name: no unauthenticated WARN" "$(grep unauthenticated "$out")"
  else ok "$name: no node says its store is unauthenticated"; fi
  got=$(sed -n 's/.*stranger: //p' "$out")
  if [ "$got" = closed ]; then ok "$name: a stranger without the token is refused by the job's store"
  else fail "$name: the stranger is refused" "got: $got"; fi
}
job "cddp run --launcher slurm" batch "$CDDP run --launcher slurm --nproc-per-node 1 $CDDP_SLURM_STATE/worker.sh"
# a hand-written srun step, no --launcher: the job's token file, in a home of the test's own
export HOME=$CDDP_SLURM_STATE/home
mkdir -p "$HOME"
job "srun cddp run" srun "srun --ntasks-per-node=1 $CDDP run --nproc-per-node 1 $CDDP_SLURM_STATE/worker.sh"
# one task per rank over 2 nodes (no agent): every rank gets the job's token for rank 0's store
out=$CDDP_SLURM_STATE/ranks.out
timeout 120 "$SL" run sbatch --wait -N2 -o "$out" --wrap \
  "env -u CDDP_TOKEN -u CDDP_TOKEN_FILE srun -O --ntasks-per-node=2 $CDDP run $CDDP_SLURM_STATE/worker.sh" \
  >"$CDDP_SLURM_STATE/ranks.submit.log" 2>&1
rc=$?
n=$(grep -c 'rank [0-3] token [0-9a-f]\{32\}$' "$out")
tokens=$(grep -o 'rank [0-3] token [0-9a-f]*' "$out" | awk '{ print $4 }' | sort -u | wc -l)
if [ $rc = 0 ] && [ "$n" = 4 ] && [ "$tokens" = 1 ]; then ok "srun -n 4 cddp run (a task per rank): the 4 ranks hold one token"
else fail "a task per rank: one token" "sbatch exit $rc: $(grep 'token' "$out" | tr '\n' ' ')"; fi
rm -f "$HOME"/.cddp/slurm-tokens/* # no agent removes a rank job's file (it goes a month later)
left=$(find "$HOME/.cddp/slurm-tokens" -type f 2>/dev/null | wc -l)
mode=$(stat -c %a "$HOME/.cddp/slurm-tokens" 2>/dev/null)
if [ "$left" = 0 ] && [ "$mode" = 700 ]; then ok "the token folder is private (700) and the job's file is gone"
else fail "the token file is removed" "folder mode ${mode:-none}, $left files left: $(ls -la "$HOME/.cddp/slurm-tokens" 2>&1 | tr '\n' ' ')"; fi
finish
