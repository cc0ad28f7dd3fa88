"""A first script: records read by 4 forked workers, shuffled, one epoch. Args: [N] [MODE], MODE one of
dicts (the default), path, numpy, packed, dict, mapping.

`dicts` reads one field (reading a record writes its reference count, so each worker copies the pages of the dict
objects: all of them, as shuffled indices land on every page);
`path` reads the path string too; `numpy` holds the same data in numpy arrays and `packed` in
dlprobe.fixes.PackedRecords: neither copies anything. `dict` holds COCO-style annotations, {image id: [path, label,
weight]}, looked up through a list[int] of the ids; `mapping` holds them as cow-growth's fix says (PackedMapping, and
the ids in a numpy array).
"""

import sys
import time

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset


class RecordsDataset(Dataset):
    def __init__(self, n, mode):
        self.mode = mode
        if mode == "numpy":
            self.paths = np.array([f"/data/img_{i:09d}.jpg" for i in range(n)], dtype="S")
            self.labels = np.arange(n, dtype=np.int64) % 100
            return
        if mode in ("dict", "mapping"):
            self.ids = [7 * i + 1_000_003 for i in range(n)]
            self.annotations = {k: [f"/data/img_{k:09d}.jpg", k % 100, 1.0] for k in self.ids}
            if mode == "mapping":
                from dlprobe.fixes import PackedMapping

                self.annotations = PackedMapping(self.annotations)
                self.ids = np.asarray(self.ids)
            return
        self.records = [{"path": f"/data/img_{i:09d}.jpg", "label": i % 100, "w": 1.0} for i in range(n)]
        if mode == "packed":
            from dlprobe.fixes import PackedRecords

            self.records = PackedRecords(self.records)

    def __len__(self):
        if self.mode in ("dict", "mapping"):
            return len(self.ids)
        return len(self.labels) if self.mode == "numpy" else len(self.records)

    def __getitem__(self, i):
        if self.mode in ("dict", "mapping"):
            path, label, _w = self.annotations[self.ids[i]]
            return torch.tensor(len(path)), label
        if self.mode == "numpy":
            return torch.tensor(len(self.paths[i])), int(self.labels[i])
        rec = self.records[i]
        if self.mode == "dicts":
            return rec["label"]
        return torch.tensor(len(rec["path"])), rec["label"]


if __name__ == "__main__":
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_000
    mode = sys.argv[2] if len(sys.argv) > 2 else "dicts"
    loader = DataLoader(RecordsDataset(n, mode), batch_size=1000, shuffle=True, num_workers=4)
    checksum = 0
    for batch in loader:
        y = batch if mode == "dicts" else batch[1]
        checksum += int(y.sum())
        time.sleep(0.004)  # a training step, so the epoch lasts long enough to watch
    print(f"checksum {checksum}")
