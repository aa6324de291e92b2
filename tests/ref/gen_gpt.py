#!/usr/bin/python3
# gen_gpt.py - reference forward/backward of tiny byte-level GPTs from PyTorch (float64, from
# float32 parameters), written to gpt.txt for tests/unit/test_gpt.c (torch is needed only to
# regenerate it). The module's attribute names are cddp's parameter names (nanoGPT's, without
# the "transformer." prefix; the head is tied to wte and has no parameter of its own).
# Run: OMP_NUM_THREADS=1 /usr/bin/python3 tests/ref/gen_gpt.py > tests/ref/gpt.txt
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(4321)


class Attn(nn.Module):
    def __init__(self, C, H):
        super().__init__()
        self.c_attn = nn.Linear(C, 3 * C)
        self.c_proj = nn.Linear(C, C)
        self.H = H

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.H, C // self.H).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(C // self.H))
        mask = torch.tril(torch.ones(T, T, dtype=torch.bool))
        att = F.softmax(att.masked_fill(~mask, float("-inf")), dim=-1)
        return self.c_proj((att @ v).transpose(1, 2).reshape(B, T, C))


class MLP(nn.Module):
    def __init__(self, C):
        super().__init__()
        self.c_fc = nn.Linear(C, 4 * C)
        self.c_proj = nn.Linear(4 * C, C)

    def forward(self, x):
        return self.c_proj(F.gelu(self.c_fc(x), approximate="tanh"))


class Block(nn.Module):
    def __init__(self, C, H):
        super().__init__()
        self.ln_1 = nn.LayerNorm(C)
        self.attn = Attn(C, H)
        self.ln_2 = nn.LayerNorm(C)
        self.mlp = MLP(C)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, L, H, C, ctx, V):
        super().__init__()
        self.wte = nn.Embedding(V, C)
        self.wpe = nn.Embedding(ctx, C)
        self.h = nn.ModuleList([Block(C, H) for _ in range(L)])
        self.ln_f = nn.LayerNorm(C)

    def forward(self, idx):
        T = idx.shape[1]
        x = self.wte(idx) + self.wpe(torch.arange(T))
        for b in self.h:
            x = b(x)
        return self.ln_f(x) @ self.wte.weight.t()  # tied head


def fmt(t):
    return " ".join("%.9g" % v for v in t.detach().flatten().tolist())


def emit(spec, B, T, scale):
    L, H, C, ctx, V = spec
    model = GPT(L, H, C, ctx, V)
    with torch.no_grad():  # float32 values, larger than GPT-2's init so every part matters
        for name, p in model.named_parameters():
            if name.endswith("ln_1.weight") or name.endswith("ln_2.weight") or name == "ln_f.weight":
                p.copy_(1.0 + 0.2 * torch.randn(p.shape))
            elif name.endswith("bias"):
                p.copy_(0.1 * torch.randn(p.shape))
            else:
                p.copy_(0.3 * torch.randn(p.shape))
    tok = torch.randint(0, V, (B, T))
    tgt = torch.randint(0, V, (B, T))
    print("gpt", " ".join(str(v) for v in spec))
    print("batch", B, T, "scale", "%.9g" % scale)
    print("tokens", B * T, " ".join(str(int(v)) for v in tok.flatten()))
    print("targets", B * T, " ".join(str(int(v)) for v in tgt.flatten()))
    for k, v in model.state_dict().items():
        print("param", k, v.dim(), " ".join(str(s) for s in v.shape), v.numel(), fmt(v))
    model = model.double()
    logits = model(tok)
    loss = F.cross_entropy(logits.view(-1, V), tgt.view(-1), reduction="sum")
    (loss * scale).backward()
    print("loss", "%.12g" % loss.item())
    for k, p in model.named_parameters():
        print("grad", k, p.numel(), fmt(p.grad))
    print("end")


emit((2, 2, 16, 8, 256), 3, 8, 1.0 / 24)   # the byte vocabulary, T = context
emit((1, 4, 12, 6, 7), 2, 4, 0.5)          # a small vocabulary, T < context, 4 heads of 3
