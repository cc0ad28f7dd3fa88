"""Lightning Trainer.fit with strategy="ddp" on 2 CPU processes: Lightning re-launches this script for rank 1
(`sys.executable sys.argv` with LOCAL_RANK set), and rank 0 learns its rank only when the process group is up.

Each rank reads its half through Lightning's DistributedSampler with one forked worker; prints one line per rank.
--raise-on-rank N makes rank N raise in its third training step (Lightning then kills the other rank and re-raises).
"""

import os
import sys

import lightning as L
import torch
from torch.utils.data import DataLoader, TensorDataset


class Tiny(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)

    def training_step(self, batch, _):
        (x,) = batch
        if "--raise-on-rank" in sys.argv and self.global_rank == int(sys.argv[-1]) and self.global_step == 2:
            raise ValueError(f"loss is nan on rank {self.global_rank}")
        return self.layer(x).pow(2).mean()

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)

    def train_dataloader(self):
        return DataLoader(TensorDataset(torch.randn(64, 4)), batch_size=8, num_workers=1)


if __name__ == "__main__":
    trainer = L.Trainer(
        max_epochs=1, accelerator="cpu", devices=2, strategy="ddp", enable_progress_bar=False, logger=False,
        enable_checkpointing=False, enable_model_summary=False, default_root_dir=os.getcwd(),
    )  # fmt: skip
    trainer.fit(Tiny())
    print(f"rank {trainer.global_rank} of {trainer.world_size} done, steps {trainer.global_step}", flush=True)
