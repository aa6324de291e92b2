#!/usr/bin/env bash
# test_slurm_token.sh - a multi-node Slurm job is authenticated without a flag: `cddp run --launcher
# slurm` in a batch script gives the agents it starts through srun a fresh token in their
# environment, so every node holds the same token, no node warns that the store is open, and a
# stranger's client without it is refused by the job's store. Runs on the local Slurm cluster
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
MASTER_PORT=$(free_port)
export MASTER_PORT
out=$CDDP_SLURM_STATE/job.out
# each worker says its token; rank 0 also sends a stranger at the job's store (CDDP_STORE)
cat >"$CDDP_SLURM_STATE/worker.sh" <<EOF
#!/bin/sh
echo "rank \$RANK token \${CDDP_TOKEN:-none}"
[ "\$RANK" = 0 ] && echo "stranger: \$(python3 $PWD/tests/sh/store_attack.py 127.0.0.1 \${CDDP_STORE##*:} read rdzv-watch/latest)"
exit 0
EOF
chmod +x "$CDDP_SLURM_STATE/worker.sh"
timeout 120 "$SL" run sbatch --wait -N2 -o "$out" --wrap \
  "env -u CDDP_TOKEN -u CDDP_TOKEN_FILE $CDDP run --launcher slurm --nproc-per-node 1 $CDDP_SLURM_STATE/worker.sh" \
  >"$CDDP_SLURM_STATE/submit.log" 2>&1
rc=$?
if [ $rc -eq 0 ]; then ok "the batch job ends well"; else fail "the batch job" "sbatch exit $rc: $(tail -5 "$out" 2>/dev/null | tr '\n' ' ')"; fi
tokens=$(grep -o 'rank [01] token [0-9a-f]*' "$out" | awk '{ print $4 }' | sort -u)
n=$(grep -c 'rank [01] token [0-9a-f]\{32\}$' "$out")
if [ "$n" = 2 ] && [ "$(echo "$tokens" | wc -l)" = 1 ]; then ok "both nodes hold the same 32-digit token, no flag given"
else fail "both nodes hold one token" "$(grep 'token' "$out" | tr '\n' ' ')"; fi
if grep -q "unauthenticated" "$out"; then fail "no unauthenticated WARN" "$(grep unauthenticated "$out")"
else ok "no node says its store is unauthenticated"; fi
got=$(sed -n 's/.*stranger: //p' "$out")
if [ "$got" = closed ]; then ok "a stranger without the token is refused by the job's store"
else fail "the stranger is refused" "got: $got"; fi
finish
