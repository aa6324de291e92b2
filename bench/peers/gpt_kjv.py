"""gpt_kjv.py - the PyTorch peer of `cddp train --config configs/gpt_kjv.yaml`: the same
byte-level GPT (pre-norm, tanh GELU, tied head, GPT-2 init), the same KJV text and split
(blocks of 100 verses, every 20th held out), AdamW + warmup + cosine, clipping, trained with
DistributedDataParallel over gloo under torchrun (or alone).

  torchrun --standalone --nproc_per_node 2 --redirects 1 --tee 1 gpt_kjv.py --max-steps 200
Prints one final line: "peer gpt: world W, threads T, fp32|bf16, N tokens/s (steps timed: S), val loss L"
"""
import argparse, math, os, subprocess, time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F


def kjv_splits():
    text = subprocess.run(["bible", "-f", "Gen1:1-Rev22:21"], capture_output=True, check=True).stdout
    lines = text.split(b"\n")
    train, val = bytearray(), bytearray()
    for i, ln in enumerate(lines):
        if i == len(lines) - 1 and ln == b"":
            break
        chunk = ln + (b"\n" if i < len(lines) - 1 else b"")
        (val if (i // 100) % 20 == 19 else train).extend(chunk)
    return torch.frombuffer(bytes(train), dtype=torch.uint8), torch.frombuffer(bytes(val), dtype=torch.uint8)


class Block(nn.Module):
    def __init__(s, d, h):
        super().__init__()
        s.h = h
        s.ln_1, s.ln_2 = nn.LayerNorm(d), nn.LayerNorm(d)
        s.c_attn, s.c_proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        s.c_fc, s.mlp_proj = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(s, x):
        B, T, C = x.shape
        q, k, v = s.c_attn(s.ln_1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, s.h, C // s.h).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(C // s.h)
        att = att.masked_fill(torch.triu(torch.ones(T, T, dtype=torch.bool), 1), float("-inf")).softmax(-1)
        x = x + s.c_proj((att @ v).transpose(1, 2).reshape(B, T, C))
        return x + s.mlp_proj(F.gelu(s.c_fc(s.ln_2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(s, L, H, d, T):
        super().__init__()
        s.wte, s.wpe = nn.Embedding(256, d), nn.Embedding(T, d)
        s.h = nn.ModuleList(Block(d, H) for _ in range(L))
        s.ln_f = nn.LayerNorm(d)
        for n, p in s.named_parameters():
            if n.endswith("bias"):
                nn.init.zeros_(p)
            elif "ln" in n:
                nn.init.ones_(p)
            else:
                nn.init.normal_(p, 0, 0.02 / math.sqrt(2 * L) if n.endswith(("c_proj.weight", "mlp_proj.weight")) else 0.02)

    def forward(s, idx, tgt):
        x = s.wte(idx) + s.wpe(torch.arange(idx.shape[1]))
        for b in s.h:
            x = b(x)
        logits = s.ln_f(x) @ s.wte.weight.t()
        return F.cross_entropy(logits.reshape(-1, 256), tgt.reshape(-1))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n-layer", type=int, default=4)
    ap.add_argument("--n-head", type=int, default=4)
    ap.add_argument("--d-model", type=int, default=256)
    ap.add_argument("--context", type=int, default=128)
    ap.add_argument("--global-batch", type=int, default=32)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--warmup", type=int, default=100)
    ap.add_argument("--max-steps", type=int, default=0, help="0: one epoch")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--precision", choices=["fp32", "bf16"], default="fp32",
                    help="bf16: torch.autocast on the CPU (oneDNN bf16 matmuls), fp32 master weights")
    ap.add_argument("--powersgd", type=int, default=0, help="rank of PyTorch's PowerSGD hook (0: off)")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    world, rank = int(os.environ.get("WORLD_SIZE", "1")), int(os.environ.get("RANK", "0"))
    if world > 1:
        dist.init_process_group("gloo")
    torch.manual_seed(a.seed)
    T = a.context
    train, val = kjv_splits()
    n_seq, n_val = (len(train) - 1) // T, (len(val) - 1) // T
    steps_per_epoch = n_seq // a.global_batch
    total = a.max_steps or steps_per_epoch
    model = GPT(a.n_layer, a.n_head, a.d_model, T)
    if world > 1:
        model = nn.parallel.DistributedDataParallel(model)
        if a.powersgd:
            from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as psgd
            state = psgd.PowerSGDState(process_group=None, matrix_approximation_rank=a.powersgd,
                                       start_powerSGD_iter=2, min_compression_rate=2, orthogonalization_epsilon=1e-8)
            model.register_comm_hook(state, psgd.powerSGD_hook)
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)
    lr_at = lambda s: a.lr * (s + 1) / a.warmup if s < a.warmup else 1e-4 + (a.lr - 1e-4) * 0.5 * (
        1 + math.cos(math.pi * (s - a.warmup) / max(1, total - a.warmup)))
    micro = a.global_batch // world
    seqs = lambda data, idx: torch.stack([data[i * T: i * T + T + 1] for i in idx.tolist()]).long()
    perm = torch.randperm(n_seq, generator=torch.Generator().manual_seed(a.seed))
    timed_tokens, timed_s = 0, 0.0
    for step in range(total):
        t0 = time.perf_counter()
        b = seqs(train, perm[(step * a.global_batch + rank * micro) % n_seq:][:micro])
        for g in opt.param_groups:
            g["lr"] = lr_at(step)
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.precision == "bf16"):
            loss = model(b[:, :-1], b[:, 1:])
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if step >= 5:
            timed_tokens += a.global_batch * T
            timed_s += time.perf_counter() - t0
        if rank == 0 and (step + 1) % 20 == 0:
            print(f"step {step + 1}/{total} loss {loss.item():.4f}", flush=True)
    model.eval()
    with torch.no_grad():
        lo, hi = n_val * rank // world, n_val * (rank + 1) // world
        tot = torch.tensor([0.0])
        for i in range(lo, hi, 16):
            b = seqs(val, torch.arange(i, min(hi, i + 16)))
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.precision == "bf16"):
                tot += model(b[:, :-1], b[:, 1:]).float().item() * b.shape[0]
        if world > 1:
            dist.all_reduce(tot)
    if rank == 0:
        rate = timed_tokens / timed_s if timed_s else 0.0
        print(f"peer gpt: world {world}, threads {a.threads}, {a.precision}, {rate:.0f} tokens/s (steps timed: {max(total - 5, 0)}), "
              f"val loss {tot.item() / n_val:.4f}", flush=True)
    if world > 1:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
