"""A `path label` index file read by 2 workers: a naive IterableDataset, or dlprobe.fixes.ShardedLineStream.

Args: naive|sharded. Prints how many samples the loop saw and how many were distinct.
"""

import os
import sys
import tempfile

from torch.utils.data import DataLoader, IterableDataset

from dlprobe.fixes import ShardedLineStream


class NaiveIndex(IterableDataset):
    def __init__(self, path):
        self.path = path

    def __iter__(self):
        with open(self.path) as f:
            for line in f:
                path, label = line.split()
                yield path, int(label)


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as tmp:
        index = os.path.join(tmp, "train.txt")
        with open(index, "w") as f:
            f.writelines(f"images/{i:05d}.jpg {i % 10}\n" for i in range(600))
        dataset = ShardedLineStream(index, block_bytes=1024) if sys.argv[1] == "sharded" else NaiveIndex(index)
        loader = DataLoader(dataset, batch_size=20, num_workers=2)
        seen = [p for paths, _ in loader for p in paths]
        print(f"samples {len(seen)} unique {len(set(seen))}")
