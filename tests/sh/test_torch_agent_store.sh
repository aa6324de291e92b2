#!/usr/bin/env bash
# test_torch_agent_store.sh - the agent serves its workers' TCPStore (store/torch_proto.c) under
# torch 2.x (.venv/bin/python) and torch 1.13 (/usr/bin/python3): standalone with 2 workers and
# c10d with 2 launchers form a gloo world, the workers get TORCHELASTIC_USE_AGENT_STORE=True,
# no worker listens on MASTER_PORT, and none waits in torch's connect retry.
cd "$(dirname "$0")/../.." && source tests/sh/lib.sh
T=$(mktemp -d /tmp/cddp-agentstore.XXXXXX)
trap 'kill $(jobs -p) 2>/dev/null; rm -rf "$T"' EXIT
cp tests/torch/store_probe.py "$T/"
export OPENBLAS_CORETYPE=SkylakeX

# served NAME MAJOR N FILE...: every launcher exited 0 (RC), N ranks all-reduced under torch
# MAJOR.x with the agent's store, none listens on MASTER_PORT, no connect retry was logged
served() {
  local name=$1 major=$2 n=$3; shift 3
  local got bad retry agent rc
  got=$(cat "$@" | grep -o "probe ok rank [0-9]* of $n torch $major.x USE_AGENT_STORE=True listens_on_master_port=False" | sort -u | wc -l)
  bad=$(cat "$@" | grep -c "listens_on_master_port=True")
  retry=$(cat "$@" | grep -ci "retrying\|connect.*refused")
  agent=$(cat "$@" | grep -c "the workers meet in a TCPStore this agent serves (torch $major.x)")
  rc=$(printf '%s' "${RC[*]}" | tr -d ' 0')
  if [ -z "$rc" ] && [ "$got" = "$n" ] && [ "$bad" = 0 ] && [ "$retry" = 0 ] && [ "$agent" -ge 1 ]; then ok "$name"
  else fail "$name" "exits ${RC[*]}, $got of $n ranks, $bad on MASTER_PORT, $retry retries, agent said $agent: $(cat "$@" | tail -4 | tr '\n' ' ')"; fi
}

for PY in "$PWD/.venv/bin/python" /usr/bin/python3; do
  if ! "$PY" -c 'import torch.distributed' 2>/dev/null; then
    echo "ok $((t_n += 1)) - $t_name:$PY # SKIP $PY has no torch (scripts/install-deps.sh test)"; continue
  fi
  major=$("$PY" -c 'import torch; print(torch.__version__.split(".")[0])')
  ( cd "$T" && CDDP_PYTHON=$PY CDDP_DEBUG=INFO CDDP_DEBUG_SUBSYS=RUN timeout 120 "$CDDP" run --standalone --nproc-per-node 2 store_probe.py \
      >"$T/s.out" 2>&1 ) & wait_all 130 $!
  served "torch $major.x, standalone, 2 workers: the agent's TCPStore" "$major" 2 "$T/s.out"
  P=$(free_port)
  for i in 0 1; do
    ( cd "$T" && CDDP_PYTHON=$PY CDDP_DEBUG=INFO CDDP_DEBUG_SUBSYS=RUN timeout 120 "$CDDP" run --nnodes 2 --nproc-per-node 1 --rdzv-backend c10d \
        --rdzv-endpoint 127.0.0.1:$P --rdzv-id A$P store_probe.py >"$T/c$i.out" 2>&1 ) &
    pids[i]=$!
  done
  wait_all 130 "${pids[@]}"
  served "torch $major.x, c10d, 2 launchers: node 0's agent serves the TCPStore" "$major" 2 "$T/c0.out" "$T/c1.out"
done
finish
