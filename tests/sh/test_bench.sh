#!/usr/bin/env bash
# test_bench.sh - `cddp bench` end to end under `cddp run`: exact results for every collective, TCP, zero-copy,
# huge-page buffers, 3 ranks; bad flags; bench/shm_ceiling (the bare mechanisms) gives exact results too.
set -u
cd "$(dirname "$0")/../.." || exit 1
. tests/sh/lib.sh
T=${CDDP_BENCH_TEST_TIMEOUT:-120}
tmp=$(mktemp -d /tmp/cddp-test-bench.XXXXXX)
trap 'rm -rf "$tmp"' EXIT

# bench NAME NPROC ARGS...: ok when the run exits 0, prints rows, every #wrong is 0, and the
# header names NPROC ranks. The output stays in $tmp/NAME.out for the checks that follow.
bench() {
  local name=$1 np=$2; shift 2
  local out="$tmp/$name.out" rc
  timeout "$T" "$CDDP" run --standalone --nproc-per-node "$np" "$CDDP" bench "$@" >"$out" 2>&1
  rc=$?
  local verdict
  verdict=$(bench_verdict "$np" "$out")
  if [ $rc -eq 0 ] && [ "$verdict" = clean ]; then
    ok "$name"
  else
    fail "$name" "exit $rc, $verdict"
    sed 's/^/# /' "$out" | tail -15
  fi
}

# the issue's Done-when check, exactly
bench allreduce_2 2 allreduce -b 1M -e 64M -f 4 -c 1
bench allgather_2 2 allgather -b 1K -e 4M -f 16 -c 1
bench reduce_scatter_2 2 reduce_scatter -b 1K -e 4M -f 16 -c 1
bench broadcast_2 2 broadcast -b 1K -e 4M -f 16 -r 1 -c 1
bench zero_copy 2 allreduce -b 1K -e 16M -f 16 -c 1 --zero-copy
check zero_copy_header grep -q "zero-copy" "$tmp/zero_copy.out"
bench thp 2 allreduce -b 1K -e 4M -f 16 -c 1 --thp
check thp_header grep -q "ordinary (transparent huge pages) buffers" "$tmp/thp.out"
# the bench says how much of its buffers the kernel really put on huge pages: some, unless THP is off
huge=$(sed -nE 's/.*--thp: ([0-9.]+) of ([0-9.]+) MiB.*/\1 \2/p' "$tmp/thp.out")
if grep -q '\[never\]' /sys/kernel/mm/transparent_hugepage/enabled 2>/dev/null; then
  [ -n "$huge" ] && ok "thp_pages (THP off on this host: $huge MiB)" || fail thp_pages "no --thp line"
elif [ -n "$huge" ] && awk -v h="${huge% *}" 'BEGIN { exit !(h > 0) }'; then ok "thp_pages (${huge% *} of ${huge#* } MiB)"
else fail thp_pages "huge pages: '${huge:-no --thp line}'"; fi
CDDP_TRANSPORT=tcp bench tcp_forced 2 allreduce -b 1K -e 4M -f 16 -c 1
check tcp_header grep -q "transport tcp" "$tmp/tcp_forced.out"
bench world_3 3 allreduce -b 1K -e 4M -f 16 -c 1
bench world_3_reduce_scatter 3 reduce_scatter -b 1K -e 1M -f 32 -c 1
bench world_3_allgather 3 allgather -b 1K -e 1M -f 32 -c 1
bench bf16_avg 2 allreduce -b 1K -e 1M -f 32 -d bfloat16 -o avg -c 1
bench f16_avg 3 allreduce -b 1K -e 1M -f 32 -d half -o avg -c 1
CDDP_TRANSPORT=tcp bench f16_tcp_reduce_scatter 3 reduce_scatter -b 3K -e 3M -f 32 -d f16 -c 1
bench int64_max_nonblocking 3 allreduce -b 1K -e 1M -f 32 -d int64 -o max -z 0 -n 5 -c 1
bench algo_ring 2 allreduce -b 1K -e 1M -f 32 --algo ring -c 1
bench algo_direct 2 allreduce -b 1K -e 64K -f 8 --algo direct -c 1

