"""A 64-sample dataset with one planted bad sample of each kind (see PLANTED), for `dlprobe scan`.

argv: [--train-excluding FILE] trains one epoch on the dataset without the indices in FILE (dlprobe.exclude).
"""

import ctypes
import os
import sys

import torch
from torch.utils.data import DataLoader, Dataset

PLANTED = {
    5: "shape",
    11: "none",
    17: "nan",
    23: "exception",
    29: "crash",
    37: "timeout",
    41: "dtype",
    50: "nan",  # an Inf
}


class PlantedDataset(Dataset):
    def __len__(self):
        return 64

    def __getitem__(self, i):
        image = torch.full((3, 8, 8), float(i))
        kind = PLANTED.get(i)
        if kind == "shape":
            image = torch.zeros(3, 8, 7)
        elif kind == "none":
            return None
        elif kind == "nan":
            image[1, 2, 3] = float("nan") if i == 17 else float("inf")
        elif kind == "exception":
            raise ValueError(f"corrupt record {i}")
        elif kind == "crash":
            ctypes.string_at(0)
        elif kind == "timeout":
            read_end, _write_end = os.pipe()
            os.read(read_end, 1)
        elif kind == "dtype":
            image = image.double()
        return image, i % 4


if __name__ == "__main__":
    dataset = PlantedDataset()
    if len(sys.argv) > 2 and sys.argv[1] == "--train-excluding":
        from dlprobe.exclude import ExcludeIndices, load_excluded

        dataset = ExcludeIndices(dataset, load_excluded(sys.argv[2]))
    loader = DataLoader(dataset, batch_size=8, shuffle=True, num_workers=2)
    model = torch.nn.Linear(3 * 8 * 8, 4)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    seen = 0
    for images, labels in loader:
        loss = torch.nn.functional.cross_entropy(model(images.flatten(1)), labels)
        assert torch.isfinite(loss), "loss is not finite"
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        seen += len(labels)
    print(f"trained on {seen} samples")
