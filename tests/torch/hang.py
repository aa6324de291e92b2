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
    return torch.ones(1024)


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
