# lib.sh - helpers for shell tests: each check prints one TAP line (ok / not ok).
# Source it; run from the repository root with build/cddp built.
CDDP=${CDDP:-$PWD/build/cddp}
t_name=$(basename "${BASH_SOURCE[1]:-$0}" .sh)
t_n=0
t_failed=0
ok()   { t_n=$((t_n + 1)); echo "ok $t_n - $t_name:$1"; }
fail() { t_n=$((t_n + 1)); t_failed=$((t_failed + 1)); echo "not ok $t_n - $t_name:$1${2:+ ($2)}"; }
# check NAME CMD...: ok when CMD exits 0
check() { local name=$1; shift; if "$@"; then ok "$name"; else fail "$name" "exit $?"; fi; }
# free_port: a TCP port nobody uses right now, below the kernel's ephemeral range (20000-32767)
# so that no outgoing connection of a concurrent process can take it before the test binds it
free_port() {
  python3 -c '
import random, socket
for _ in range(200):
    p = random.randrange(20000, 32768)
    s = socket.socket()
    try:
        s.bind(("0.0.0.0", p)); print(p); break
    except OSError:
        pass
    finally:
        s.close()'
}
finish() { exit $((t_failed > 0)); }
# The one factor every time bound of the tests is scaled by (CDDP_TEST_SCALE, as tests/test.h):
# 4 under the sanitizers, more on a loaded host; 1 when unset or not a positive number.
test_scale=$(awk -v k="${CDDP_TEST_SCALE:-1}" 'BEGIN { print (k + 0 > 0 ? k + 0 : 1) }')
# scaled SECS: SECS times the factor
scaled() { awk -v s="$1" -v k="$test_scale" 'BEGIN { print s * k }'; }
# every `timeout N` (of the test and of what it runs) scaled too: tests/sh/scaled/timeout first on
# PATH, which execs coreutils' (the pid and the name stay those of timeout); at 1, PATH as it was
if [ "$test_scale" != 1 ]; then
  PATH=$(tr ':' '\n' <<<"$PATH" | grep -vx '.*/tests/sh/scaled' | paste -sd:) # never the shim twice,
  CDDP_REAL_TIMEOUT=$(command -v timeout) && export CDDP_REAL_TIMEOUT PATH=$PWD/tests/sh/scaled:$PATH # nor as the real one
