"""Lightning Trainer.fit for 2 epochs on CPU with train and validation loaders of 2 forked workers each, and the
progress bar on (so its refresh thread is alive when the workers fork); argv[1] is default_root_dir.

Each sample costs a few milliseconds of pure Python in `slow_feature`, so the loop waits for data and dlprobe's
py-spy sampling has worker stacks to attribute (the top function should be `slow_feature`, never Lightning's
CombinedLoader frame the workers inherited at fork).

Prints one line per finished epoch and the final loss, so a run under dlprobe can be compared with plain python.
"""

import sys

import lightning as L
import torch
from torch.utils.data import DataLoader, Dataset


def slow_feature(i):
    total = 0
    for j in range(30_000):
        total += (i * j) % 7
    return total / 30_000


class Points(Dataset):
    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        x = torch.full((8,), slow_feature(i))
        return x, x.sum()


class Tiny(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(8, 1)

    def training_step(self, batch, _):
        x, y = batch
        return torch.nn.functional.mse_loss(self.layer(x).squeeze(1), y)

    def validation_step(self, batch, _):
        x, y = batch
        self.log("val_loss", torch.nn.functional.mse_loss(self.layer(x).squeeze(1), y))

    def on_train_epoch_end(self):
        print(f"epoch {self.current_epoch} done")

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)

    def train_dataloader(self):
        return DataLoader(Points(512), batch_size=16, num_workers=2)

    def val_dataloader(self):
        return DataLoader(Points(64), batch_size=16, num_workers=2)


if __name__ == "__main__":
    torch.manual_seed(0)
    trainer = L.Trainer(
        max_epochs=2, limit_train_batches=16, accelerator="cpu", devices=1, enable_progress_bar=True,
        logger=False, enable_checkpointing=False, enable_model_summary=False, default_root_dir=sys.argv[1],
    )  # fmt: skip
    trainer.fit(Tiny())
    print(f"fit finished: epochs {trainer.current_epoch} global_step {trainer.global_step}")
