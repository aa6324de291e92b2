# store_probe.py - env:// rendezvous and one gloo all_reduce, then says whether this worker
# listens on MASTER_PORT itself (it must not when the agent serves the workers' store), which
# torch it ran, its MASTER_PORT and whether a key the last round set is gone from the store.
# PROBE_FAIL_ONCE=1: in the first round, rank 1 leaves a key and fails (a restart follows).
# Used by tests/sh/test_torch_agent_store.sh.
import os
import time

import torch
import torch.distributed as dist


def listens_on(port):
    """Whether a socket of this process listens on port (from /proc: no extra package)."""
    mine = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            link = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if link.startswith("socket:["):
            mine.add(link[8:-1])
    for table in ("/proc/self/net/tcp", "/proc/self/net/tcp6"):
        try:
            rows = open(table).read().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            f = row.split()
            if f[3] == "0A" and int(f[1].rsplit(":", 1)[1], 16) == port and f[9] in mine:
                return True
    return False


dist.init_process_group("gloo", init_method="env://")
rank, world = dist.get_rank(), dist.get_world_size()
t = torch.full((256,), float(rank + 1))
dist.all_reduce(t)
assert torch.all(t == world * (world + 1) / 2), t[:4]
port = int(os.environ["MASTER_PORT"])
store = dist.distributed_c10d._get_default_store()
restart = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
if os.environ.get("PROBE_FAIL_ONCE") == "1" and restart == "0":
    store.add("probe_last_round", 1)
    dist.barrier()
    if rank == 1:
        os._exit(3)
    time.sleep(60)  # the agent stops it and restarts both
fresh = store.add("probe_last_round", 0) == 0  # 1.13's PrefixStore has no check()
print(f"probe ok rank {rank} of {world} torch {torch.__version__.split('.')[0]}.x "
      f"USE_AGENT_STORE={os.environ.get('TORCHELASTIC_USE_AGENT_STORE', '-')} "
      f"listens_on_master_port={listens_on(port)} MASTER_PORT={port} CDDP_STORE={os.environ.get('CDDP_STORE', '-')} "
      f"restart={restart} fresh_keys={fresh}",
      flush=True)
dist.destroy_process_group()
