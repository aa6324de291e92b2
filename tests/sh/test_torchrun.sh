#!/usr/bin/env bash
# test_torchrun.sh - `cddp run` as a drop-in for torchrun, with real PyTorch, each case twice:
# Debian's torch 1.13 (/usr/bin/python3) and torch 2.x (.venv/bin/python, made by
# scripts/install-deps.sh test); each TAP line names its torch. The seeds' command lines verbatim, every
# rendezvous mode forming a gloo world that all-reduces correctly, restart-all with a worker
# killed, the blame line quoting a script's exception, torchrun's program rules and flags, the
# workers' MASTER_PORT the port the user gave (the store's), and one clear line for each bad PROGRAM.
cd "$(dirname "$0")/../.." && source tests/sh/lib.sh
ROOT=$PWD
T=$(mktemp -d /tmp/cddp-torchrun.XXXXXX)
trap 'kill $(jobs -p) 2>/dev/null; rm -rf "$T"' EXIT
cp -r tests/torch/. "$T/"
cd "$T" || exit 1
# Debian's OpenBLAS does not recognise this VM's CPU and would run SSE3 kernels: name the best
# core the CPU can run (SkylakeX on a CPU without AVX-512 dies of SIGILL)
OPENBLAS_CORETYPE=$("$ROOT"/scripts/openblas-coretype.sh)
[ -n "$OPENBLAS_CORETYPE" ] && export OPENBLAS_CORETYPE
# two launchers at once: L0 and L1 hold their outputs
two() { # "ENV0" "ENV1" ARGS...: both nodes, same arguments, different environments
  local e0=$1 e1=$2; shift 2
  env $e0 timeout 90 "$CDDP" run "$@" >"$T/n0.out" 2>&1 & local p0=$!
  env $e1 timeout 90 "$CDDP" run "$@" >"$T/n1.out" 2>&1 & local p1=$!
  wait $p0; rc0=$?; wait $p1; rc1=$?
}
# worlds NAME N: both launchers exited 0 and N distinct ranks reported a correct all_reduce
worlds() {
  local n; n=$(cat "$T/n0.out" "$T/n1.out" | grep -o 'allreduce ok rank [0-9]* of [0-9]*' | sort -u | grep -c "of $2\$")
  if [ "$rc0" = 0 ] && [ "$rc1" = 0 ] && [ "$n" = "$2" ]; then ok "$1"
  else fail "$1" "exits $rc0/$rc1, $n of $2 ranks: $(cat "$T/n0.out" "$T/n1.out" | tail -4 | tr '\n' ' ')"; fi
}
# ports_same NAME PORT: every worker's MASTER_PORT is PORT, the port the user gave, where cddp's
# store listens (its torch engine serves them: TORCHELASTIC_USE_AGENT_STORE=True); PORT "store":
# the store's port, whichever it is (standalone)
ports_same() {
  local mp sp want=$2
  mp=$(cat "$T"/n*.out | grep -o 'MASTER_PORT=[0-9]*' | sort -u)
  sp=$(cat "$T"/n*.out | grep -o 'CDDP_STORE=[^ ]*' | sed 's/.*://' | sort -u)
  [ "$want" = store ] && want=$sp
  if [ -n "$want" ] && [ "$mp" = "MASTER_PORT=$want" ] && [ "$sp" = "$want" ]; then ok "$1: the workers' MASTER_PORT is the port given, $want, the store's"
  else fail "$1" "MASTER_PORT '$mp', store port '$sp', given $want"; fi
}

