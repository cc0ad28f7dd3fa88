"""Copy-on-access through a pandas DataFrame: string (object) columns read row by row with .iloc by 2 forked workers.

`fixed` turns the string columns into Arrow-backed ones (`astype("string[pyarrow]")`): the strings live in Arrow
buffers, not Python objects, so reading a row writes no reference count in the parent's pages."""

import sys
import time

import numpy as np
import pandas as pd
import torch
from torch.utils.data import DataLoader, Dataset


class FrameDataset(Dataset):
    def __init__(self, n, fixed):
        frame = pd.DataFrame(
            {
                "path": [f"/data/images/train/img_{i:09d}.jpg" for i in range(n)],
                "caption": [f"a photo of object {i % 977} on a table, take {i}" for i in range(n)],
                "label": np.arange(n) % 100,
            }
        )
        for col in ("path", "caption"):  # object columns, as pandas before 3.0 makes them by default
            frame[col] = frame[col].astype("string[pyarrow]" if fixed else object)
        self.frame = frame

    def __len__(self):
        return len(self.frame)

    def __getitem__(self, i):
        row = self.frame.iloc[i]
        return torch.tensor([len(row["path"]) + len(row["caption"])]), int(row["label"])


if __name__ == "__main__":
    fixed = "fixed" in sys.argv[1:]
    n = 200_000
    loader = DataLoader(FrameDataset(n, fixed), batch_size=400, shuffle=True, num_workers=2)
    checksum = 0
    for _x, y in loader:
        checksum += int(y.sum())
        time.sleep(0.002)
    print(f"checksum {checksum}")
