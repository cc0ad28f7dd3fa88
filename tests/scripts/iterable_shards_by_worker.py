"""An IterableDataset that splits its shard files by worker: worker k reads shards k, k+n, ... (get_worker_info()).

Args: [shards] [num_workers]. With fewer shards than workers, the extra workers read nothing.
"""

import sys
import tempfile
import time
from pathlib import Path

import torch
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

LINES_PER_SHARD = 64


class ShardedLines(IterableDataset):
    def __init__(self, shard_files):
        self.shard_files = shard_files

    def __iter__(self):
        info = get_worker_info()
        worker, workers = (info.id, info.num_workers) if info is not None else (0, 1)
        for path in self.shard_files[worker::workers]:
            with open(path) as f:
                for line in f:
                    time.sleep(0.002)  # a read from a slow store
                    yield torch.tensor([int(line)])


if __name__ == "__main__":
    shards = int(sys.argv[1]) if len(sys.argv) > 1 else 2
    num_workers = int(sys.argv[2]) if len(sys.argv) > 2 else 4
    with tempfile.TemporaryDirectory() as tmp:
        files = []
        for s in range(shards):
            path = Path(tmp) / f"shard-{s:04d}.txt"
            path.write_text("".join(f"{s * LINES_PER_SHARD + i}\n" for i in range(LINES_PER_SHARD)))
            files.append(str(path))
        loader = DataLoader(ShardedLines(files), batch_size=8, num_workers=num_workers)
        seen = sum(len(batch) for batch in loader)
    print(f"read {seen} samples from {shards} shards with {num_workers} workers")
