#!/usr/bin/env bash
# test_mpirun.sh - a cddp program started by Open MPI's mpirun (no cddp launcher) learns its rank
# from OMPI_COMM_WORLD_*, meets its peers through a store hosted by rank 0, and gets exact results;
# `cddp train` under mpirun trains the same bits as under `cddp run`.
cd "$(dirname "$0")/../.." && source tests/sh/lib.sh
if ! command -v mpirun >/dev/null; then
  echo "ok 1 - test_mpirun:mpirun # SKIP Open MPI is not installed"; exit 0
fi
T=$(mktemp -d /tmp/cddp-mpirun.XXXXXX)
trap 'rm -rf "$T"' EXIT
mpi() { timeout 60 mpirun --allow-run-as-root --oversubscribe "$@"; }

mpi -np 2 "$CDDP" bench allreduce -b 1K -e 4M -f 16 -c 1 >"$T/np2.out" 2>&1; rc=$?
v=$(bench_verdict 2 "$T/np2.out")
if [ $rc -eq 0 ] && [ "$v" = clean ]; then ok "mpirun -np 2: allreduce exact"; else fail "mpirun -np 2: allreduce exact" "exit $rc, $v"; fi

mpi -np 3 "$CDDP" bench reduce_scatter -b 3K -e 3M -f 32 -c 1 >"$T/np3.out" 2>&1; rc=$?
v=$(bench_verdict 3 "$T/np3.out")
if [ $rc -eq 0 ] && [ "$v" = clean ]; then ok "mpirun -np 3: reduce_scatter exact"; else fail "mpirun -np 3: reduce_scatter exact" "exit $rc, $v"; fi

# the ranks mpirun gave are the ranks cddp uses: rank 0 prints, and names both pids
if grep -q "Rank   1 Pid" "$T/np2.out" && grep -q "cddp bench allreduce: 2 ranks on 1 host" "$T/np2.out"; then ok "ranks from OMPI_COMM_WORLD_*"
else fail "ranks from OMPI_COMM_WORLD_*"; fi

# cddp train under mpirun (--launcher mpi) vs under cddp run: same config, same world size,
# one BLAS thread per rank => the same weights, bit for bit
TR=(--config configs/fmnist_mlp.yaml --work-dir "$T" --set model.hidden=[32] --set train.max_steps=20
    --set eval.every_epoch=false --set ddp.threads=1)
mpi -np 2 "$CDDP" train --launcher mpi --name mpi "${TR[@]}" >"$T/train-mpi.out" 2>&1; rc=$?
steps=$(grep -v '"eval"' "$T/mpi/metrics.jsonl" 2>/dev/null | grep -c '"step"')
if [ $rc -eq 0 ] && grep -q "cddp train: MLP.*; world 2 " "$T/train-mpi.out" && [ "$steps" = 20 ] &&
   grep -q "cddp train: done: 20 steps" "$T/train-mpi.out"; then ok "mpirun -np 2 cddp train --launcher mpi: world 2, 20 steps"
else fail "mpirun -np 2 cddp train --launcher mpi" "exit $rc, $steps step lines: $(tail -3 "$T/train-mpi.out" | tr '\n' ' ')"; fi
timeout 120 "$CDDP" run --standalone --nproc-per-node 2 "$CDDP" train --name std "${TR[@]}" >"$T/train-std.out" 2>&1; rc=$?
w=checkpoints/step-000000020/model.safetensors
if [ $rc -eq 0 ] && [ -s "$T/std/$w" ] && cmp -s "$T/mpi/$w" "$T/std/$w"; then ok "mpirun and cddp run train bitwise-equal weights (step 20)"
else fail "mpirun vs cddp run weights" "exit $rc; $(cmp "$T/mpi/$w" "$T/std/$w" 2>&1)"; fi
if diff <(sed 's/"samples_per_s".*//' "$T/mpi/metrics.jsonl") <(sed 's/"samples_per_s".*//' "$T/std/metrics.jsonl") >/dev/null
then ok "mpirun and cddp run: same losses, lr and grad norms at every step"
else fail "mpirun vs cddp run metrics" "$(diff <(sed 's/"samples_per_s".*//' "$T/mpi/metrics.jsonl") <(sed 's/"samples_per_s".*//' "$T/std/metrics.jsonl") | head -2 | tr '\n' ' ')"; fi

# --launcher auto finds mpirun's variables too
mpi -np 2 "$CDDP" train --name auto "${TR[@]}" --set train.max_steps=5 >"$T/train-auto.out" 2>&1; rc=$?
if [ $rc -eq 0 ] && grep -q "; world 2 " "$T/train-auto.out"; then ok "mpirun -np 2 cddp train (launcher auto): world 2"
else fail "mpirun, launcher auto" "exit $rc: $(tail -2 "$T/train-auto.out" | tr '\n' ' ')"; fi

# --launcher mpi outside mpirun: one line naming what is missing, exit 2, no run folder
out=$(env -u OMPI_COMM_WORLD_RANK -u PMI_RANK timeout 30 "$CDDP" train --launcher mpi --name nompi "${TR[@]}" 2>&1); rc=$?
if [ $rc -eq 2 ] && [ "$(grep -c . <<<"$out")" = 1 ] && grep -q "launcher mpi.*mpirun" <<<"$out" && [ ! -e "$T/nompi" ]
then ok "--launcher mpi outside mpirun: one line, exit 2"
else fail "--launcher mpi outside mpirun" "exit $rc: $out"; fi
finish
