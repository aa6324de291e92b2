#!/usr/bin/env bash
# test_doc_lines.sh - every command line of README.md and docs/*.md (the lines of ```sh blocks)
# is either run here as written, with the placeholders of the table below filled in and small
# sizes, or named in NOT_HERE with the reason it cannot run on this machine. A line that fails,
# or a new line in neither, fails the test: the README must work for a newcomer as written.
# The lines run DOC_JOBS (2) at a time, in order within a group that shares a folder (the
# run folder the README's later lines read, a sweep and its plot, the bench binary and make,
# the torch scripts).
cd "$(dirname "$0")/../.." && source tests/sh/lib.sh
T=$(mktemp -d /tmp/cddp-doclines.XXXXXX)
trap 'kill -KILL $(jobs -p) 2>/dev/null; wait; rm -rf "$T"' EXIT

# Lines that cannot run here, each matched by a fixed substring, with the reason.
NOT_HERE=(
  "make install|writes /usr/local, shared by every engineer of this machine (test_install.sh installs into a prefix)"
  "tests/run.sh|the whole suite: it runs this test"
  "pip install .|installs into the current Python (test_wheel.sh builds and installs the wheel in a venv)"
  "srun |needs the local Slurm cluster (test_slurm.sh, under its lock)"
  "netns|needs network namespaces (test_netns_train.sh, under the cluster lock)"
  "compress_netns.sh|network namespaces (test_compress_bench.sh)"
  "bench/compare.sh|about 3 minutes; installs what is missing"
  "bench/torchrun_bench.sh|minutes (test_torchrun_bench.sh runs it small)"
  "bench/elastic_bench.sh|minutes (test_elastic_bench.sh runs it small)"
  "bench/store_host_bench.sh|a minute per run (test_store_host_bench.sh)"
  "bench/store_flood.sh|a benchmark: 20,000 connections for half a minute (test_store_attack.sh and test_store_flood test the defences)"
  "bench/rdzv_scale.sh|64 to 1,024 agents: minutes (test_rdzv_scale.sh runs it at 16 and 128)"
  "bench/torch_watchdog_bench.sh|a benchmark: 20 pairs of torch jobs, minutes (test_torch_hang covers the watchdog)"
  "bench/tuner_bench.sh|a benchmark: bench/, not timed tests (test_tune.sh covers the tuner)"
  "tests/sh/test_elastic_join.sh|a test of its own"
  "10.0.0.1|a second host"
  "head:29400 --rdzv-id J cddp doctor|three hosts (test_doctor.sh)"
  "cddp flight /tmp/cddp-flight-J|the folder a hang's line names (test_flight.sh, test_hang.sh)"
  "cddp run --nnodes 2 ... cddp train|an elided line: '...' stands for the node flags"
  "cddp run --hang-timeout 30 ...|an elided line: '...' stands for the node flags"
  "PROGRAM ARGS...|the form of the command, not a command"
  "--nnodes 2 --nproc-per-node 8|two hosts (test_run_multi.sh runs two nodes on one host)"
  "--nnodes 2:4|two to four hosts (test_elastic.sh, test_elastic_member.sh)"
  "[--set key=value ...]|the form of the command, not a command"
  "lit.py|the user's Lightning script (test_lightning.sh runs one)"
  "cddp status HEAD:29400|needs a running job at that endpoint (test_status.sh)"
  "cddp store --port|a server: it runs until stopped (test_store_cli.sh)"
)
# Placeholders and small sizes, applied to every line that runs (sed expressions; a port per line,
# as lines run side by side).
subst() { SUBST=(
  "s#HEAD:29400#127.0.0.1:$(free_port)#g"
  "s#--rdzv-id J#--rdzv-id doclines#g"
  "s#PORT=29600#PORT=$(free_port)#g"
  "s#runs/#$T/runs/#g"
  "s#-e 64M#-e 1M#g"
  "s#-e 256M#-e 1M#g"
  "s#-b 64M -e 1M#-b 1M -e 1M#g"
  "s#--sweep \\(.*\\)--steps 30 #--sweep \\1#"
  "s#--sweep #--sweep --steps 4 #"
  "s#--nproc-per-node 3 #--nproc-per-node 2 #g"
  "s#--node-rank R --master-addr A --master-port P#--nnodes 1 --node-rank 0 --master-addr 127.0.0.1 --master-port $(free_port)#"
  "s#--nnodes 2 --nnodes 1#--nnodes 1#"
  "s#PROGRAM\$#true#"
  "s#train.py#$T/train.py#g"
  "s#--nproc-per-node 8#--nproc-per-node 2#g"
  "s# \[--zero-copy\]##"
  "s#/tmp/sw#$T/sw#g"
  "s#^mpirun -np 16#mpirun --allow-run-as-root --oversubscribe -np 2#"
); }

