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
# free_port: a TCP port nobody listens on right now
free_port() { python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])'; }
finish() { exit $((t_failed > 0)); }
