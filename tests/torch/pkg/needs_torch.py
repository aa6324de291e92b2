# pkg/needs_torch.py - a module that imports torch, run as `cddp run -m pkg.needs_torch`: under an
# interpreter without torch the launcher must refuse it before any start.
import torch

print(f"needs_torch ok {torch.__version__}", flush=True)
