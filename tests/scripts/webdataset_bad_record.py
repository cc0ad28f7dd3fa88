"""A webdataset pipeline over 4 tar shards (2 workers: webdataset gives worker k the shards k, k+2) whose shard 2
holds one member that is not a .npy at record 17: its decode in `.map` raises every run. Worker 0 reads shard 0 (50
records) then shard 2, so the bad record is position 67 of worker 0's stream."""

import io
import os
import sys
import tarfile

import numpy as np
import torch
import webdataset as wds
from torch.utils.data import DataLoader


def decode(sample):
    return torch.from_numpy(np.load(io.BytesIO(sample["npy"])))


if __name__ == "__main__":
    root = sys.argv[1]
    urls = []
    for s in range(4):
        path = os.path.join(root, f"shard-{s}.tar")
        urls.append(path)
        with tarfile.open(path, "w") as tar:
            for k in range(50):
                buf = io.BytesIO()
                if s == 2 and k == 17:
                    buf.write(b"not an npy")
                else:
                    np.save(buf, np.full(8, s * 100 + k, dtype=np.float32))
                info = tarfile.TarInfo(f"{s:02d}{k:04d}.npy")
                info.size = buf.tell()
                buf.seek(0)
                tar.addfile(info, buf)
    loader = DataLoader(wds.WebDataset(urls, shardshuffle=False, empty_check=False).map(decode), batch_size=8,
                        num_workers=2)  # fmt: skip
    print(f"samples {sum(len(b) for b in loader)}")
