"""Trains epoch after epoch on a small loader and never stops by itself (for time limits)."""

import itertools
import time

import torch
from torch.utils.data import DataLoader, TensorDataset

if __name__ == "__main__":
    loader = DataLoader(TensorDataset(torch.arange(64)), batch_size=8, num_workers=2, persistent_workers=True)
    for epoch in itertools.count():
        for _batch in loader:
            time.sleep(0.01)
        print(f"epoch {epoch} done", flush=True)
