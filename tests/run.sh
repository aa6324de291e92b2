#!/usr/bin/env bash
# run.sh - the whole test suite: installs what is missing, builds with -Werror, runs the unit
# tests, the shell (multi-process, Slurm, namespace) tests, the sanitizer builds and the
# fuzzers briefly; ends with "N passed, N failed, N skipped".
# Usage: tests/run.sh [--quick]   (--quick: skip sanitizers and fuzzing)
# CDDP_SUITE_JOBS (2): how many shell tests run at once; 1 runs them one after another.
# A test that cannot run here says "ok ... # SKIP why": it is counted as skipped, never as
# passed. With CI=true (as .ci/run sets) a skip is a failure: CI installs everything the
# tests need, so a skip there means something this machine could run did not. The one
# exception is hardware: a skip tagged "[cpu:FLAG]" or "[gpu]" is accepted (and counted as
# skipped) when tests/tap.sh's own probe finds this host without it.
set -uo pipefail
cd "$(dirname "$0")/.."
quick=0; [ "${1:-}" = --quick ] && quick=1
log=$(mktemp -d /tmp/cddp-tests.XXXXXX)
passed=0; failed=0; skipped=0
ci=0; [ "${CI:-}" = true ] && ci=1

. tests/tap.sh # count FILE, run_tap NAME CMD..., run_shell_tests
# the shell tests CDDP_SUITE_JOBS (2) at a time, but for those marked "# suite: alone" (tap.sh)
jobs_max=${CDDP_SUITE_JOBS:-2}
[[ $jobs_max =~ ^[1-9][0-9]?$ ]] || { echo "tests/run.sh: CDDP_SUITE_JOBS must be 1 to 99, got '$jobs_max'"; exit 2; }

scripts/install-deps.sh test || { echo "0 passed, 1 failed, 0 skipped"; exit 1; }
if ! make -j"$(nproc)" WERROR=1 all bench >"$log/build.log" 2>&1; then
  tail -30 "$log/build.log"; echo "0 passed, 1 failed, 0 skipped"; exit 1
fi
for t in build/tests/test_*; do run_tap "$(basename "$t")" "$t"; done
# the layers again on OpenBLAS's Haswell kernels, where the linear layer's two forms differ in
# bits (linear_form.c must then keep x W^T); any CPU with AVX2 runs them
grep -qw avx2 /proc/cpuinfo && OPENBLAS_CORETYPE=Haswell run_tap test_model_layers-haswell build/tests/test_model_layers
run_shell_tests

if [ $quick = 0 ]; then
  # the sanitizers slow a test down about 4 times: their bounds are 4 times the suite's own
  san_scale=$(awk -v k="${CDDP_TEST_SCALE:-1}" 'BEGIN { k += 0; print 4 * (k > 0 ? k : 1) }')
  for san in asan tsan; do
    if make -j"$(nproc)" WERROR=1 "$san" >"$log/build-$san.log" 2>&1; then
      # store and comm under both; the trainer's and the launcher's parsers and file formats under
      # ASan+UBSan too, the bf16 product's threads under TSan
      extra=""
      [ "$san" = tsan ] && extra="build-tsan/tests/test_gemm" # the bf16 product's thread pool
      [ "$san" = asan ] && extra="build-asan/tests/test_ckpt build-asan/tests/test_config build-asan/tests/test_data build-asan/tests/test_sampler build-asan/tests/test_optim build-asan/tests/test_run_errfile build-asan/tests/test_run_options build-asan/tests/test_run_status build-asan/tests/test_metrics"
      for t in build-$san/tests/test_store* build-$san/tests/test_comm* $extra; do
        [ -e "$t" ] || continue
        TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1" ASAN_OPTIONS="detect_leaks=1" \
          CDDP_TEST_SCALE=$san_scale run_tap "$san-$(basename "$t")" "$t"
      done
    else
      tail -20 "$log/build-$san.log"; echo "not ok - $san build failed"; failed=$((failed + 1))
    fi
  done
  if make -j"$(nproc)" fuzz >"$log/build-fuzz.log" 2>&1; then
    # each fuzzer is one single-threaded process: run as many at once as there are cores
    # (11 of them at 20 s each were 220 s of a serial suite); results are read back in order
    fuzz_one() { # FUZZER: replays earlier findings (tests/fuzz/regress/NAME/), then new inputs for
      # the time given; new corpus units go to a folder of the log, never to the source tree
      local f=$1 name; name=$(basename "$1"); mkdir -p "$log/corpus-$name"
      local regress=(); [ -d "tests/fuzz/regress/$name" ] && regress=("tests/fuzz/regress/$name")
      timeout 120 "$f" -max_total_time="${CDDP_FUZZ_SECONDS:-20}" -timeout=10 -rss_limit_mb=2048 -artifact_prefix="$log/" \
        "$log/corpus-$name" "${regress[@]}" >"$log/$name.log" 2>&1
      echo $? >"$log/$name.rc"
    }
    fuzzers=(); for f in build/fuzz/fuzz_*; do [ -x "$f" ] && [ -f "$f" ] && fuzzers+=("$f"); done
    for f in "${fuzzers[@]}"; do
      while [ "$(jobs -rp | wc -l)" -ge "$(nproc)" ]; do wait -n; done
      fuzz_one "$f" &
    done
    wait
    for f in "${fuzzers[@]}"; do
      name=$(basename "$f")
      if [ "$(cat "$log/$name.rc" 2>/dev/null)" = 0 ]; then
        echo "ok - fuzz $name (${CDDP_FUZZ_SECONDS:-20} s)"; passed=$((passed + 1))
      else
        echo "not ok - fuzz $name: see $log/$name.log"; failed=$((failed + 1))
        tail -20 "$log/$name.log"
      fi
    done
  else
    tail -20 "$log/build-fuzz.log"; echo "not ok - fuzz build failed"; failed=$((failed + 1))
  fi
fi
echo "logs: $log" >&2
echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]
