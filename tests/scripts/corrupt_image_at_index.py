"""A folder of PNG images read with PIL by 2 workers, one of which (image 37) is truncated on disk: index 37 fails
every time, alone or not (`OSError: image file is truncated` / `UnidentifiedImageError`). Only it is bad."""

import os
import sys

import numpy as np
import torch
from PIL import Image
from torch.utils.data import DataLoader, Dataset

N = 120
BAD = 37


class Images(Dataset):
    def __init__(self, root):
        self.paths = [os.path.join(root, f"{i:04d}.png") for i in range(N)]

    def __len__(self):
        return len(self.paths)

    def __getitem__(self, i):
        with Image.open(self.paths[i]) as img:
            return torch.from_numpy(np.asarray(img.convert("RGB"), dtype=np.float32))


if __name__ == "__main__":
    root = sys.argv[1]
    rng = np.random.default_rng(0)
    for i in range(N):
        path = os.path.join(root, f"{i:04d}.png")
        Image.fromarray(rng.integers(0, 255, (32, 32, 3), dtype=np.uint8)).save(path)
        if i == BAD:
            with open(path, "rb") as f:
                data = f.read()
            with open(path, "wb") as f:
                f.write(data[:60])
    total = sum(len(b) for b in DataLoader(Images(root), batch_size=8, num_workers=2))
    print(f"samples {total}")
