#!/usr/bin/env bash
# test_warm.sh - warm restarts (src/app/launcher/warm.c): a restart of a Python program takes a
# spare interpreter started ahead with its imports done, and the program cannot tell: the same
# __name__, __file__, sys.argv, sys.path[0], environment (the new round's, none of the spare's
# own variables) and nice value as a fresh worker; its exception and exit code reach the blame
# line as a fresh worker's do; -m works; no spare outlives the job; --warm-workers off and bad
# values. Plain python3 with --warm-preload json for most; torch and its default preload under
# both torches (torch 2.x: torch._dynamo is imported before the script, as its optimizers need).
cd "$(dirname "$0")/../.." && source tests/sh/lib.sh
ROOT=$PWD
CORETYPE=$(scripts/openblas-coretype.sh) # for torch 1.13: the best kernels this CPU runs
T=$(mktemp -d /tmp/cddp-warm.XXXXXX)
trap 'kill $(jobs -p) 2>/dev/null; rm -rf "$T"' EXIT
cp tests/torch/warm_probe.py tests/torch/restart.py "$T/"
cd "$T" || exit 1
PY=$(command -v python3)
export CDDP_PYTHON=$PY
run() { # OUT ARGS...: cddp run, 2 workers, one restart allowed, INFO for the launcher
  local out=$1; shift
  CDDP_DEBUG=INFO CDDP_DEBUG_SUBSYS=RUN timeout "${run_secs:-120}" "$CDDP" run --standalone --nproc-per-node 2 --max-restarts 1 "$@" \
    >"$T/$out" 2>&1
  echo $? >"$T/$out.rc"
}
# what a probe line shows, less what differs between attempts by design
seen() { grep -o "probe attempt $2 rank $3 .*" "$T/$1" | sed 's/^probe attempt [0-9] //'; }

# 1. a script: both workers restarted from warm spares, indistinguishable from fresh ones (the
# spares import at nice 19: a taken one is set back to 0)
CDDP_WARM_NICE=19 run script.out --warm-preload json --warm-delay 0 warm_probe.py a1 --b=2
takes=$(grep -c 'the warm spare .* takes over' "$T/script.out")
if [ "$(cat "$T/script.out.rc")" = 0 ] && [ "$takes" = 2 ]; then ok "a restart takes 2 warm spares; the job completes"
else fail "warm restart" "rc $(cat "$T/script.out.rc"), $takes taken: $(tail -5 "$T/script.out" | tr '\n' ' ')"; fi
same=0
for r in 0 1; do
  a=$(seen script.out 0 $r); b=$(seen script.out 1 $r)
  [ -n "$a" ] && [ "$a" = "$b" ] && same=$((same + 1))
done
[ "$same" = 2 ] && ok "a warm worker sees what a fresh one sees (__name__, __file__, argv, sys.path[0], env, nice)" ||
  fail "warm == fresh" "$(grep probe "$T/script.out" | tr '\n' ' ')"
grep -q "\"argv\": \[\"warm_probe.py\", \"a1\", \"--b=2\"\]" "$T/script.out" && grep -q '"name": "__main__"' "$T/script.out" &&
  grep -q "\"path0\": \"$T\"" "$T/script.out" && grep -q '"warm_vars": \[\]' "$T/script.out" && grep -q "\"nice\": $(nice)" "$T/script.out" &&
  ok "the probe's own view is a plain python3 run's" || fail "probe view" "$(grep probe "$T/script.out" | head -1)"
# this test's spares (their folder is $T; other jobs on the machine have spares too), once gone
spares_left() { left=0; local p; for p in $(pgrep -f '_cddp_warm'); do [ "$(readlink "/proc/$p/cwd")" = "$T" ] && left=$((left + 1)); done; }
no_spare() { spares_left; [ "$left" = 0 ]; }
wait_for 5 no_spare
[ "$left" = 0 ] && ok "no spare outlives the job" || fail "spares left" "$left processes"

