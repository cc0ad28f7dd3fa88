"""An HF streaming dataset (to_iterable_dataset().with_format("torch")) read by 4 workers (issue 21)."""

import time

from datasets import Dataset
from torch.utils.data import DataLoader

if __name__ == "__main__":
    rows = Dataset.from_dict({"x": [[float(i)] * 8 for i in range(512)], "y": list(range(512))})
    stream = rows.to_iterable_dataset(num_shards=4).with_format("torch")
    loader = DataLoader(stream, batch_size=16, num_workers=4)
    n = 0
    for _batch in loader:
        time.sleep(0.02)
        n += 1
    print("batches", n)
