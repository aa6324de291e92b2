# tap.sh - running tests and counting their TAP lines for tests/run.sh (sourced; tests/sh/test_tap.sh
# tests it).
# "ok ... # SKIP why" is a skip, never a pass. With ci=1 a skip is a failure, except one for
# hardware this host lacks: its reason starts with a tag that is checked here against the
# host, independently of the test that skipped: [cpu:FLAG] (a /proc/cpuinfo flag), [gpu] (an
# NVIDIA device), [cpus:N] (fewer than N CPUs to run on), [nvcc] (no CUDA compiler), [cma]
# (process_vm_readv between processes not permitted).
passed=${passed:-0}; failed=${failed:-0}; skipped=${skipped:-0}; ci=${ci:-0}; jobs_max=${jobs_max:-1}
tap_cpuinfo=/proc/cpuinfo

tap_gpu_present() { # an NVIDIA device node, or a driver that lists one
  compgen -G '/dev/nvidia[0-9]*' >/dev/null && return 0
  command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q '^GPU '
}

tap_cma_permitted() { # may a process read another's memory (process_vm_readv), as shm's cma does?
  local scope
  scope=$(cat /proc/sys/kernel/yama/ptrace_scope 2>/dev/null || echo 0)
  [ "$scope" = 0 ] || return 1 # the ranks are siblings: Yama's scope 1 refuses them
  python3 - <<'PY' 2>/dev/null
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
class iovec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]
src, dst = ctypes.create_string_buffer(b"cma probe", 16), ctypes.create_string_buffer(16)
r, w = os.pipe()
pid = os.fork()
if pid == 0:
    os.close(w); os.read(r, 1); os._exit(0)
n = libc.process_vm_readv(pid, ctypes.byref(iovec(ctypes.addressof(dst), 16)), 1,
                          ctypes.byref(iovec(ctypes.addressof(src), 16)), 1, 0)
os.close(w); os.waitpid(pid, 0)
sys.exit(0 if n == 16 and dst.value == b"cma probe" else 1)
PY
}

tap_hw_absent() { # TAG: 0 when this host surely lacks what TAG names
  case $1 in
    cpus:*)
      local want=${1#cpus:}
      [[ $want =~ ^[0-9]+$ ]] && [ "$(nproc)" -lt "$want" ] ;;
    nvcc) [ ! -x "${CUDA_HOME:-/usr/local/cuda}/bin/nvcc" ] && ! command -v nvcc >/dev/null 2>&1 ;;
    cma) ! tap_cma_permitted ;;
    cpu:*)
      local flag=${1#cpu:}
      [[ $flag =~ ^[a-z0-9_]+$ ]] || return 1
      grep -q '^flags' "$tap_cpuinfo" && ! grep '^flags' "$tap_cpuinfo" | grep -qw -- "$flag" ;;
    gpu) ! tap_gpu_present ;;
    *) return 1 ;;
  esac
}

count() { # FILE: counts its TAP lines; prints failures and skips
  local line tag
  while IFS= read -r line; do
    case $line in
      'not ok '*) failed=$((failed + 1)); echo "$line" ;;
      'ok '*' # SKIP'*)
        tag=""
        [[ $line =~ \ \#\ SKIP\ \[([a-z0-9_:]+)\] ]] && tag=${BASH_REMATCH[1]}
        if [ "$ci" != 1 ]; then
          skipped=$((skipped + 1)); echo "$line"
        elif [ -n "$tag" ] && tap_hw_absent "$tag"; then
          skipped=$((skipped + 1)); echo "$line (this host has no $tag)"
        else
          failed=$((failed + 1)); echo "not ok (a skip in CI) ${line#ok }"
        fi ;;
      'ok '*) passed=$((passed + 1)) ;;
    esac
  done <"$1"
}

# Running: each test is one command whose output goes to $log/NAME.out (log: a folder of the
# caller's), counted by count() once it has finished.
run_one() { # NAME CMD...: runs CMD; its output in $log/NAME.out, its exit status and seconds in $log/NAME.rc
  local name=$1; shift
  local t0=$SECONDS
  timeout "${CDDP_SUITE_TIMEOUT:-900}" "$@" >"$log/$name.out" 2>"$log/$name.err"
  echo "$? $((SECONDS - t0))" >"$log/$name.rc"
}
tally_one() { # NAME: counts the TAP lines of a finished run_one; a crash with no lines counts as one failure
  local name=$1 out="$log/$1.out" rc=1 secs=0
  read -r rc secs <"$log/$name.rc"
  count "$out"
  if [ "$rc" -ne 0 ] && ! grep -q '^not ok ' "$out"; then
    echo "not ok - $name exited $rc without a failing test line (stderr: $log/$name.err)"
    failed=$((failed + 1))
  fi
  echo "# $name: $(grep '^ok ' "$out" | grep -vc ' # SKIP') ok, $(grep -c '^not ok ' "$out") not ok, $(grep -c '^ok .* # SKIP' "$out") skipped, $secs s" >&2
}
run_tap() { run_one "$@"; tally_one "$1"; }
# Shell tests run $jobs_max at a time (run.sh: CDDP_SUITE_JOBS, 2): each has its own temporary folder, free ports,
# and namespaces and process names of its own, and most spend their time waiting on timeouts
# and recoveries. One whose header has a line "# suite: alone (why)" runs with nothing beside
# it: the machine-global Slurm cluster, a measurement that another test's load would skew.
run_shell_tests() { # [DIR]: DIR/test_*.sh (tests/sh), the shared ones $jobs_max at a time, then those alone; tallied in order
  local dir=${1:-tests/sh} t shared=() alone=()
  for t in "$dir"/test_*.sh; do
    [ -e "$t" ] || continue
    if grep -q '^# suite: alone' "$t"; then alone+=("$t"); else shared+=("$t"); fi
  done
  for t in "${shared[@]}"; do
    while [ "$(jobs -rp | wc -l)" -ge "$jobs_max" ]; do wait -n; done
    run_one "$(basename "$t" .sh)" bash "$t" &
  done
  wait
  for t in "${alone[@]}"; do run_one "$(basename "$t" .sh)" bash "$t"; done
  for t in "$dir"/test_*.sh; do [ -e "$t" ] && tally_one "$(basename "$t" .sh)"; done
}
