#!/usr/bin/env bash
# test_mpirun.sh - a cddp program started by Open MPI's mpirun (no cddp launcher) learns its rank
# from OMPI_COMM_WORLD_*, meets its peers through a store hosted by rank 0, and gets exact results;
# `cddp train` under mpirun trains the same bits as under `cddp run`; --backend mpi runs every
# collective on Open MPI's own, exact, with the native backend's losses; a build without MPI
# says so in one line.
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
# ---- backend mpi: the collectives are Open MPI's (src/comm/mpi.c)
B=$(dirname "$CDDP")
if CDDP_BACKEND=mpi "$CDDP" bench allreduce -b 1K -e 1K 2>&1 | grep -q "not built"; then
  echo "ok $((t_n + 1)) - test_mpirun:backend mpi # SKIP this cddp is built without MPI"; t_n=$((t_n + 1))
else
  mpi -np 2 "$CDDP" bench allreduce --backend mpi -b 1K -e 4M -f 16 -c 1 >"$T/mb2.out" 2>&1; rc=$?
  v=$(bench_verdict 2 "$T/mb2.out")
  if [ $rc -eq 0 ] && [ "$v" = clean ] && grep -q "transport mpi" "$T/mb2.out"; then ok "backend mpi, np 2: allreduce exact"
  else fail "backend mpi, np 2: allreduce exact" "exit $rc, $v"; fi
  for c in "reduce_scatter -d bfloat16 -o avg" "allreduce -d half -o avg" "allreduce -d int64 -o avg" "allreduce -d double -o max" \
           "allgather -d bfloat16" "broadcast -d int32 -r 2"; do
    mpi -np 3 "$CDDP" bench $c --backend mpi -b 3K -e 3M -f 32 -c 1 >"$T/mb3.out" 2>&1; rc=$?
    v=$(bench_verdict 3 "$T/mb3.out")
    if [ $rc -eq 0 ] && [ "$v" = clean ] && grep -q "transport mpi" "$T/mb3.out"; then ok "backend mpi, np 3: $c exact"
    else fail "backend mpi, np 3: $c exact" "exit $rc, $v"; fi
  done
  for np in 2 3; do
    out=$(mpi -np $np "$B/tests/helpers/mpi_worker" aliasing 2>&1); rc=$?
    if [ $rc -eq 0 ] && grep -q "mpi_worker: $np ranks, transport mpi, 0 wrong" <<<"$out"; then ok "backend mpi, np $np: in-place forms, async, bf16, f16, i64 avg"
    else fail "backend mpi, np $np: aliasing forms" "exit $rc: $(tail -3 <<<"$out" | tr '\n' ' ')"; fi
  done
  # a peer that never arrives: rank 0 fails within CDDP_TIMEOUT_MS / at abort, and mpirun ends the job
  for m in timeout abort; do
    s0=$(date +%s); out=$(mpi -np 2 "$B/tests/helpers/mpi_worker" $m 2>&1); rc=$?; s=$(($(date +%s) - s0))
    want=$([ $m = timeout ] && echo "timed out.*did not complete within 1000 ms" || echo "aborted .*after 0\.[0-9] s.*MPI cannot cancel")
    if [ $rc -ne 0 ] && [ $rc -ne 124 ] && [ $s -lt "$(scaled 20 | cut -d. -f1)" ] && grep -q "rank 0: $want" <<<"$out"; then ok "backend mpi: $m returns, the job ends (${s}s)"
    else fail "backend mpi: $m" "exit $rc after ${s}s: $(grep 'rank 0' <<<"$out" | head -1)"; fi
  done
  # training: np 2 equals the native run above bit for bit (a sum of two is the same in any order)
  mpi -np 2 "$CDDP" train --backend mpi --name mpib "${TR[@]}" >"$T/train-mpib.out" 2>&1; rc=$?
  if [ $rc -eq 0 ] && [ -s "$T/mpib/$w" ] && cmp -s "$T/mpib/$w" "$T/std/$w" &&
     diff <(sed 's/"samples_per_s".*//' "$T/mpib/metrics.jsonl") <(sed 's/"samples_per_s".*//' "$T/std/metrics.jsonl") >/dev/null
  then ok "mpirun -np 2 train --backend mpi: losses and weights bitwise equal to native"
  else fail "train --backend mpi vs native (np 2)" "exit $rc: $(tail -2 "$T/train-mpib.out" | tr '\n' ' ')"; fi
  # np 3: sums of three may round in another order, so equal within 1e-5 (bitwise is reported)
  T3=(--set batch.global=384 --set train.max_steps=10)
  mpi -np 3 "$CDDP" train --backend mpi --name mpi3 "${TR[@]}" "${T3[@]}" >"$T/train-mpi3.out" 2>&1; rc1=$?
  timeout 120 "$CDDP" run --standalone --nproc-per-node 3 "$CDDP" train --name std3 "${TR[@]}" "${T3[@]}" >"$T/train-std3.out" 2>&1; rc2=$?
  cmpl=$(paste -d' ' <(grep -o '"loss":[-0-9.e]*' "$T/mpi3/metrics.jsonl" 2>/dev/null) <(grep -o '"loss":[-0-9.e]*' "$T/std3/metrics.jsonl" 2>/dev/null) |
         awk '{ split($1, a, ":"); split($2, b, ":"); d = a[2] - b[2]; if (d < 0) d = -d; if (d > 1e-5 * (b[2] < 0 ? -b[2] : b[2])) bad++; if (a[2] != b[2]) ne++ }
              END { printf "%d %d %d", NR, bad + 0, ne + 0 }')
  read -r nl nbad nne <<<"$cmpl"
  if [ $rc1 -eq 0 ] && [ $rc2 -eq 0 ] && [ "$nl" = 11 ] && [ "$nbad" = 0 ]; then
    ok "mpirun -np 3 train --backend mpi: losses equal native's ($([ "$nne" = 0 ] && echo bitwise || echo "$nne differ in the last digits"))"
  else fail "train --backend mpi vs native (np 3)" "exit $rc1/$rc2, $nl lines, $nbad beyond 1e-5"; fi
  # backend mpi without mpirun: MPI sees a world of one; each rank says so in one line
  out=$(timeout 60 "$CDDP" run --standalone --nproc-per-node 2 "$CDDP" bench allreduce --backend mpi -b 1K -e 1K 2>&1); rc=$?
  if [ $rc -ne 0 ] && [ $rc -ne 124 ] && grep -q "MPI says rank 0 of 1 but cddp has rank [01] of 2: start every rank with mpirun" <<<"$out"
  then ok "backend mpi under cddp run: one line naming mpirun"
  else fail "backend mpi under cddp run" "exit $rc: $(head -2 <<<"$out" | tr '\n' ' ')"; fi
fi

# a build without MPI: mpi.c compiled as in `make NO_MPI=1`, linked in place of the real one
if gcc -std=gnu11 -Iinclude -Isrc -Isrc/app -D_GNU_SOURCE -DCDDP_HAVE_MPI=0 -DCDDP_HAVE_NCCL=0 -c src/comm/mpi.c -o "$T/mpi_off.o" &&
   gcc -o "$T/cddp-nompi" "$T/mpi_off.o" "$B"/obj/src/app/cli/main.o "$B/libcddp-app.a" "$B/libcddp.a" $(make -s print-ldlibs); then
  out=$("$T/cddp-nompi" train --backend mpi --name nompi2 "${TR[@]}" 2>&1); rc=$?
  if [ $rc -ne 0 ] && [ "$(grep -c . <<<"$out")" = 1 ] && [ ! -e "$T/nompi2" ] &&
     grep -q "backend 'mpi' is not built into this cddp (install libopenmpi-dev and rebuild)" <<<"$out"
  then ok "no-MPI build: --backend mpi is one line"
  else fail "no-MPI build: --backend mpi" "exit $rc: $out"; fi
else
  fail "no-MPI build of src/comm/mpi.c links"
fi
finish
