"""Lightning Trainer.fit with a clean 16-sample validation set and a 64-sample training set whose record 7 is corrupt.

Lightning iterates the validation loader first (its sanity check), so a scan that stops at the first loader it
meets checks the validation set, not the training set.
"""

import lightning as L
import torch
from torch.utils.data import DataLoader, Dataset

CORRUPT = 7


class Records(Dataset):
    def __init__(self, n, corrupt=None):
        self.n = n
        self.corrupt = corrupt

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        if i == self.corrupt:
            raise ValueError(f"corrupt record {i}")
        return torch.full((4,), float(i)), torch.tensor(float(i % 2))


class Tiny(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)

    def training_step(self, batch, _):
        x, y = batch
        return torch.nn.functional.mse_loss(self.layer(x).squeeze(1), y)

    def validation_step(self, batch, _):
        x, y = batch
        self.log("val_loss", torch.nn.functional.mse_loss(self.layer(x).squeeze(1), y))

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)

    def train_dataloader(self):
        return DataLoader(Records(64, CORRUPT), batch_size=8, num_workers=1)

    def val_dataloader(self):
        return DataLoader(Records(16), batch_size=8, num_workers=1)


if __name__ == "__main__":
    trainer = L.Trainer(
        max_epochs=1, limit_train_batches=4, accelerator="cpu", enable_progress_bar=False, logger=False,
        enable_checkpointing=False, enable_model_summary=False,
    )  # fmt: skip
    trainer.fit(Tiny())
