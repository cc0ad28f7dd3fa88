"""Three epochs of a small map-style dataset with 2 workers that are started anew each epoch."""

import torch
from torch.utils.data import DataLoader, TensorDataset

loader = DataLoader(TensorDataset(torch.arange(64.0)), batch_size=8, num_workers=2)
for _epoch in range(3):
    for (_x,) in loader:
        pass
print("done")
