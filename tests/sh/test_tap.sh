#!/usr/bin/env bash
# test_tap.sh - tests/run.sh's counting (tests/tap.sh): a skip is never a pass; with CI=true a
# skip is a failure unless it is tagged for hardware that run.sh's own probe finds missing.
cd "$(dirname "$0")/../.." && source tests/sh/lib.sh
T=$(mktemp -d /tmp/cddp-tap.XXXXXX)
trap 'rm -rf "$T"' EXIT
printf 'flags\t\t: fpu sse avx avx2\n' >"$T/cpuinfo"
cat >"$T/tap" <<'TAP'
ok 1 - a:passes (1 ms)
ok 2 - a:bf16 (1 ms) # SKIP [cpu:avx512_bf16] the bf16 product needs it
ok 3 - a:avx2 (1 ms) # SKIP [cpu:avx2] claims a flag the host has
ok 4 - a:nccl (1 ms) # SKIP [gpu] no GPU
ok 5 - a:torch (1 ms) # SKIP no torch here
ok 6 - a:odd (1 ms) # SKIP [cpu:AVX;rm] not a flag
not ok 7 - a:fails (exit 1)
# ok 8 - a comment is no test
ok 9 - a:bind # SKIP [cpus:100000] one CPU to run on
ok 10 - a:bind1 # SKIP [cpus:1] claims fewer CPUs than any host has
TAP
tally() { # CI GPU(0|1): "passed failed skipped" for $T/tap
  (
    passed=0 failed=0 skipped=0 ci=$1 gpu=$2
    . tests/tap.sh
    tap_cpuinfo=$T/cpuinfo
    tap_gpu_present() { [ "$gpu" = 1 ]; }
    count "$T/tap" >"$T/listed.$1$2"
    echo "$passed $failed $skipped"
  ) 2>&1
}
r=$(tally 0 0)
check "outside CI every skip is a skip, none a pass [$r]" test "$r" = "1 1 7"
r=$(tally 1 0)
check "in CI only the skips of missing hardware are accepted [$r]" test "$r" = "1 5 3"
check "in CI the accepted skips say what the host lacks" grep -q '^ok 2 .*(this host has no cpu:avx512_bf16)$' "$T/listed.10"
check "in CI a refused skip is listed as a failure" grep -q '^not ok (a skip in CI) 5 - a:torch' "$T/listed.10"
r=$(tally 1 1)
check "in CI a [gpu] skip fails where a GPU is present [$r]" test "$r" = "1 6 2"
printf 'processor\t: 0\n' >"$T/cpuinfo"
r=$(tally 1 0)
check "in CI no flags line confirms no CPU flag missing [$r]" test "$r" = "1 6 2"
finish
