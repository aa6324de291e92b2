#!/usr/bin/env bash
# test_chaos_store.sh - the chaos loop (test_chaos.sh) with 3 agents x 1 worker under `cddp run
# --nnodes 2:3 --restart-mode replace`: among the random SIGKILLs of workers, of rank 0 writing
# a checkpoint and of workers inside a recovery, one agent (with its worker) a run, in odd runs
# the one that hosts the job's store. The store moves to a survivor (docs/store.md, "Failover"),
# and every run must still complete with every sample once and every checkpoint valid.
# CHAOS_RUNS runs (4 here, to keep the suite short; CHAOS_RUNS=20 for the full loop); the other
# CHAOS_* knobs of test_chaos.sh apply.
cd "$(dirname "$0")/../.." || exit 1
CHAOS_NODES=3 CHAOS_RUNS=${CHAOS_RUNS:-4} exec bash tests/sh/test_chaos.sh