# cases: every check below, under the interpreter $PY (each TAP line names its torch)
cases() {
# 1. the issue's line, torchrun's default rendezvous (static, no --rdzv-* flag): cddp's store is on
# --master-port, the workers' MASTER_PORT too
P=$(free_port)
env timeout 90 "$CDDP" run --nnodes 2 --nproc_per_node 1 --node_rank 0 --master_addr 127.0.0.1 \
  --master_port "$P" allreduce.py >"$T/n0.out" 2>&1 & p0=$!
env timeout 90 "$CDDP" run --nnodes 2 --nproc_per_node 1 --node_rank 1 --master_addr 127.0.0.1 \
  --master_port "$P" allreduce.py >"$T/n1.out" 2>&1 & p1=$!
wait $p0; rc0=$?; wait $p1; rc1=$?
worlds "static by default (torchrun's), 2 nodes, env:// + gloo (the issue's line)" 2
ports_same "static" "$P"
grep -q "CDDP_STORE=127.0.0.1:$P " "$T/n0.out" && ok "static: the store is on --master-port" || fail "static store port" "$(head -2 "$T/n0.out")"

# 2. XTuner's two-node variables
P=$(free_port)
two "NPROC_PER_NODE=1 NNODES=2 NODE_RANK=0 ADDR=127.0.0.1 PORT=$P" \
    "NPROC_PER_NODE=1 NNODES=2 NODE_RANK=1 ADDR=127.0.0.1 PORT=$P" allreduce.py
worlds "XTuner's NPROC_PER_NODE NNODES NODE_RANK ADDR PORT, 2 nodes" 2
ports_same "XTuner" "$P"

# 3. Sana's line verbatim (torchrun -> cddp run), twice: the second run resumes from latest
P=$(free_port); ID=$RANDOM
rm -rf "$T/work" # the other interpreter's run
echo "steps=4" >"$T/cfg.py"
sana() {
  two "X=0" "X=1" --nnodes 2 --nproc_per_node=1 --rdzv_id $ID --rdzv_backend c10d --rdzv_endpoint 127.0.0.1:$P \
    tools/train.py --config_path="$T/cfg.py" --work_dir="$T/work" --name=sana --resume_from=latest
}
sana
n=$(cat "$T/n0.out" "$T/n1.out" | grep -c "train ok rank [01] of 2 steps 1-4")
if [ "$rc0" = 0 ] && [ "$rc1" = 0 ] && [ "$n" = 2 ] && [ -s "$T/work/sana/step-0004.pt" ]; then ok "Sana's torchrun line: c10d, 2 nodes, DDP trains 4 steps"
else fail "Sana's line" "exits $rc0/$rc1, $n ranks: $(tail -3 "$T/n0.out" | tr '\n' ' ')"; fi
echo "steps=6" >"$T/cfg.py"
P=$(free_port); ID=$RANDOM
sana
n=$(cat "$T/n0.out" "$T/n1.out" | grep -c "train ok rank [01] of 2 steps 5-6")
r=$(cat "$T/n0.out" "$T/n1.out" | grep -c "resumed from step-0004.pt")
if [ "$rc0" = 0 ] && [ "$rc1" = 0 ] && [ "$n" = 2 ] && [ "$r" = 2 ]; then ok "Sana's line, --resume_from=latest: both ranks resume at step 4"
else fail "Sana's line resumed" "exits $rc0/$rc1, $n ranks done, $r resumed: $(tail -3 "$T/n0.out" | tr '\n' ' ')"; fi

# 4. c10d with two launchers: ports, torchrun's worker environment
P=$(free_port)
two "X=0" "X=1" --nnodes 2 --nproc-per-node 1 --rdzv-backend c10d --rdzv-endpoint 127.0.0.1:$P --rdzv-id C$P \
  --role trainer allreduce.py
worlds "c10d, 2 nodes" 2
ports_same "c10d" "$P"
if grep -q "TORCHELASTIC_USE_AGENT_STORE=True ROLE_NAME=trainer OMP_NUM_THREADS=- .* errfile=True" "$T/n0.out"; then
  ok "torchrun's environment: USE_AGENT_STORE=True (the agent's TCPStore), ROLE_NAME from --role, TORCHELASTIC_ERROR_FILE; OMP unset for 1 worker"
else fail "worker environment" "$(grep 'allreduce ok' "$T/n0.out")"; fi
# --agent-store off: rank 0 hosts the workers' TCPStore, as torchrun's c10d has it; a bad value
timeout 90 "$CDDP" run --standalone --nproc-per-node 2 --agent-store off allreduce.py >"$T/n0.out" 2>&1; rc0=$?
: >"$T/n1.out"; rc1=0
worlds "--agent-store off: rank 0's own TCPStore" 2
grep -q "TORCHELASTIC_USE_AGENT_STORE=False" "$T/n0.out" && ok "--agent-store off: USE_AGENT_STORE=False" ||
  fail "--agent-store off" "$(grep 'allreduce ok' "$T/n0.out" | head -1)"
# a script that hosts its own TCPStore on MASTER_PORT: the agent leaves the port to it
timeout 90 "$CDDP" run --standalone --nproc-per-node 2 own_store.py >"$T/n0.out" 2>&1; rc=$?
[ $rc = 0 ] && [ "$(grep -c 'own store ok rank [01] of 2 USE_AGENT_STORE=False' "$T/n0.out")" = 2 ] &&
  ok "a script with its own TCPStore on MASTER_PORT: the port is left to its rank 0" ||
  fail "own TCPStore" "rc $rc: $(tail -3 "$T/n0.out" | tr '\n' ' ')"
"$CDDP" run --standalone --agent-store maybe allreduce.py >"$T/bad.out" 2>&1; rc=$?
[ $rc = 2 ] && [ "$(wc -l <"$T/bad.out")" = 1 ] && grep -q -- '--agent-store' "$T/bad.out" && ok "bad input: --agent-store maybe" ||
  fail "--agent-store maybe" "rc $rc: $(cat "$T/bad.out")"

# 5. standalone, torchrun's usual form: a script in the current folder
timeout 90 "$CDDP" run --standalone --nproc-per-node 2 allreduce.py >"$T/n0.out" 2>&1; rc0=$?; : >"$T/n1.out"; rc1=0
worlds "standalone, 2 workers, 'allreduce.py' from the current folder" 2
ports_same "standalone" store
if grep -q "^cddp run: setting OMP_NUM_THREADS=1 for each worker (2 workers" "$T/n0.out" &&
   [ "$(grep -c 'OMP_NUM_THREADS=1 LOCAL_RANK' "$T/n0.out")" = 2 ]; then ok "OMP_NUM_THREADS=1 for 2 workers, with the notice"
else fail "OMP_NUM_THREADS" "$(grep -i omp "$T/n0.out" | head -3 | tr '\n' ' ')"; fi
# torchrun's --standalone is --rdzv-endpoint localhost:0; the same launch checks that an
# OMP_NUM_THREADS set by the user is kept (one launch fewer: each costs 2 torch imports)
OMP_NUM_THREADS=3 timeout 90 "$CDDP" run --rdzv-backend c10d --rdzv-endpoint localhost:0 --nnodes 1 --nproc-per-node 2 allreduce.py \
  >"$T/n0.out" 2>&1; rc0=$?
worlds "--rdzv-endpoint localhost:0 (torchrun's standalone)" 2
if [ "$(grep -c 'OMP_NUM_THREADS=3 LOCAL_RANK' "$T/n0.out")" = 2 ] && ! grep -q "setting OMP_NUM_THREADS" "$T/n0.out"; then
  ok "OMP_NUM_THREADS set by the user is kept, no notice"; else fail "OMP kept" "$(head -3 "$T/n0.out" | tr '\n' ' ')"; fi

# 6. mpirun starts the ranks; cddp run gives them torchrun's variables
if command -v mpirun >/dev/null; then
  timeout 90 mpirun --allow-run-as-root --oversubscribe -np 2 "$CDDP" run allreduce.py >"$T/n0.out" 2>&1; rc0=$?
  : >"$T/n1.out"; rc1=0
  worlds "mpirun -np 2 cddp run allreduce.py: ranks from OMPI_COMM_WORLD_*" 2
else
  echo "ok $((t_n += 1)) - test_torchrun:mpirun # SKIP Open MPI is not installed"
fi

# 7. -m MODULE and --no-python
PYTHONPATH=$T timeout 60 "$CDDP" run --standalone --nproc-per-node 2 -m pkg.hello >"$T/m.out" 2>&1; rc=$?
[ $rc = 0 ] && [ "$(grep -c 'module ok rank [01] of 2 as __main__' "$T/m.out")" = 2 ] && ok "-m pkg.hello runs the module on each worker" ||
  fail "-m" "rc=$rc $(tail -2 "$T/m.out" | tr '\n' ' ')"
printf '#!/bin/sh\necho "direct $RANK"\n' >"$T/direct.py"; chmod +x "$T/direct.py"
timeout 30 "$CDDP" run --standalone --no-python ./direct.py >"$T/d.out" 2>&1; rc=$?
[ $rc = 0 ] && grep -q '\[rank 0\] direct 0' "$T/d.out" && ok "--no-python runs a .py as it is" || fail "--no-python" "rc=$rc $(cat "$T/d.out")"

# 8. restart-all (--max-restarts, c10d MIN:MAX): a SIGKILLed worker restarts every worker with a
# new TORCHELASTIC_RESTART_COUNT, on the same port (the endpoint's), with a fresh round of keys
P=$(free_port)
two "X=0" "X=1" --nnodes 1:2 --nproc-per-node 1 --rdzv-backend c10d --rdzv-endpoint 127.0.0.1:$P --rdzv-id R$P \
  --max-restarts 2 restart.py
n=$(cat "$T/n0.out" "$T/n1.out" | grep -c "restart ok rank [01] of 2 attempt 1 port $P\$")
if [ "$rc0" = 0 ] && [ "$rc1" = 0 ] && [ "$n" = 2 ] && cat "$T/n0.out" "$T/n1.out" |
   grep -q "was killed by signal 9 (SIGKILL); restarting the workers (restart 1 of 2)"; then
  ok "restart-all: worker SIGKILLed, every worker restarted (attempt 1), job completes"
else fail "restart-all" "exits $rc0/$rc1, $n ranks in attempt 1: $(cat "$T/n0.out" "$T/n1.out" | tail -4 | tr '\n' ' ')"; fi

# 9. the blame line quotes the exception of the rank that failed first (torch's error file)
timeout 60 "$CDDP" run --standalone --nproc-per-node 2 fail.py >"$T/f.out" 2>&1; rc=$?
last=$(grep '^cddp run:' "$T/f.out" | tail -1)
if [ $rc = 1 ] && [[ "$last" == "cddp run: rank 0 (host "*") exited with code 1: ValueError: learning rate must be positive, got -0.5" ]]
then ok "blame line: rank 0, its host and its exception"; else fail "blame line" "rc=$rc '$last'"; fi
P=$(free_port)
NR() { timeout 60 "$CDDP" run --nnodes 2 --nproc-per-node 1 --rdzv-backend static --master-addr 127.0.0.1 --master-port "$P" \
  --node-rank "$1" fail.py >"$T/n$1.out" 2>&1; }
NR 0 & p0=$!; NR 1 & p1=$!; wait $p0; rc0=$?; wait $p1; rc1=$?
l0=$(grep '^cddp run:' "$T/n0.out" | tail -1); l1=$(grep '^cddp run:' "$T/n1.out" | tail -1)
if [ "$rc0" = 1 ] && [ "$rc1" = 1 ] && [[ "$l0" == *"rank 0 (host "*"ValueError: learning rate must be positive"* ]] &&
   [[ "$l1" == *"rank 0 (host "*"ValueError: learning rate must be positive"* ]]; then
  ok "blame line on both nodes: rank 0's exception, not rank 1 (which only lost its peer)"
else fail "blame on 2 nodes" "exits $rc0/$rc1: '$l0' / '$l1'"; fi

# without @record (no error file): the exception of the last traceback on rank 0's stderr
timeout 60 "$CDDP" run --standalone --nproc-per-node 2 fail_plain.py >"$T/f.out" 2>&1; rc=$?
last=$(grep '^cddp run:' "$T/f.out" | tail -1)
if [ $rc = 1 ] && [[ "$last" == "cddp run: rank 0 (host "*") exited with code 1: RuntimeError: config: lr is not a number" ]]
then ok "blame line without @record: the last traceback's exception"; else fail "blame without @record" "rc=$rc '$last'"; fi

# 10. torchrun's output flags: --local-ranks-filter, --redirects without --log-dir, per-rank --tee
timeout 60 "$CDDP" run --standalone --nproc-per-node 2 --local-ranks-filter 1 allreduce.py >"$T/o.out" 2>&1
grep -q '^\[rank 1\] allreduce ok' "$T/o.out" && ! grep -q '^\[rank 0\]' "$T/o.out" && ok "--local-ranks-filter 1: only rank 1 on the console" ||
  fail "--local-ranks-filter" "$(head -3 "$T/o.out" | tr '\n' ' ')"
(cd "$T" && TMPDIR=$T timeout 60 "$CDDP" run --standalone --nproc-per-node 2 --redirects 3 --tee 0:1 allreduce.py >"$T/o.out" 2>&1)
dir=$(sed -n 's/^cddp run: --redirects without --log-dir: worker output goes to \(.*\)\/rank<N>.log$/\1/p' "$T/o.out")
if [ -n "$dir" ] && grep -q "allreduce ok rank 1" "$dir/rank1.log" && grep -q '^\[rank 0\] allreduce ok' "$T/o.out" &&
   ! grep -q '^\[rank 1\]' "$T/o.out"; then ok "--redirects 3 --tee 0:1: files in a temporary folder, rank 0's stdout teed"
else fail "--redirects/--tee" "dir '$dir': $(head -4 "$T/o.out" | tr '\n' ' ')"; fi

# 11. bad PROGRAM: one line each, naming it and what to do, exit 2, no worker started
one_line() { # NAME WANT ARGS...
  local name=$1 want=$2 out rc; shift 2
  out=$(timeout 30 "$@" 2>&1); rc=$?
  if [ $rc = 2 ] && [ "$(printf '%s\n' "$out" | wc -l)" = 1 ] && printf '%s' "$out" | grep -qF -- "$want"; then ok "$name"
  else fail "$name" "exit $rc: $(printf '%s' "$out" | head -3 | tr '\n' ' ')"; fi
}
one_line "PROGRAM not found" "PROGRAM 'no_such_prog' not found" "$CDDP" run --standalone no_such_prog
one_line "missing .py" "PROGRAM 'missing.py' not found (in $T)" "$CDDP" run --standalone missing.py
printf 'echo hi\n' >"$T/notexec"
one_line "PROGRAM not executable" "PROGRAM './notexec' is not executable" "$CDDP" run --standalone ./notexec
printf '#!/bin/sh\nexec %s -S "$@"\n' "$PY" >"$T/nopy"; chmod +x "$T/nopy" # an interpreter without torch
one_line ".py whose interpreter has no torch" "PROGRAM 'allreduce.py' imports torch, but $T/nopy has no torch module" \
  "$CDDP" run --standalone --python "$T/nopy" allreduce.py
one_line "-m of a module that imports torch, interpreter without it, 2 nodes (no wait)" \
  "-m pkg.needs_torch imports torch, but $T/nopy has no torch module" env PYTHONPATH="$T" \
  "$CDDP" run --nnodes 2 --node-rank 0 --master-port "$(free_port)" --python "$T/nopy" -m pkg.needs_torch
# a script's own #! Python runs it, unless --python (or CDDP_PYTHON) says otherwise
other=/usr/bin/python3; [ "$PY" = "$other" ] && other=$ROOT/.venv/bin/python
printf '#!%s\nimport sys, torch\nprint("shebang", sys.executable)\n' "$PY" >"$T/sb.py"; chmod +x "$T/sb.py"
out=$(env -u CDDP_PYTHON timeout 60 "$CDDP" run --standalone sb.py 2>&1)
[ "$out" = "[rank 0] shebang $PY" ] && ok "a .py whose #! line names $PY runs with it" || fail "#! interpreter" "$out"
if [ -x "$other" ]; then
  out=$(env -u CDDP_PYTHON timeout 60 "$CDDP" run --standalone --python "$other" sb.py 2>&1)
  [ "$out" = "[rank 0] shebang $other" ] && ok "--python beats the #! line" || fail "--python over #!" "$out"
fi
printf '#!/usr/bin/env python9\nimport torch\n' >"$T/sb9.py"; chmod +x "$T/sb9.py"
one_line "#! naming an interpreter not on PATH" "PROGRAM 'sb9.py' names the interpreter 'python9' in its #! line" \
  env -u CDDP_PYTHON "$CDDP" run --standalone sb9.py
one_line "-m of a module that does not exist" "-m no.such.mod: $PY finds no module 'no.such.mod'" \
  "$CDDP" run --standalone -m no.such.mod
one_line "no interpreter" "'python9' (--python (or CDDP_PYTHON)) is not on PATH" "$CDDP" run --standalone --python python9 allreduce.py
one_line "--nproc-per-node gpu with no GPU" "--nproc-per-node gpu: no GPU is visible" \
  env CUDA_VISIBLE_DEVICES= "$CDDP" run --standalone --nproc-per-node gpu allreduce.py
one_line "--rdzv-conf unknown key" "unknown key 'join'" "$CDDP" run --rdzv-conf join=3 allreduce.py
}

# every case under Debian's torch 1.13 and under .venv's torch 2.x (scripts/install-deps.sh test)
base=$t_name
for PY in /usr/bin/python3 "$ROOT/.venv/bin/python"; do
  t_name=$base
  if ! v=$("$PY" -c 'import torch.distributed, torch; print(torch.__version__.split("+")[0])' 2>/dev/null); then
    echo "ok $((t_n += 1)) - $t_name:$PY # SKIP $PY has no torch (scripts/install-deps.sh test)"; continue
  fi
  t_name="$base[torch $v]" CDDP_PYTHON=$PY
  export CDDP_PYTHON
  cases
done
finish
