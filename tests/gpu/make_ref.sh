#!/usr/bin/env bash
# tests/gpu/make_ref.sh - the CPU's side of run.sh's loss check, made once on a CPU machine and
# shipped (tests/gpu/ref/gpt_200_cpu.txt, "step loss" per line): the run of loss_args.sh on the
# CPU table. 1.7 CPU-minutes (14 wall minutes on 2 busy cores). Run it again when the model, the data or the run's
# arguments change.
set -euo pipefail
cd "$(dirname "$0")/../.."
source tests/gpu/loss_args.sh
T=$(mktemp -d /tmp/cddp-gpu-ref.XXXXXX)
trap 'rm -rf "$T"' EXIT
build/cddp train --work-dir "$T" --name ref "${LOSS[@]}" --set train.device=cpu
mkdir -p tests/gpu/ref
grep -v '"eval"' "$T/ref/metrics.jsonl" | sed -n 's/.*"step":\([0-9]*\),.*"loss":\([^,]*\).*/\1 \2/p' >tests/gpu/ref/gpt_200_cpu.txt
echo "tests/gpu/make_ref.sh: $(wc -l <tests/gpu/ref/gpt_200_cpu.txt) steps in tests/gpu/ref/gpt_200_cpu.txt"
