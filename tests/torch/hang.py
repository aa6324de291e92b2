# hang.py - torch jobs for the launcher's watchdog (tests/sh/test_torch_hang.sh).
# `sleep`: rank 1 sleeps in its data loader at step 5 while its peers wait in all_reduce.
# `steady`: small all_reduces, a line per step, for ever (a rank to SIGSTOP, stacks to ask for).
# `busy SECS STEPS`: every rank computes silently for SECS seconds per step (never a hang).
import sys
import time
import torch
import torch.distributed as dist


def sleepy_data_loader(step, rank):
    if rank == 1 and step == 5 and sys.argv[1] == "sleep":
        time.sleep(3600)
    if rank == 1 and step == 5 and sys.argv[1] == "loader":
        next(iter(torch.utils.data.DataLoader(SpinningSet(), num_workers=2)))
    return torch.ones(1024)


class SpinningSet(torch.utils.data.Dataset):
    """`loader`: as `sleep`, but rank 1's main thread waits for a DataLoader over this set, whose
    2 worker processes spin on the CPU for ever: their CPU is not the rank's progress."""

    def __len__(self):
        return 4

    def __getitem__(self, i):
        x = 0
        while True:
            x += 1


def silent_step(secs):
    end, x = time.monotonic() + secs, torch.ones(64, 64)
    while time.monotonic() < end:
        x = torch.tanh(x * 1.0001) + 1.0
    return x.sum()


def main():
    mode = sys.argv[1]
    dist.init_process_group("gloo", init_method="env://")
    rank = dist.get_rank()
    steps = int(sys.argv[3]) if mode == "busy" else 1000
    for step in range(steps):
        t = silent_step(float(sys.argv[2])) * torch.ones(4) if mode == "busy" else sleepy_data_loader(step, rank)
        dist.all_reduce(t)
        if mode != "busy":
            time.sleep(0.05)
        print(f"step {step} rank {rank}", flush=True)
    dist.destroy_process_group()


main()
