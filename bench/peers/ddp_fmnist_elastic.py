"""ddp_fmnist_elastic.py - the torchrun elastic peer of `cddp train` for bench/elastic_bench.sh:
ddp_fmnist.py's MLP, data, batch and optimizer (with cddp's cosine schedule), made restartable
the way torchrun jobs are: a checkpoint (model, optimizer, step; the epoch position follows from
the step) every K steps, written by rank 0 to a temporary file and renamed, and every worker
resumes from the newest one when it starts (torchrun restarts every worker on a failure).

  torchrun --standalone --nproc_per_node 2 --max-restarts 3 --redirects 1 --tee 1 \
      ddp_fmnist_elastic.py --run-dir DIR [--epochs 1] [--ckpt-every 50]

Rank 0 appends one JSON line per completed step to DIR/steps.jsonl, the same fields the
benchmark reads from cddp's metrics.jsonl: {"step": S, "epoch": E, "loss": L, "time": T}
(S counts from 1, T is the wall clock in Unix seconds), one {"resume": S, "time": T} line when
a (re)started group continues after step S (0: from scratch), and {"eval": E, "accuracy": A}.
Reads the Debian package's IDX files directly (no torchvision).
"""
import argparse, json, math, os, time

import torch
import torch.distributed as dist
import torch.nn as nn

from ddp_fmnist import load


def log(path, rec):
    with open(path, "a") as f:  # one line per write, closed at once: a SIGKILL loses nothing logged
        f.write(json.dumps(rec) + "\n")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--run-dir", required=True, help="checkpoint and steps.jsonl folder")
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--ckpt-every", type=int, default=50, help="checkpoint every K steps (0: never)")
    ap.add_argument("--global-batch", type=int, default=256)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--momentum", type=float, default=0.9)
    ap.add_argument("--hidden", default="1024,1024")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seed", type=int, default=42)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    if world > 1:
        dist.init_process_group("gloo")
    os.makedirs(a.run_dir, exist_ok=True)
    ckpt = os.path.join(a.run_dir, "ckpt.pt")
    steps_log = os.path.join(a.run_dir, "steps.jsonl")

    torch.manual_seed(a.seed)
    widths = [784] + [int(h) for h in a.hidden.split(",")] + [10]
    layers = []
    for i in range(len(widths) - 1):
        layers.append(nn.Linear(widths[i], widths[i + 1]))
        if i < len(widths) - 2:
            layers.append(nn.ReLU())
    net = nn.Sequential(*layers)
    opt = torch.optim.SGD(net.parameters(), lr=a.lr, momentum=a.momentum)
    step = 0
    if os.path.exists(ckpt):  # every rank reads the same file: rank 0 renamed it in place
        st = torch.load(ckpt)
        net.load_state_dict(st["model"])
        opt.load_state_dict(st["optim"])
        step = st["step"]
    model = nn.parallel.DistributedDataParallel(net) if world > 1 else net
    lossf = nn.CrossEntropyLoss()
    xtr, ytr = load("train")
    xte, yte = load("test")
    micro = a.global_batch // world
    per_epoch = len(xtr) // a.global_batch
    total = per_epoch * a.epochs
    if rank == 0:
        log(steps_log, {"resume": step, "time": round(time.time(), 3)})

    model.train()
    while step < total:
        epoch, s = divmod(step, per_epoch)  # the epoch position, from the step
        g = torch.Generator().manual_seed(a.seed + epoch)
        perm = torch.randperm(len(xtr), generator=g)
        idx = perm[s * a.global_batch + rank * micro: s * a.global_batch + (rank + 1) * micro]
        for grp in opt.param_groups:  # cddp's cosine: lr * (1 + cos(pi * step / total)) / 2
            grp["lr"] = a.lr * 0.5 * (1.0 + math.cos(math.pi * step / total))
        opt.zero_grad(set_to_none=True)
        loss = lossf(model(xtr[idx]), ytr[idx])
        loss.backward()
        opt.step()
        step += 1
        if rank == 0:
            log(steps_log, {"step": step, "epoch": epoch + 1, "loss": round(loss.item(), 6),
                            "time": round(time.time(), 3)})
            if a.ckpt_every and step % a.ckpt_every == 0:
                tmp = ckpt + ".tmp"
                torch.save({"model": net.state_dict(), "optim": opt.state_dict(), "step": step}, tmp)
                os.replace(tmp, ckpt)

    model.eval()
    with torch.no_grad():
        n = len(xte)
        lo, hi = n * rank // world, n * (rank + 1) // world
        correct = torch.tensor([float((net(xte[lo:hi]).argmax(1) == yte[lo:hi]).sum())])
        if world > 1:
            dist.all_reduce(correct)
        acc = correct.item() / n
    if rank == 0:
        log(steps_log, {"eval": a.epochs, "accuracy": round(acc, 4)})
        print(f"peer elastic: {step} steps, test accuracy {acc:.4f}", flush=True)
    if world > 1:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