# the columns: size count type redop root time algbw busbw #wrong, and the closing lines
rowline=$(sed -E 's/^\[[^]]*\] ?//' "$tmp/allreduce_2.out" | awk '$1 == 16777216')
if [ "$(echo "$rowline" | awk '{print $2, $3, $4, $5, NF}')" = "4194304 float sum -1 9" ] &&
   grep -q "# Avg bus bandwidth" "$tmp/allreduce_2.out"; then ok columns; else fail columns "row: $rowline"; fi

# a world of one: no launcher, no environment
out=$(env -u RANK -u WORLD_SIZE -u MASTER_ADDR -u MASTER_PORT -u CDDP_STORE timeout 30 "$CDDP" bench allreduce -b 1K -e 4K -f 4 -c 1 2>&1)
if echo "$out" | grep -q "Out of bounds values : 0 OK" && echo "$out" | grep -q ": 1 ranks"; then ok world_1; else fail world_1 "$out"; fi

# bad input: exit 2, the first line names what is wrong, then the usage; nothing on stdout
badflag() { # NAME EXPECTED-TEXT ARGS...
  local name=$1 want=$2; shift 2
  local err="$tmp/$name.err" out rc
  out=$(timeout 10 "$CDDP" bench "$@" 2>"$err"); rc=$?
  if [ $rc -eq 2 ] && [ -z "$out" ] && head -1 "$err" | grep -qF -- "$want" && grep -q '^usage: cddp bench' "$err"; then
    ok "$name"
  else
    fail "$name" "exit $rc; $(head -1 "$err")"
  fi
}
badflag bad_flag "unknown option '--frobnicate'" allreduce --frobnicate
badflag bad_size "bad size '12Q'" allreduce -b 12Q
badflag bad_dtype "unsupported datatype 'fp8'" allreduce -d fp8
badflag bad_op "unsupported op 'prod'" allreduce -o prod
badflag bad_collective "unknown collective 'alltoall'" alltoall
badflag no_collective "which collective?"
badflag missing_value "option -n needs a value" allreduce -n
badflag iters_bound "bad iteration count '400000000' for -n (1 to 10000000)" allreduce -n 400000000
badflag bad_transport "bad transport 'ib'" allreduce --transport ib
badflag thp_and_zero_copy "--thp and --zero-copy exclude each other" allreduce --thp --zero-copy
badflag bad_device "bad device 'gpu' for --device (cpu or cuda)" allreduce --device gpu
badflag device_not_allreduce "--device cuda runs allreduce only" allgather --device cuda
# a root outside the world: one line, exit 2, on every rank of the job
out=$(timeout "$T" "$CDDP" run --standalone --nproc-per-node 2 "$CDDP" bench broadcast -r 5 -b 1K -e 1K 2>&1); rc=$?
if [ $rc -ne 0 ] && echo "$out" | grep -q "root 5 is not a rank"; then ok bad_root; else fail bad_root "exit $rc: $out"; fi

# bench/shm_ceiling, the bare mechanisms compare.sh prints beside ours: every row exact, bad flags named
if make -C bench ceiling >"$tmp/ceiling-build.log" 2>&1; then
  CEIL=build/bench/shm_ceiling
  for thp in "" --thp; do
    out=$(timeout 60 "$CEIL" -b 4K -e 256K -f 64 -n 20 -w 2 --chunk 4K $thp 2>&1); rc=$?
    rows=$(echo "$out" | awk 'NF == 6 && $1 ~ /^[0-9]+$/ && $6 == 0' | wc -l)
    if [ $rc -eq 0 ] && [ "$rows" = 6 ]; then ok "shm_ceiling${thp:+ $thp}: 3 mechanisms x 2 sizes exact"
    else fail "shm_ceiling${thp:+ $thp}" "exit $rc, $rows exact rows: $out"; fi
  done
  out=$("$CEIL" -m rdma 2>&1); rc=$?
  [ $rc -eq 2 ] && echo "$out" | grep -q "'rdma' is not zero-copy, cma, staged or all" && ok shm_ceiling_bad_mechanism ||
    fail shm_ceiling_bad_mechanism "exit $rc: $out"
  out=$("$CEIL" -b 1M -e 1M -m staged --chunk 384K 2>&1); rc=$?
  [ $rc -eq 2 ] && echo "$out" | grep -q "staged needs a multiple of 393216" && ok shm_ceiling_bad_chunk ||
    fail shm_ceiling_bad_chunk "exit $rc: $out"
