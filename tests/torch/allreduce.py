# allreduce.py - the smallest torch.distributed job: env:// rendezvous, one gloo all_reduce,
# checked; prints what the launcher gave it. Used by tests/sh/test_torchrun.sh.
import os
import torch
import torch.distributed as dist

dist.init_process_group("gloo", init_method="env://")
rank, world = dist.get_rank(), dist.get_world_size()
t = torch.full((1024,), float(rank + 1))
dist.all_reduce(t)
assert torch.all(t == world * (world + 1) / 2), t[:4]
env = " ".join(f"{k}={os.environ.get(k, '-')}" for k in (
    "MASTER_PORT", "CDDP_STORE", "TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_USE_AGENT_STORE", "ROLE_NAME",
    "OMP_NUM_THREADS", "LOCAL_RANK", "GROUP_RANK"))
print(f"allreduce ok rank {rank} of {world} {env} errfile={'TORCHELASTIC_ERROR_FILE' in os.environ}", flush=True)
dist.destroy_process_group()
