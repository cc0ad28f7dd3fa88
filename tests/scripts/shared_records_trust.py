"""The README's shared records, `PackedRecords(load_records, share="train-records-v1")`, read by a real DataLoader
with 2 workers. argv: the start method (fork or spawn), then "plain", or "swap DIR": once the records are packed,
the entry's files in $DLPROBE_CACHE_DIR are replaced by those in DIR (another user's, planted) before the
workers start."""

import os
import sys
from pathlib import Path

import torch
from torch.utils.data import DataLoader, Dataset

from dlprobe.fixes import PackedRecords

packed_here = []


def load_records():
    packed_here.append(True)  # only the process that packs the shared copy calls this
    return [{"path": f"/data/{i}.jpg", "label": i % 10} for i in range(1000)]


class RecordsDataset(Dataset):
    def __init__(self):
        self.records = PackedRecords(load_records, share="train-records-v1")

    def __len__(self):
        return len(self.records)

    def __getitem__(self, i):
        record = self.records[i]
        return torch.tensor([record["label"], int(record["path"][6:-4])])


if __name__ == "__main__":
    method, mode = sys.argv[1], sys.argv[2]
    dataset = RecordsDataset()
    if mode == "swap":
        cache = Path(os.environ["DLPROBE_CACHE_DIR"])
        for planted in Path(sys.argv[3]).iterdir():
            os.replace(planted, cache / planted.name)
    loader = DataLoader(dataset, batch_size=100, num_workers=2, multiprocessing_context=method)
    labels = indices = 0
    for batch in loader:
        labels += int(batch[:, 0].sum())
        indices += int(batch[:, 1].sum())
    print(f"{method} packed={bool(packed_here)} labels={labels} indices={indices}", flush=True)
