# torch_steps.py - a fixed torch DDP-style step for bench/torch_watchdog_bench.sh: a 256x256 MLP's
# forward and backward on a 64-sample batch, its gradient all_reduced over gloo, a line a step.
# Rank 0 prints "step_ms MEDIAN MEAN" over the steps after the warm-up, and every rank the names
# of the variables it was given ("env_names A,B,..."): the bench checks both arms got the same.
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist

steps, warm = int(sys.argv[1]), 10
print("env_names " + ",".join(sorted(os.environ)), flush=True)
dist.init_process_group("gloo")
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10))
x, y = torch.randn(64, 256), torch.randint(0, 10, (64,))
times = []
for step in range(steps + warm):
    t0 = time.perf_counter()
    model.zero_grad()
    torch.nn.functional.cross_entropy(model(x), y).backward()
    for p in model.parameters():
        dist.all_reduce(p.grad)
    print(f"step {step}", flush=True)
    if step >= warm:
        times.append((time.perf_counter() - t0) * 1e3)
if dist.get_rank() == 0:
    print(f"step_ms {statistics.median(times):.4f} {statistics.mean(times):.4f}", flush=True)
dist.destroy_process_group()
