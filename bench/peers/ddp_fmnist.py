"""ddp_fmnist.py - the PyTorch peer of `cddp train`: the same MLP, data, batch and optimizer,
trained with DistributedDataParallel over gloo (or alone, without torchrun).

  torchrun --standalone --nproc_per_node 2 --redirects 1 --tee 1 ddp_fmnist.py [--epochs 3]
  python3 ddp_fmnist.py --threads 2            # one process, the best single-process figure

Prints per-epoch test accuracy and one final line:
  peer ddp: world W, threads T, S samples/s (steps timed: N), test accuracy A
Reads the Debian package's IDX files directly (no torchvision).
"""
import argparse, gzip, os, struct, time

import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn

DATA = "/usr/share/datasets/fashion-mnist"


def load(split):
    pre = "train" if split == "train" else "t10k"
    with gzip.open(f"{DATA}/{pre}-images-idx3-ubyte.gz") as f:
        magic, n, h, w = struct.unpack(">IIII", f.read(16))
        assert magic == 0x803
        x = np.frombuffer(f.read(), np.uint8).reshape(n, h * w)
    with gzip.open(f"{DATA}/{pre}-labels-idx1-ubyte.gz") as f:
        magic, n2 = struct.unpack(">II", f.read(8))
        assert magic == 0x801 and n2 == n
        y = np.frombuffer(f.read(), np.uint8)
    x = (torch.from_numpy(x.astype(np.float32)) / 255.0 - 0.2860) / 0.3530
    return x, torch.from_numpy(y.astype(np.int64))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--global-batch", type=int, default=256)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--momentum", type=float, default=0.9)
    ap.add_argument("--hidden", default="1024,1024")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--max-steps", type=int, default=0, help="stop after N steps (speed runs)")
    ap.add_argument("--seed", type=int, default=42)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    if world > 1:
        dist.init_process_group("gloo")
    torch.manual_seed(a.seed)
    widths = [784] + [int(h) for h in a.hidden.split(",")] + [10]
    layers = []
    for i in range(len(widths) - 1):
        layers.append(nn.Linear(widths[i], widths[i + 1]))
        if i < len(widths) - 2:
            layers.append(nn.ReLU())
    model = nn.Sequential(*layers)
    if world > 1:
        model = nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(model.parameters(), lr=a.lr, momentum=a.momentum)
    lossf = nn.CrossEntropyLoss()
    xtr, ytr = load("train")
    xte, yte = load("test")
    micro = a.global_batch // world
    steps_per_epoch = len(xtr) // a.global_batch
    timed_samples, timed_s, steps, acc = 0, 0.0, 0, 0.0
    for epoch in range(a.epochs):
        g = torch.Generator().manual_seed(a.seed + epoch)
        perm = torch.randperm(len(xtr), generator=g)
        model.train()
        for s in range(steps_per_epoch):
            t0 = time.perf_counter()
            idx = perm[s * a.global_batch + rank * micro: s * a.global_batch + (rank + 1) * micro]
            opt.zero_grad(set_to_none=True)
            loss = lossf(model(xtr[idx]), ytr[idx])
            loss.backward()
            opt.step()
            dt = time.perf_counter() - t0
            steps += 1
            if steps > 5:  # skip warm-up steps
                timed_samples += a.global_batch
                timed_s += dt
            if a.max_steps and steps >= a.max_steps:
                break
        model.eval()
        with torch.no_grad():
            n = len(xte)
            lo, hi = n * rank // world, n * (rank + 1) // world
            correct = torch.tensor([float((model(xte[lo:hi]).argmax(1) == yte[lo:hi]).sum())])
            if world > 1:
                dist.all_reduce(correct)
            acc = correct.item() / n
        if rank == 0:
            print(f"epoch {epoch + 1}: test accuracy {acc:.4f}", flush=True)
        if a.max_steps and steps >= a.max_steps:
            break
    # every rank runs the same steps; rank 0's rate is the job's rate
    if rank == 0:
        rate = timed_samples / timed_s if timed_s > 0 else 0.0
        print(f"peer ddp: world {world}, threads {a.threads}, {rate:.0f} samples/s "
              f"(steps timed: {max(steps - 5, 0)}), test accuracy {acc:.4f}", flush=True)
    if world > 1:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
