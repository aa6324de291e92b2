# own_store.py - a script that makes its own TCPStore on MASTER_PORT (rank 0 hosts it), as some
# do instead of init_process_group: the agent must leave that port free for it.
# tests/sh/test_torchrun.sh.
import datetime
import os

import torch.distributed as dist

rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), world, rank == 0,
                      datetime.timedelta(seconds=30))
store.set(f"k{rank}", str(rank))
store.wait([f"k{i}" for i in range(world)])
print(f"own store ok rank {rank} of {world} USE_AGENT_STORE={os.environ['TORCHELASTIC_USE_AGENT_STORE']}", flush=True)
