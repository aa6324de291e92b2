# fail.py - rank 0 raises at once; the others wait for it in a collective and fail only because
# it is gone. With @record each writes torch's error file; the launcher must blame rank 0 and
# quote its exception. Used by tests/sh/test_torchrun.sh.
import os
import torch
import torch.distributed as dist
from torch.distributed.elastic.multiprocessing.errors import record


@record
def main():
    dist.init_process_group("gloo", init_method="env://")
    if dist.get_rank() == 0:
        raise ValueError("learning rate must be positive, got -0.5")
    dist.all_reduce(torch.ones(4))
    dist.barrier()


main()