else
  fail shm_ceiling_builds "$(tail -3 "$tmp/ceiling-build.log")"
fi

# a peer killed mid-run: the survivor exits 1 within 2 s with one line naming the dead rank
port=$(free_port)
(export MASTER_ADDR=127.0.0.1 MASTER_PORT=$port WORLD_SIZE=2 LOCAL_WORLD_SIZE=2
 RANK=0 LOCAL_RANK=0 exec timeout 60 "$CDDP" bench allreduce -b 4M -e 4M -n 1000000 -c 0 >"$tmp/kill0.out" 2>&1) &
p0=$!
(export MASTER_ADDR=127.0.0.1 MASTER_PORT=$port WORLD_SIZE=2 LOCAL_WORLD_SIZE=2
 RANK=1 LOCAL_RANK=1 exec "$CDDP" bench allreduce -b 4M -e 4M -n 1000000 -c 0 >"$tmp/kill1.out" 2>&1) &
p1=$!
await "kill: rank 0 prints its table" 10 grep -qs "(B)" "$tmp/kill0.out" # then the kill lands in the warm-up or after
t0=$(date +%s%N)
kill -9 $p1 2>/dev/null
wait $p0; rc=$?
ms=$(( ($(date +%s%N) - t0) / 1000000 ))
wait $p1 2>/dev/null
if [ $rc -eq 1 ] && [ $ms -le "$(scaled 2000 | cut -d. -f1)" ] && grep -qE "rank 0: (warm-up|barrier|allreduce) .* failed: .*rank 1" "$tmp/kill0.out"; then ok peer_killed
else fail peer_killed "exit $rc after $ms ms: $(tail -1 "$tmp/kill0.out")"; fi
# bench/train_bench.sh refuses a bad --rounds with one line and exit 2, before installing or building anything
bench/train_bench.sh --rounds 0 >"$tmp/tb.out" 2>&1
rc=$?
[ $rc -eq 2 ] && grep -q -- "--rounds needs a positive number" "$tmp/tb.out" && [ "$(wc -l <"$tmp/tb.out")" -eq 1 ] &&
  ok "train_bench_bad_rounds" || fail "train_bench_bad_rounds" "exit $rc: $(head -2 "$tmp/tb.out")"
# bench/cpu_peak: the clock and the peaks, then every product's row with a positive rate; a bad
# argument is one line and exit 2
if [ -x build/bench/cpu_peak ]; then
  build/bench/cpu_peak -r 2 >"$tmp/peak.out" 2>&1; rc=$?
  [ $rc -eq 0 ] && grep -qE '^clock [0-9.]+ GHz; fp32 FMA peak [0-9.]+ GFLOP/s' "$tmp/peak.out" &&
    [ "$(grep -cE '^(MLP|GPT) .* [0-9]+\.[0-9] +[0-9]+%' "$tmp/peak.out")" -eq 9 ] &&
    ok "cpu_peak: $(head -1 "$tmp/peak.out")" || fail "cpu_peak" "exit $rc: $(head -3 "$tmp/peak.out")"
  build/bench/cpu_peak -r 0 >"$tmp/peak_bad.out" 2>&1; rc=$?
  [ $rc -eq 2 ] && [ "$(wc -l <"$tmp/peak_bad.out")" -eq 1 ] && ok "cpu_peak_bad_reps" || fail "cpu_peak_bad_reps" "exit $rc"
else
  fail "cpu_peak" "build/bench/cpu_peak was not built (make bench)"
fi
finish
