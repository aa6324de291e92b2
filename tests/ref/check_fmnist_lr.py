# check_fmnist_lr.py - PyTorch check of the shipped configs' learning rates: trains the
# configs/fmnist_*.yaml models (single process, same global batch) for 3 epochs and prints
# the test accuracy after each epoch. Run (about 2 minutes a run on one core):
#   OMP_NUM_THREADS=1 /usr/bin/python3 tests/ref/check_fmnist_lr.py [mlp] [cnn] [adamw] [mlp_constant]
import gzip, math, sys, time
import numpy as np
import torch, torch.nn as nn, torch.nn.functional as F

D = "/usr/share/datasets/fashion-mnist"

def idx(path, off):
    with gzip.open(path, "rb") as f:
        return np.frombuffer(f.read(), np.uint8, offset=off)

def load(split):
    x = idx(f"{D}/{split}-images-idx3-ubyte.gz", 16).reshape(-1, 1, 28, 28).astype(np.float32) / 255.0
    y = idx(f"{D}/{split}-labels-idx1-ubyte.gz", 8).astype(np.int64)
    return torch.from_numpy((x - 0.2860) / 0.3530), torch.from_numpy(y)

def mlp(hidden):
    layers, w = [nn.Flatten()], 784
    for h in hidden:
        layers += [nn.Linear(w, h), nn.ReLU()]
        w = h
    return nn.Sequential(*layers, nn.Linear(w, 10))

def cnn(chans, k, hidden):
    layers, c, hw = [], 1, 28
    for ch in chans:
        layers += [nn.Conv2d(c, ch, k, padding=k // 2), nn.ReLU(), nn.MaxPool2d(2)]
        c, hw = ch, hw // 2
    layers.append(nn.Flatten())
    w = c * hw * hw
    for h in hidden:
        layers += [nn.Linear(w, h), nn.ReLU()]
        w = h
    return nn.Sequential(*layers, nn.Linear(w, 10))

def run(name, make_model, opt_fn, lr, sched, warmup, clip=0.0, epochs=3, batch=256, seed=0):
    torch.manual_seed(seed)
    model = make_model()
    xtr, ytr = TRAIN
    xte, yte = TEST
    steps_per_epoch = len(ytr) // batch  # drop_last
    total = steps_per_epoch * epochs
    opt = opt_fn(model.parameters(), lr)
    def lr_at(s):
        if warmup and s < warmup:
            return lr * (s + 1) / warmup
        if sched == "cosine":
            p = (s - warmup) / max(1, total - warmup)
            return 0.5 * lr * (1 + math.cos(math.pi * p))
        return lr
    step, t0, accs = 0, time.time(), []
    for ep in range(epochs):
        g = torch.Generator().manual_seed(seed * 1000 + ep)
        perm = torch.randperm(len(ytr), generator=g)
        model.train()
        for b in range(steps_per_epoch):
            i = perm[b * batch:(b + 1) * batch]
            for pg in opt.param_groups:
                pg["lr"] = lr_at(step)
            loss = F.cross_entropy(model(xtr[i]), ytr[i])
            opt.zero_grad()
            loss.backward()
            if clip > 0:
                nn.utils.clip_grad_norm_(model.parameters(), clip)
            opt.step()
            step += 1
        model.eval()
        with torch.no_grad():
            acc = (model(xte).argmax(1) == yte).float().mean().item()
        accs.append(acc)
    print(f"{name}: seed {seed} lr {lr} {sched} warmup {warmup} clip {clip}: test acc per epoch "
          + " ".join(f"{a:.4f}" for a in accs) + f" ({time.time() - t0:.0f}s)", flush=True)
    return accs

TRAIN, TEST = load("train"), load("t10k")
sgd = lambda p, lr: torch.optim.SGD(p, lr=lr, momentum=0.9)
which = sys.argv[1:] or ["mlp", "cnn", "adamw"]
if "mlp" in which:
    run("fmnist_mlp", lambda: mlp([1024, 1024]), sgd, 0.05, "cosine", 0)
    run("fmnist_mlp", lambda: mlp([1024, 1024]), sgd, 0.05, "cosine", 0, seed=1)
if "mlp_constant" in which:
    run("fmnist_mlp", lambda: mlp([1024, 1024]), sgd, 0.05, "constant", 0)
if "cnn" in which:
    run("fmnist_cnn", lambda: cnn([16, 32], 3, [128]), sgd, 0.05, "cosine", 0)
if "adamw" in which:
    adamw = lambda p, lr: torch.optim.AdamW(p, lr=lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01)
    run("fmnist_mlp_adamw", lambda: mlp([1024, 1024]), adamw, 1e-3, "cosine", 100, clip=1.0)
