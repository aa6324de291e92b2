# tap.sh - counting TAP lines for tests/run.sh (sourced; tests/sh/test_tap.sh tests it).
# "ok ... # SKIP why" is a skip, never a pass. With ci=1 a skip is a failure, except one for
# hardware this host lacks: its reason starts with a tag ("[cpu:FLAG]", "[gpu]") that is
# checked here against the host, independently of the test that skipped.
passed=${passed:-0}; failed=${failed:-0}; skipped=${skipped:-0}; ci=${ci:-0}
tap_cpuinfo=/proc/cpuinfo

tap_gpu_present() { # an NVIDIA device node, or a driver that lists one
  compgen -G '/dev/nvidia[0-9]*' >/dev/null && return 0
  command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q '^GPU '
}

tap_hw_absent() { # TAG: 0 when this host surely lacks what TAG names
  case $1 in
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
