# tools/train.py - a script with the command line of the seeds' trainers (Sana's
# tools/train.py): --config_path= --work_dir= --name= --resume_from=latest. It trains a tiny
# DDP model over gloo for --steps steps, rank 0 saves a checkpoint every step, and
# --resume_from=latest starts from the newest one; --step_ms=N makes each step last N ms more
# (room to kill a node mid-run). Used by tests/sh/test_torchrun.sh and test_store_failover.sh.
import argparse
import gc
import glob
import os
import time
import torch
import torch.distributed as dist
from torch.distributed.elastic.multiprocessing.errors import record


@record
def main():
    p = argparse.ArgumentParser()
    p.add_argument("--config_path", required=True)
    p.add_argument("--work_dir", required=True)
    p.add_argument("--name", required=True)
    p.add_argument("--resume_from", default=None)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--step_ms", type=int, default=0)
    a = p.parse_args()
    steps = int(open(a.config_path).read().split("=")[1]) if os.path.exists(a.config_path) else a.steps
    dist.init_process_group("gloo", init_method="env://")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    run = os.path.join(a.work_dir, a.name)
    os.makedirs(run, exist_ok=True)
    start = 0
    if a.resume_from == "latest":
        ckpts = sorted(glob.glob(os.path.join(run, "step-*.pt")))
        if ckpts:
            state = torch.load(ckpts[-1])
            model.module.load_state_dict(state["model"])
            start = state["step"]
            print(f"rank {rank}: resumed from {os.path.basename(ckpts[-1])}", flush=True)
    for step in range(start + 1, steps + 1):
        g = torch.Generator().manual_seed(step * 100 + rank)
        x = torch.randn(16, 8, generator=g)
        loss = model(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        if rank == 0:
            # write aside, then rename: a rank killed mid-save (the job re-forming) leaves no
            # truncated step-*.pt for --resume_from=latest to pick
            path = os.path.join(run, f"step-{step:04d}.pt")
            torch.save({"model": model.module.state_dict(), "step": step}, path + ".tmp")
            os.replace(path + ".tmp", path)
        dist.barrier()
        time.sleep(a.step_ms / 1000)
    w = torch.cat([q.detach().flatten() for q in model.parameters()])
    ws = [torch.zeros_like(w) for _ in range(world)]
    dist.all_gather(ws, w)
    assert all(torch.equal(ws[0], v) for v in ws), "replicas differ"
    print(f"train ok rank {rank} of {world} steps {start + 1}-{steps}", flush=True)
    # torch 2.x's gloo threads may drop the last collective's tensors after the interpreter has
    # begun to exit, and abort the rank (pytorch/pytorch#190489). DDP holds the process group:
    # free it first, so destroy_process_group joins gloo's threads while Python is alive.
    del model, opt
    gc.collect()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
