"""An ImageFolder-like dataset over the PNG files in argv[1] (`samples` holds (path, label) pairs)."""

import sys
from pathlib import Path

import numpy as np
import torch
from PIL import Image
from torch.utils.data import DataLoader, Dataset


class PngFolder(Dataset):
    def __init__(self, root):
        self.samples = [(str(path), 0) for path in sorted(Path(root).glob("*.png"))]

    def __len__(self):
        return len(self.samples)

    def __getitem__(self, i):
        path, label = self.samples[i]
        with Image.open(path) as image:
            pixels = np.asarray(image.convert("RGB"), dtype=np.float32) / 255.0
        return torch.from_numpy(pixels).permute(2, 0, 1), label


if __name__ == "__main__":
    loader = DataLoader(PngFolder(sys.argv[1]), batch_size=4, num_workers=2)
    for _images, _labels in loader:
        pass
