#!/usr/bin/env bash
# train_tasks.sh - cddp train with one srun task per rank (no agent): run it inside an allocation (sbatch, salloc).
#
#   salloc -N3 --ntasks-per-node=2 examples/slurm/train_tasks.sh --set batch.global=384 --set batch.micro=64
#   sbatch -N3 --ntasks-per-node=2 examples/slurm/train_tasks.sh ...
#
# Every task is a rank: RANK = SLURM_PROCID, WORLD_SIZE = the step's tasks; rank 0 hosts the
# store on the step's first host, at a port derived from the job and step ids (MASTER_PORT /
# MASTER_ADDR override). batch.global must split over the world: global = micro x ranks x k.
# Variables: CDDP, CONFIG, WORK_DIR, RUN_NAME as in train.sbatch.
#SBATCH --job-name=cddp-train-tasks
#SBATCH --output=cddp-train-tasks-%j.out
set -euo pipefail
: "${SLURM_JOB_ID:?run me inside an allocation: sbatch or salloc}"
CDDP=${CDDP:-cddp}
CONFIG=${CONFIG:-configs/fmnist_mlp.yaml}
WORK_DIR=${WORK_DIR:-$PWD/runs}
RUN_NAME=${RUN_NAME:-slurm-$SLURM_JOB_ID}
echo "cddp-train-tasks: job $SLURM_JOB_ID, ${SLURM_NTASKS:-?} tasks on ${SLURM_JOB_NODELIST:-?}"
# the job's store token (docs/store.md, the threat model): srun hands it to every task, and no
# stranger on the nodes' network can then join, read or stop the job
export CDDP_TOKEN=${CDDP_TOKEN:-$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')}
srun --kill-on-bad-exit=1 "$CDDP" train --launcher slurm --config "$CONFIG" --work-dir "$WORK_DIR" --name "$RUN_NAME" "$@"
echo "cddp-train-tasks: done"
