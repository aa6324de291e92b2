#!/usr/bin/env bash
# test_torch_agent_store.sh - the torch workers meet in the job's own store (store/torch_proto.c)
# under torch 2.x (.venv/bin/python) and torch 1.13 (/usr/bin/python3), as torchrun's
# TORCHELASTIC_USE_AGENT_STORE=True has them do: MASTER_PORT is the port of cddp's store (the
# --rdzv-endpoint's for c10d), a gloo world forms, no worker listens on MASTER_PORT and none waits
# in torch's connect retry; a restart forms again on the same port and finds none of the last
# round's keys. (Static, --master-port: tests/sh/test_torchrun.sh.)
cd "$(dirname "$0")/../.." && source tests/sh/lib.sh
T=$(mktemp -d /tmp/cddp-agentstore.XXXXXX)
trap 'kill $(jobs -p) 2>/dev/null; rm -rf "$T"' EXIT
cp tests/torch/store_probe.py "$T/"
export OPENBLAS_CORETYPE=SkylakeX

# served NAME MAJOR N PORT RESTART FILE...: every launcher exited 0 (RC), N ranks all-reduced under
# torch MAJOR.x with the agent's store on PORT (store: the port of CDDP_STORE) at restart RESTART,
# saw no key of an earlier round, none listens on MASTER_PORT, no connect retry was logged
served() {
  local name=$1 major=$2 n=$3 port=$4 restart=$5; shift 5
  local got bad retry agent rc
  [ "$port" = store ] && port=$(cat "$@" | grep -o 'CDDP_STORE=[^ ]*' | head -1 | sed 's/.*://')
  got=$(cat "$@" | grep -o "probe ok rank [0-9]* of $n torch $major.x USE_AGENT_STORE=True listens_on_master_port=False MASTER_PORT=$port CDDP_STORE=[^ ]*:$port restart=$restart fresh_keys=True" |
    cut -d' ' -f4 | sort -u | wc -l)
  bad=$(cat "$@" | grep -c "listens_on_master_port=True")
  retry=$(cat "$@" | grep -ci "retrying\|connect.*refused")
  agent=$(cat "$@" | grep -c "the workers meet in the job's store, which speaks torch $major.x's TCPStore protocol too")
  rc=$(printf '%s' "${RC[*]}" | tr -d ' 0')
  if [ -z "$rc" ] && [ -n "$port" ] && [ "$got" = "$n" ] && [ "$bad" = 0 ] && [ "$retry" = 0 ] && [ "$agent" -ge 1 ]; then ok "$name"
  else fail "$name" "exits ${RC[*]}, $got of $n ranks on port '$port', $bad on MASTER_PORT, $retry retries, agent said $agent: $(cat "$@" | grep -v '^\[' | tail -4 | tr '\n' ' ')"; fi
}

for PY in "$PWD/.venv/bin/python" /usr/bin/python3; do
  if ! "$PY" -c 'import torch.distributed' 2>/dev/null; then
    echo "ok $((t_n += 1)) - $t_name:$PY # SKIP $PY has no torch (scripts/install-deps.sh test)"; continue
  fi
  major=$("$PY" -c 'import torch; print(torch.__version__.split(".")[0])')
  # standalone, and c10d with 2 launchers, at once (apart: their own ports and folders)
  ( cd "$T" && PROBE_FAIL_ONCE=1 CDDP_PYTHON=$PY CDDP_DEBUG=INFO CDDP_DEBUG_SUBSYS=RUN timeout 120 "$CDDP" run --standalone \
      --nproc-per-node 2 --max-restarts 1 store_probe.py >"$T/s.out" 2>&1 ) &
  pids[2]=$!
  P=$(free_port)
  for i in 0 1; do
    ( cd "$T" && CDDP_PYTHON=$PY CDDP_DEBUG=INFO CDDP_DEBUG_SUBSYS=RUN timeout 120 "$CDDP" run --nnodes 2 --nproc-per-node 1 --rdzv-backend c10d \
        --rdzv-endpoint 127.0.0.1:$P --rdzv-id A$P store_probe.py >"$T/c$i.out" 2>&1 ) &
    pids[i]=$!
  done
  wait_all 130 "${pids[@]}"
  all=("${RC[@]}")
  RC=("${all[2]}")
  served "torch $major.x, standalone, 2 workers, a restart: the job's store's port, a fresh round of keys" "$major" 2 store 1 "$T/s.out"
  RC=("${all[0]}" "${all[1]}")
  served "torch $major.x, c10d, 2 launchers: MASTER_PORT is --rdzv-endpoint's port $P" "$major" 2 "$P" 0 "$T/c0.out" "$T/c1.out"
done
finish
