# fail_plain.py - fail.py without torch's @record: no error file, only the traceback on stderr,
# whose last exception (a chained one) the launcher must quote for rank 0. The others wait for
# rank 0 in a collective and fail only because it is gone. Used by tests/sh/test_torchrun.sh.
import sys
import torch
import torch.distributed as dist

dist.init_process_group("gloo", init_method="env://")
if dist.get_rank() == 0:
    print("Traceback (most recent call last):\n  a line that only looks like one", file=sys.stderr)
    try:
        float("-0.5x")
    except ValueError as e:
        raise RuntimeError("config: lr is not a number") from e
dist.all_reduce(torch.ones(4))
dist.barrier()
