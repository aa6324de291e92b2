#!/usr/bin/python3
# gen_optim.py - reference values for test_optim.c from PyTorch (torch.optim.SGD / AdamW,
# torch.nn.utils.clip_grad_norm_, LambdaLR). Writes tests/ref/optim.txt, which is committed.
# Run: OMP_NUM_THREADS=1 /usr/bin/python3 tests/ref/gen_optim.py > tests/ref/optim.txt
import math
import torch

torch.set_num_threads(1)
N, STEPS = 67, 6  # 67: a vector body plus a scalar tail

# name, kind, momentum, nesterov, weight_decay, beta1, beta2, eps, grad_clip, base lr
CONFIGS = [
    ("sgd", "sgd", 0.0, 0, 0.0, 0, 0, 0, 0.0, 0.1),
    ("sgd_momentum", "sgd", 0.9, 0, 0.0, 0, 0, 0, 0.0, 0.1),
    ("sgd_nesterov", "sgd", 0.9, 1, 0.0, 0, 0, 0, 0.0, 0.05),
    ("sgd_wd", "sgd", 0.9, 0, 0.01, 0, 0, 0, 0.0, 0.1),
    ("sgd_plain_wd", "sgd", 0.0, 0, 0.05, 0, 0, 0, 0.0, 0.2),
    ("sgd_clip", "sgd", 0.9, 0, 0.0, 0, 0, 0, 4.0, 0.1),
    ("sgd_nesterov_wd_clip", "sgd", 0.8, 1, 5e-3, 0, 0, 0, 3.0, 0.1),
    ("adamw", "adamw", 0, 0, 0.01, 0.9, 0.999, 1e-8, 0.0, 1e-3),
    ("adamw_nowd", "adamw", 0, 0, 0.0, 0.8, 0.99, 1e-6, 0.0, 1e-2),
    ("adamw_clip", "adamw", 0, 0, 0.1, 0.9, 0.95, 1e-8, 2.0, 3e-3),
]


def f(x):
    return "%.9g" % x


def row(tag, t):
    return tag + " " + " ".join(f(v) for v in t.tolist())


print("# optimizer reference: torch %s, float32, N=%d params, %d steps per config" % (torch.__version__, N, STEPS))
print("# config NAME KIND momentum nesterov weight_decay beta1 beta2 eps grad_clip; then")
print("# init P..., and per step: lr LR, grad G..., norm PRE_CLIP_NORM, param P... (after the step)")
gen = torch.Generator().manual_seed(1234)
for (name, kind, mom, nest, wd, b1, b2, eps, clip, lr) in CONFIGS:
    p = torch.randn(N, generator=gen, dtype=torch.float32)
    p = torch.nn.Parameter(p)
    print("config %s %s %s %d %s %s %s %s %s" % (name, kind, f(mom), nest, f(wd), f(b1), f(b2), f(eps), f(clip)))
    print(row("init", p.detach()))
    if kind == "sgd":
        opt = torch.optim.SGD([p], lr=lr, momentum=mom, nesterov=bool(nest), weight_decay=wd)
    else:
        opt = torch.optim.AdamW([p], lr=lr, betas=(b1, b2), eps=eps, weight_decay=wd)
    for step in range(STEPS):
        step_lr = lr * (1.0 - 0.12 * step)  # the LR changes every step, as under a schedule
        for g in opt.param_groups:
            g["lr"] = step_lr
        # alternate small and large gradients so clipping is both on and off
        scale = 0.1 if step % 2 == 0 else 1.0
        grad = torch.randn(N, generator=gen, dtype=torch.float32) * scale
        print("lr " + f(step_lr))
        print(row("grad", grad))
        p.grad = grad.clone()
        if clip > 0:
            norm = torch.nn.utils.clip_grad_norm_([p], clip)
        else:
            norm = torch.linalg.vector_norm(p.grad)
        print("norm " + f(float(norm)))
        opt.step()
        print(row("param", p.detach()))
    print("end")

# Schedules: LambdaLR with the documented lambda (docs/optim.md), base LR = peak lr.
def lam(kind, lr, min_lr, warmup, total):
    def fn(step):
        if warmup > 0 and step < warmup:
            return (step + 1) / warmup
        if kind == "constant":
            return 1.0
        prog = min(1.0, max(0.0, (step - warmup) / max(1, total - warmup)))
        if kind == "cosine":
            f_ = 0.5 * (1.0 + math.cos(math.pi * prog))
        else:
            f_ = 1.0 - prog
        return (min_lr + (lr - min_lr) * f_) / lr
    return fn

print("# sched KIND lr min_lr warmup total; then at STEP LR (LambdaLR after STEP scheduler steps)")
for (kind, lr, min_lr, warmup, total) in [
    ("constant", 0.1, 0.0, 0, 100), ("constant", 0.1, 0.0, 10, 100),
    ("cosine", 0.1, 0.0, 0, 100), ("cosine", 0.1, 1e-3, 10, 100), ("cosine", 3e-4, 3e-5, 50, 1000),
    ("linear", 0.1, 0.0, 0, 100), ("linear", 0.2, 0.01, 5, 50)]:
    print("sched %s %s %s %d %d" % (kind, f(lr), f(min_lr), warmup, total))
    p = torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.SGD([p], lr=lr)
    sch = torch.optim.lr_scheduler.LambdaLR(opt, lam(kind, lr, min_lr, warmup, total))
    want = sorted({0, 1, warmup - 1, warmup, warmup + 1, total // 2, total - 1, total, total + 5} - {-1})
    for step in range(max(want) + 1):
        if step in want:
            print("at %d %s" % (step, f(sch.get_last_lr()[0])))
        opt.step()
        sch.step()
    print("end")
