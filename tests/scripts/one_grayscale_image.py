"""Images decoded with Pillow, one of them grayscale among RGB ones (a real report: inside a worker torch says only
"Trying to resize storage that is not resizable"). `rgb` converts every image to RGB: the fixed twin.

    one_grayscale_image.py DIR [rgb]
"""

import os
import sys

import numpy as np
import torch
from PIL import Image
from torch.utils.data import DataLoader, Dataset

GRAY = 13


class Images(Dataset):
    def __init__(self, folder: str, convert: bool) -> None:
        self.paths = []
        for i in range(32):
            path = os.path.join(folder, f"{i:03d}.png")
            mode = "L" if i == GRAY else "RGB"
            Image.new(mode, (16, 16), color=i if mode == "L" else (i, i, i)).save(path)
            self.paths.append(path)
        self.convert = convert

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        image = Image.open(self.paths[index])
        if self.convert:
            image = image.convert("RGB")
        pixels = np.asarray(image, dtype=np.float32) / 255.0
        if pixels.ndim == 2:
            pixels = pixels[:, :, None]
        return torch.from_numpy(pixels).permute(2, 0, 1).contiguous(), index % 2


if __name__ == "__main__":
    loader = DataLoader(Images(sys.argv[1], "rgb" in sys.argv[2:]), batch_size=8, num_workers=2)
    total = 0.0
    for images, _labels in loader:
        total += float(images.sum())
    print(f"total {total:.1f}")
