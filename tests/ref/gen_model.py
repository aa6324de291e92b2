#!/usr/bin/python3
# gen_model.py - reference forward/backward of two tiny models (an MLP and a CNN) from PyTorch,
# written to model.txt for tests/unit/test_model.c (torch is needed only to regenerate it).
# Run: OMP_NUM_THREADS=1 /usr/bin/python3 tests/ref/gen_model.py > tests/ref/model.txt
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(1234)
torch.set_default_dtype(torch.float32)


class MLP(nn.Module):
    def __init__(self, d_in, hidden, n_classes):
        super().__init__()
        widths = [d_in] + hidden + [n_classes]
        for i in range(len(widths) - 1):
            setattr(self, f"fc{i}", nn.Linear(widths[i], widths[i + 1]))
        self.n = len(widths) - 1

    def forward(self, x):
        x = x.flatten(1)
        for i in range(self.n):
            x = getattr(self, f"fc{i}")(x)
            if i < self.n - 1:
                x = F.relu(x)
        return x


class CNN(nn.Module):
    def __init__(self, c_in, h, w, convs, kernel, hidden, n_classes):
        super().__init__()
        c = c_in
        for i, co in enumerate(convs):
            setattr(self, f"conv{i}", nn.Conv2d(c, co, kernel, padding=kernel // 2))
            c, h, w = co, h // 2, w // 2
        self.n_conv = len(convs)
        self.mlp = MLP(c * h * w, hidden, n_classes)

    def forward(self, x):
        for i in range(self.n_conv):
            x = F.max_pool2d(F.relu(getattr(self, f"conv{i}")(x)), 2)
        return self.mlp(x)


def fmt(t):
    return " ".join("%.9g" % v for v in t.detach().flatten().tolist())


def emit(kind, model, spec, x, y, scale):
    # spec: in_c in_h in_w n_classes n_hidden hidden... n_conv convs... kernel
    print("model", kind)
    print("spec", " ".join(str(v) for v in spec))
    print("batch", x.shape[0])
    print("scale", "%.9g" % scale)
    print("x", x.numel(), fmt(x))
    print("y", y.numel(), " ".join(str(int(v)) for v in y))
    sd = model.state_dict()
    # the MLP head of the CNN is nested; its names drop the "mlp." prefix (cddp's names)
    names = {k: k.replace("mlp.", "") for k in sd}
    for k, v in sd.items():
        print("param", names[k], v.dim(), " ".join(str(s) for s in v.shape), v.numel(), fmt(v))
    logits = model(x)
    loss = F.cross_entropy(logits, y.long(), reduction="sum")
    correct = int((logits.argmax(1) == y.long()).sum())
    (loss * scale).backward()
    print("loss", "%.9g" % loss.item())
    print("correct", correct)
    for k, p in model.named_parameters():
        print("grad", names[k], p.numel(), fmt(p.grad))
    print("end")


mlp = MLP(2 * 3 * 4, [7, 6], 5)
x = torch.rand(4, 2, 3, 4)
y = torch.randint(0, 5, (4,), dtype=torch.uint8)
emit("mlp", mlp, [2, 3, 4, 5, 2, 7, 6, 0, 3], x, y, 0.25)

cnn = CNN(2, 9, 8, [3, 4], 3, [6], 4)
x = torch.rand(3, 2, 9, 8) * 2 - 0.5
y = torch.randint(0, 4, (3,), dtype=torch.uint8)
emit("cnn", cnn, [2, 9, 8, 4, 1, 6, 2, 3, 4, 3], x, y, 1.0 / 3)

cnn5 = CNN(1, 7, 7, [2], 5, [], 3)
x = torch.rand(2, 1, 7, 7)
y = torch.tensor([0, 2], dtype=torch.uint8)
emit("cnn", cnn5, [1, 7, 7, 3, 0, 1, 2, 5], x, y, 1.0)