fi
# wait_for SECS CMD...: runs CMD every $poll_every s (0.05 unless set; 0 to catch a worker before
# its first step) until it succeeds (0), or 1 once SECS (scaled) have passed by the clock: polling
# for the event itself, never a sleep that guesses how long it takes. CMD may be a function that
# sets a variable.
now_us() { echo "${EPOCHREALTIME//[!0-9]/}"; }
wait_for() {
  local every=${poll_every:-0.05} end
  end=$(( $(now_us) + $(awk -v s="$1" -v k="$test_scale" 'BEGIN { printf "%d", s * k * 1e6 }') )); shift
  while :; do
    "$@" && return 0
    [ "$(now_us)" -lt "$end" ] || return 1
    [ "$every" = 0 ] || sleep "$every"
  done
}
# await NAME SECS CMD...: wait_for, and when the wait runs out one failing line that says what
# never happened ("NAME (not within S s: CMD)") and 1, so that the test never races on past it
await() {
  local name=$1 secs=$2; shift 2
  wait_for "$secs" "$@" && return 0
  fail "$name" "not within $(scaled "$secs") s: $*"; return 1
}
# keep_failed NAME FILE...: a failure's evidence outlives the test's folder: copies the files to
# a new private folder /tmp/cddp-NAME-failed.XXXXXX (mktemp: no name anyone can plant first)
# and prints its path; prints nothing when mktemp cannot make it
keep_failed() {
  local name=$1 dir; shift
  dir=$(mktemp -d "/tmp/cddp-$name-failed.XXXXXX") || return 0
  cp -r "$@" "$dir"/ 2>/dev/null; echo "$dir"
}
# stacks PID: every thread's stack of a live process (gdb, when installed; its wait channel
# always), for a hang's failure line to keep; bounded, since gdb attaches under load slowly
stacks() {
  echo "pid $1: $(tr '\0' ' ' </proc/"$1"/cmdline 2>/dev/null); wchan $(cat /proc/"$1"/wchan 2>/dev/null)"
  command -v gdb >/dev/null && timeout 60 gdb -p "$1" -batch -nx -ex 'thread apply all bt' 2>&1 | grep -E '^(Thread|#)'
}
# none_alive PID...: 0 when none of them runs (`kill -0 A B` fails as soon as ONE is gone, so
# it cannot say that all are)
none_alive() { local p; for p; do kill -0 "$p" 2>/dev/null && return 1; done; return 0; }
# last_step METRICS: the last training step in a run's metrics.jsonl (evals left out; empty when
# none); step_reached METRICS N: it is N or past; wait_step METRICS N: until then (60 s, scaled)
last_step() { grep -v '"eval"' "$1" 2>/dev/null | tail -1 | sed -n 's/.*"step":\([0-9]*\).*/\1/p'; }
step_reached() { [ "$(last_step "$1")" -ge "$2" ] 2>/dev/null; }
wait_step() { poll_every=0.02 wait_for 60 step_reached "$@"; }
# port_listening PORT [PID]: some socket of this network namespace (of process PID's) listens on
# PORT (read from /proc: connecting to find out would be a stray client of the server under test)
port_listening() {
  local hex at=/proc/${2:-self}/net; hex=$(printf '%04X' "$1")
  awk -v p=":$hex" '$4 == "0A" && substr($2, length($2) - 4) == p { f = 1 } END { exit !f }' "$at/tcp" "$at/tcp6" 2>/dev/null
}
# netns_up N DIR TAG OCTET: N namespace hosts of this test's own (tests/cluster/netns.sh): names
# cddp<TAG><pid>, subnet 10.OCTET.x, the record under DIR, so namespace tests running at the same
# time never meet. Where namespaces cannot be made here the test reports its skip (a failure in
# CI) and exits; any other failure is one failing line. netns_down takes them away.
netns_up() {
  local n=$1 dir=$2 tag=$3 octet=$4
  export CDDP_NETNS_STATE=$dir/netns CDDP_NETNS_PREFIX=cddp$tag$$ CDDP_NETNS_SUBNET=10.$octet.$(($$ % 200 + 20))
  timeout 30 tests/cluster/netns.sh up "$n" >"$dir/up.log" 2>&1 && return 0
  if grep -qi "operation not permitted\|command not found\|permission denied" "$dir/up.log"; then
    echo "ok 1 - $t_name # SKIP network namespaces cannot be made here: $(tail -1 "$dir/up.log")"; exit 0
  fi
  fail netns_up "$(tail -2 "$dir/up.log" | tr '\n' ' ')"; finish
}
netns_down() { timeout 30 tests/cluster/netns.sh down >/dev/null 2>&1; }
# hw_absent TAG: 0 when this host lacks what a skip's tag names (tests/tap.sh, run.sh's own
# probe); a case that needs it then reports "ok N - name # SKIP [TAG] why"
hw_absent() { ( . tests/tap.sh && tap_hw_absent "$1" ); }
# wait_all SECS PID...: waits for each (SIGKILLing what is left after SECS, scaled); exit codes in RC[].
# The watchdog holds no output pipe (a reader of the test's output would wait for its sleep),
# and it is stopped with SIGKILL: a subshell that catches a signal before it has reset the
# traps it inherited runs this shell's EXIT trap, and a SIGTERM sent as it starts (every PID
# already gone) once removed a test's whole work folder that way.
wait_all() {
  local secs=$1; shift; local p; RC=()
  secs=$(scaled "$secs")
  ( exec >/dev/null 2>&1; sleep "$secs"; for p in "$@"; do kill -KILL "$p"; done ) & local dog=$!
  for p in "$@"; do wait "$p"; RC+=($?); done
  kill -KILL "$dog" $(pgrep -P "$dog") 2>/dev/null; wait "$dog" 2>/dev/null
}
# bench_verdict NP FILE...: prints "clean" when the `cddp bench` output in FILE(s) (prefixed
# "[rank N] " or not) names NP ranks, has result rows, every #wrong is 0 and the check passed;
# otherwise a one-line reason.
bench_verdict() {
  local np=$1; shift
  local body rows wrong
  body=$(cat "$@" | sed -E 's/^\[[^]]*\] ?//')
  rows=$(echo "$body" | awk '$1 ~ /^[0-9]+$/ && NF >= 9' | wc -l)
  wrong=$(echo "$body" | awk '$1 ~ /^[0-9]+$/ && NF >= 9 { w += ($9 == "N/A" ? 0 : $9) } END { print w + 0 }')
  if [ "$rows" -gt 0 ] && [ "$wrong" = 0 ] && echo "$body" | grep -q "Out of bounds values : 0 OK" &&
     echo "$body" | grep -q "cddp bench [a-z_]*: $np ranks"; then
    echo clean
  else
    echo "$rows rows, $wrong wrong; $(echo "$body" | grep -v '^#' | tail -2 | tr '\n' ' ')"
  fi
}
# verify_checkpoints RUN_DIR: `cddp ckpt verify` on every RUN_DIR/checkpoints/step-*; sets nc (how
# many) and nbad (how many failed) and appends a reason for each bad one to the caller's array why
verify_checkpoints() {
  local d; nc=0 nbad=0
  for d in "$1"/checkpoints/step-*; do
    [ -d "$d" ] || continue
    nc=$((nc + 1))
    "$CDDP" ckpt verify "$d" >"$1.verify" 2>&1 || { nbad=$((nbad + 1)); why+=("corrupt checkpoint: $(head -1 "$1.verify")"); }
  done
}
# samples_verdict RUN_DIR STEPS BATCH [REF_RUN_DIR]: "clean" when the sample logs of a `cddp
# train` run (RUN_DIR/samples/rank*.txt, lines "epoch step index", debug.sample_log=true) hold
# steps 1..STEPS with BATCH samples each, nothing else, and no (epoch, index) twice: every sample
# of the trained steps exactly once. Given REF_RUN_DIR (an uninterrupted run of the same job, any
# world size) the (step, index) pairs must also be its own. Otherwise a one-line reason.
samples_verdict() {
  local dir=$1 steps=$2 batch=$3 ref=${4:-} v
  ls "$dir"/samples/rank*.txt >/dev/null 2>&1 || { echo "no sample logs in $dir/samples"; return; }
  v=$(cat "$dir"/samples/rank*.txt | awk -v S="$steps" -v B="$batch" '
    NF != 3 { odd++; next }
    { n++; c[$2]++; if (seen[$1 " " $3]++) dup++ }
    END {
      for (s in c) if (s + 0 < 1 || s + 0 > S + 0) extra++
      for (s = 1; s <= S; s++) if (c[s] != B) { short++; if (!first) first = s " (" c[s] + 0 " samples)" }
      if (odd || dup || extra || short)
        printf "%d lines: %d malformed, %d samples twice, %d steps outside 1..%d, %d steps without %d samples (first: step %s)\n",
          n, odd, dup, extra, S, short, B, first
      else print "clean" }')
  if [ "$v" = clean ] && [ -n "$ref" ] &&
     ! cmp -s <(cat "$dir"/samples/rank*.txt | awk '{ print $2, $3 }' | sort) \
               <(cat "$ref"/samples/rank*.txt | awk -v S="$steps" '$2 <= S { print $2, $3 }' | sort); then
    v="every step has $batch distinct samples, but not the ones $ref trained"
  fi
  echo "$v"
}