# 2. -m: sys.path[0] is the working folder, argv[0] the module's file
run module.out --warm-preload json --warm-delay 0 -m warm_probe
a=$(seen module.out 0 0); b=$(seen module.out 1 0)
if [ "$(cat "$T/module.out.rc")" = 0 ] && [ "$(grep -c 'takes over' "$T/module.out")" = 2 ] && [ -n "$a" ] && [ "$a" = "$b" ] &&
   echo "$b" | grep -q "\"argv\": \[\"$T/warm_probe.py\"\]"; then ok "-m: a warm worker runs the module as python -m does"
else fail "-m warm" "rc $(cat "$T/module.out.rc"): $a // $b"; fi

# 3. an exception in a warm worker: its traceback, exit code 1 and the blame line, as a fresh one's
run raise.out --warm-preload json --warm-delay 0 warm_probe.py raise
if [ "$(cat "$T/raise.out.rc")" = 1 ] && grep -q 'takes over' "$T/raise.out" && grep -q '^\[rank [01]\].*ValueError: warm boom' "$T/raise.out" &&
   grep -q '^cddp run: rank [01] .*exited with code 1' "$T/raise.out"; then ok "a warm worker's exception: traceback, exit 1, the blame line"
else fail "warm exception" "rc $(cat "$T/raise.out.rc"): $(tail -4 "$T/raise.out" | tr '\n' ' ')"; fi

# 4. off, and the defaults: no spares without restarts, nor for a script that does not import torch
run off.out --warm-workers off --warm-preload json --warm-delay 0 warm_probe.py
[ "$(cat "$T/off.out.rc")" = 0 ] && grep -q 'no warm spares: --warm-workers off' "$T/off.out" && ! grep -q 'takes over' "$T/off.out" &&
  ok "--warm-workers off: fresh restarts" || fail "off" "$(tail -3 "$T/off.out" | tr '\n' ' ')"
run plain.out --warm-delay 0 warm_probe.py
grep -q 'no warm spares: warm_probe.py does not import torch' "$T/plain.out" && [ "$(cat "$T/plain.out.rc")" = 0 ] &&
  ok "a script without torch gets no spares unless --warm-preload names modules" || fail "default preload" "$(grep -i warm "$T/plain.out" | head -2)"
CDDP_DEBUG=INFO CDDP_DEBUG_SUBSYS=RUN timeout 60 "$CDDP" run --standalone --nproc-per-node 1 --warm-preload json warm_probe.py >"$T/nor.out" 2>&1
grep -q 'no warm spares: no restarts' "$T/nor.out" && ok "no restarts allowed: no spares" || fail "no restarts" "$(grep -i warm "$T/nor.out")"

# 5. bad values: one line naming the flag, exit 2
bad() { # NAME EXPECT ARGS...
  local name=$1 want=$2; shift 2
  "$CDDP" run --standalone "$@" warm_probe.py >"$T/bad.out" 2>&1; local rc=$?
  if [ $rc = 2 ] && [ "$(wc -l <"$T/bad.out")" = 1 ] && grep -q -- "$want" "$T/bad.out"; then ok "bad input: $name"
  else fail "bad input: $name" "rc $rc: $(head -2 "$T/bad.out" | tr '\n' ' ')"; fi
}
bad "--warm-workers maybe" "--warm-workers" --warm-workers maybe
bad "--warm-preload 'a b'" "--warm-preload" --warm-preload 'a b'
bad "--warm-delay -1" "--warm-delay" --warm-delay -1
CDDP_WARM_WORKERS=x "$CDDP" run --standalone warm_probe.py >"$T/bad.out" 2>&1; rc=$?
[ $rc = 2 ] && grep -q CDDP_WARM_WORKERS "$T/bad.out" && ok "bad input: CDDP_WARM_WORKERS=x" || fail "env mirror" "rc $rc: $(cat "$T/bad.out")"

# 6. torch, its default preload: restart-all with a SIGKILLed worker takes the spares; under
# torch 2.x the restarted script finds torch._dynamo imported (torch 1.13 has none)
cat >"$T/dynamo_probe.py" <<'PY'
import os, signal, sys, time
pre = "torch._dynamo" in sys.modules
import torch
attempt, rank = os.environ["TORCHELASTIC_RESTART_COUNT"], os.environ["RANK"]
print(f"dynamo attempt {attempt} rank {rank} preloaded {pre}", flush=True)

