"""A dataset that opens its shard's tar archive (tarfile.open) for every sample and never closes it: the open-file
count of each of 2 workers climbs until `OSError: [Errno 24] Too many open files` (limit 128, set in worker_init_fn)
at whatever index it is on. Every sample loads alone."""

import io
import os
import resource
import sys
import tarfile

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

SHARDS = 32
PER_SHARD = 100


class TarShards(Dataset):
    def __init__(self, root):
        self.root = root
        self.kept = []

    def __len__(self):
        return SHARDS * PER_SHARD

    def __getitem__(self, i):
        archive = tarfile.open(os.path.join(self.root, f"shard-{i % SHARDS:03d}.tar"))  # noqa: SIM115 - the leak
        self.kept.append(archive)  # never closed
        member = archive.extractfile(f"{i // SHARDS:04d}.npy")
        return torch.from_numpy(np.load(io.BytesIO(member.read())))


def low_limit(worker_id):
    resource.setrlimit(resource.RLIMIT_NOFILE, (128, 128))


if __name__ == "__main__":
    root = sys.argv[1]
    for s in range(SHARDS):
        with tarfile.open(os.path.join(root, f"shard-{s:03d}.tar"), "w") as tar:
            for k in range(PER_SHARD):
                buf = io.BytesIO()
                np.save(buf, np.full(16, s * PER_SHARD + k, dtype=np.float32))
                info = tarfile.TarInfo(f"{k:04d}.npy")
                info.size = buf.tell()
                buf.seek(0)
                tar.addfile(info, buf)
    loader = DataLoader(TarShards(root), batch_size=8, num_workers=2, worker_init_fn=low_limit)
    total = 0
    for batch in loader:
        total += len(batch)
    print(f"samples {total}")
