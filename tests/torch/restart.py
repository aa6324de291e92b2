# restart.py - restart-all: in the first attempt (TORCHELASTIC_RESTART_COUNT=0) the last rank
# kills itself with SIGKILL after one all_reduce; every worker must be restarted with a new
# restart count and a fresh rendezvous, and the second attempt completes. tests/sh/test_torchrun.sh.
import os
import signal
import torch
import torch.distributed as dist

dist.init_process_group("gloo", init_method="env://")
rank, world = dist.get_rank(), dist.get_world_size()
attempt = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
t = torch.ones(16) * (rank + 1)
dist.all_reduce(t)
assert t[0].item() == world * (world + 1) / 2
if attempt == 0 and rank == world - 1:
    os.kill(os.getpid(), signal.SIGKILL)
dist.barrier()
print(f"restart ok rank {rank} of {world} attempt {attempt} port {os.environ['MASTER_PORT']}", flush=True)
dist.destroy_process_group()