lines=$(python3 - README.md docs/*.md <<'PY'
import re, sys
for f in sys.argv[1:]:
    lang, buf, start = None, "", 0
    for i, l in enumerate(open(f), 1):
        m = re.match(r"^\s*```(\w*)", l)
        if m:
            lang = None if lang is not None else m.group(1)
            continue
        if lang not in ("sh", "bash") or not l.strip() or l.lstrip().startswith("#"): continue
        if not buf: start = i
        buf += l.rstrip("\n")
        if buf.endswith("\\"): buf = buf[:-1]; continue
        print(f"{f}:{start}\t{re.sub(r'  +#.*$', '', buf).strip()}")
        buf = ""
PY
)
export PATH=$PWD/build:$PATH CDDP_RDZV_SAY_MS=0
# the user's train.py: a torch script's first allreduce (Debian's torch, first on PATH)
mkdir -p "$T/bin" && ln -s /usr/bin/python3 "$T/bin/python3"
export PATH=$T/bin:$PATH
cat >"$T/train.py" <<'PY'
import sys, torch, torch.distributed as dist
dist.init_process_group("gloo")
t = torch.ones(4); dist.all_reduce(t)
assert t[0].item() == dist.get_world_size(), t
print("train.py", sys.argv[1:], "allreduce", t[0].item())
PY
# the run the lines after it read (cddp ckpt info / plot / status runs/fmnist_mlp)
cddp run --standalone --nproc-per-node 2 cddp train --config configs/fmnist_mlp.yaml --work-dir "$T/runs" \
  --set train.max_steps=4 --set eval.every_epoch=false >"$T/first.out" 2>&1 || fail "the first run" "$(tail -3 "$T/first.out")"
# run_line N WHERE LINE CMD: runs CMD; its verdict (exit code, the tail of its output) in $T/v.N
run_line() {
  local out rc t0=$SECONDS
  out=$(CDDP_TEST_DOC=1 timeout 120 bash -c "$4" 2>&1 </dev/null); rc=$?
  printf '%s\t%s\t%s\t%s\t%s\n' "$rc" "$((SECONDS - t0))" "$2" "$3" "$(tail -3 <<<"$out" | tr '\n\t' '  ')" >"$T/v.$1"
}
declare -A claimed=([fmnist_mlp]=1) last_of=()
n=0
while IFS=$'\t' read -r where line; do
  reason=""
  for e in "${NOT_HERE[@]}"; do [[ "$line" == *"${e%%|*}"* ]] && reason=${e#*|} && break; done
  if [ -n "$reason" ]; then
    echo "# not run here: $where: $line ($reason)"
    continue
  fi
  cmd=$line
  subst
  for s in "${SUBST[@]}"; do cmd=$(sed "$s" <<<"$cmd"); done
  # small sizes: a few steps of training (a GPT: a small batch), the workers' scripts from examples/.
  # A fresh start gets a folder of its own, unless the README's later lines read it (the first
  # start of a config: runs/fmnist_mlp is the first run's); a resume continues the first run's.
  n=$((n + 1)) && work=$T/w$n
  if [[ "$cmd" == *"cddp train"* ]]; then
    base=$(sed -n 's#.*--config configs/\([a-z0-9_]*\)\.yaml.*#\1#p' <<<"$cmd")
    if [[ "$cmd" == *"--resume-from"* ]]; then work=$T/runs
    elif [[ "$cmd" != *"--name "* ]] && [ -n "$base" ] && [ -z "${claimed[$base]}" ]; then work=$T/runs claimed[$base]=1; fi
    cmd="$cmd --work-dir $work --set train.max_steps=4 --set eval.every_epoch=false"
  fi
  [[ "$cmd" == *"--config configs/gpt_kjv.yaml"* ]] &&
    cmd="$cmd --set schedule.warmup_steps=1 --set batch.global=4 --set batch.micro=2 --set eval.at_end=false"
  [[ "$cmd" == *"cddp sample"* ]] && cmd=${cmd/-n 200/-n 5}
  group=""
  case $cmd in
  *"$T/runs"*) group=runs ;;
  *"$T/sw"*) group=sw ;;
  *"make -C bench"* | *"build/bench/"*) group=bench ;;
  *"train.py"* | *torch*) group=torch ;; # two torch jobs at once on 2 cores: gloo's connects time out
  esac
  [ -n "$group" ] && [ -n "${last_of[$group]}" ] && wait "${last_of[$group]}" 2>/dev/null
  while [ "$(jobs -rp | wc -l)" -ge "${DOC_JOBS:-2}" ]; do wait -n; done
  run_line "$n" "$where" "$line" "$cmd" &
  [ -n "$group" ] && last_of[$group]=$!
done <<<"$lines"
wait
for k in $(seq "$n"); do
  IFS=$'\t' read -r rc secs where line tail <"$T/v.$k" || { fail "line $k" "no verdict"; continue; }
  [ "$rc" = 0 ] && ok "$where runs (${secs} s): ${line:0:90}" || fail "$where: ${line:0:90}" "rc=$rc after $secs s: $tail"
done
finish