def ready_spares():  # the agent's children that wait on their fd 3: done preloading
    n = 0
    for p in filter(str.isdigit, os.listdir("/proc")):
        try:
            if b"_cddp_warm" not in open(f"/proc/{p}/cmdline", "rb").read():
                continue
            if int(open(f"/proc/{p}/stat").read().rsplit(")", 1)[1].split()[1]) != os.getppid():
                continue
            try:
                n += open(f"/proc/{p}/syscall").read().split()[:2] == ["0", "0x3"]
            except OSError:  # no ptrace rights over it: what the kernel says it waits in
                n += "pipe_read" in open(f"/proc/{p}/wchan").read()
        except (OSError, ValueError, IndexError):
            pass
    return n

if attempt == "0" and rank == "1":  # a spare taken mid-preload stops preloading: wait for both
    end = time.time() + 100
    while ready_spares() < 2 and time.time() < end:
        time.sleep(0.1)
    os.kill(os.getpid(), signal.SIGKILL)
PY
for tpy in /usr/bin/python3 "$ROOT/.venv/bin/python"; do
  t0=$(now_us)
  if ! "$tpy" -c 'import torch.distributed' 2>/dev/null; then
    ok "torch warm restart:$tpy # SKIP $tpy has no torch (scripts/install-deps.sh test)"; continue
  fi
  # a job here imports torch 4 times (2 workers, 2 spares) on 2 cores, then forms gloo twice:
  # its bound is 40 of the import just timed (2.5 s idle, 16 s at load 13), 120 s at least
  # (times CDDP_TEST_SCALE again by the timeout shim: generous, it only guards against a hang)
  run_secs=$(awk -v us="$(( $(now_us) - t0 ))" 'BEGIN { b = 40 * us / 1e6; printf "%d", (b > 120 ? b : 120) }')
  if [ "$tpy" = /usr/bin/python3 ]; then # gloo re-forms in spares (test_torchrun runs restart.py under both)
    CDDP_PYTHON=$tpy OPENBLAS_CORETYPE=$CORETYPE run torch.out --warm-delay 0 restart.py
    n=$(grep -c "restart ok rank [01] of 2 attempt 1 " "$T/torch.out")
    if [ "$(cat "$T/torch.out.rc")" = 0 ] && [ "$n" = 2 ] && [ "$(grep -c 'takes over' "$T/torch.out")" = 2 ]; then
      ok "torch:$tpy: a SIGKILLed worker; both restart from spares with torch imported"
    else fail "torch warm restart:$tpy" "rc $(cat "$T/torch.out.rc"), $n ok: $(tail -4 "$T/torch.out" | tr '\n' ' ')"; fi
  fi
  want=False; "$tpy" -c 'import torch._dynamo' 2>/dev/null && want=True
  CDDP_PYTHON=$tpy OPENBLAS_CORETYPE=$CORETYPE run dynamo.out --warm-delay 0 dynamo_probe.py
  if [ "$(cat "$T/dynamo.out.rc")" = 0 ] && [ "$(grep -c "dynamo attempt 1 rank [01] preloaded $want" "$T/dynamo.out")" = 2 ] &&
     [ "$(grep -c 'dynamo attempt 0 rank [01] preloaded False' "$T/dynamo.out")" -ge 1 ] &&
     grep -q 'preloading torch,torch.distributed,torch._dynamo' "$T/dynamo.out" && [ "$(grep -c 'takes over' "$T/dynamo.out")" = 2 ]; then
    ok "torch:$tpy: restarted from spares, the script finds torch._dynamo preloaded: $want (fresh workers: False)"
  else fail "dynamo preload:$tpy" "rc $(cat "$T/dynamo.out.rc"): $(grep -e dynamo -e rank "$T/dynamo.out" | head -6 | tr '\n' ' ')"; fi
done
finish
