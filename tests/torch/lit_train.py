# lit_train.py - the smallest Lightning job: Trainer(accelerator="cpu", devices=N, num_nodes=M,
# strategy="ddp") under whatever launched it (cddp run, torchrun, srun). A tiny linear model on
# seeded random data, a checkpoint after every step (last.ckpt) and a resume from it when it is
# there. Each rank prints one line the tests read:
#   lightning ok rank R of W steps A-B resumed=0|1 launcher=<Lightning's cluster environment>
# Options: --devices N --nodes M --steps S --dir DIR [--die-at STEP] (rank 1 SIGKILLs itself at
# that step in its first attempt, TORCHELASTIC_RESTART_COUNT=0). Used by tests/sh/test_lightning.sh.
import argparse
import os
import signal

import torch
import lightning as L
from lightning.pytorch.callbacks import Callback, ModelCheckpoint


class Tiny(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(8, 1)

    def training_step(self, batch, _):
        x, y = batch
        return torch.nn.functional.mse_loss(self.layer(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


class DieAt(Callback):
    """Rank 1 kills itself at step `at` of the first attempt: the launcher must restart the job."""

    def __init__(self, at):
        self.at = at

    def on_train_batch_end(self, trainer, *_):
        first = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") == "0"
        if first and trainer.global_rank == 1 and trainer.global_step == self.at:
            os.kill(os.getpid(), signal.SIGKILL)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--devices", type=int, default=1)
    p.add_argument("--nodes", type=int, default=1)
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--dir", required=True)
    p.add_argument("--die-at", type=int, default=0)
    a = p.parse_args()
    torch.manual_seed(0)
    data = torch.utils.data.TensorDataset(torch.randn(256, 8), torch.randn(256, 1))
    loader = torch.utils.data.DataLoader(data, batch_size=8)
    ckpt = ModelCheckpoint(dirpath=a.dir, save_last=True, every_n_train_steps=1)
    callbacks = [ckpt] + ([DieAt(a.die_at)] if a.die_at else [])
    trainer = L.Trainer(accelerator="cpu", devices=a.devices, num_nodes=a.nodes, strategy="ddp", max_steps=a.steps,
                        callbacks=callbacks, logger=False, enable_progress_bar=False, enable_model_summary=False)
    last = os.path.join(a.dir, "last.ckpt")
    resumed = os.path.exists(last)
    start = torch.load(last, map_location="cpu", weights_only=False)["global_step"] if resumed else 0
    trainer.fit(Tiny(), loader, ckpt_path=last if resumed else None)
    env = type(trainer.strategy.cluster_environment).__name__
    print(f"lightning ok rank {trainer.global_rank} of {trainer.world_size} steps {start + 1}-{trainer.global_step} "
          f"resumed={int(resumed)} launcher={env}", flush=True)


if __name__ == "__main__":
    main()
