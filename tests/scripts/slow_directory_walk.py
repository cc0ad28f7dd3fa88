"""A dataset constructor walks a directory of images on (emulated) network storage. Args: DIR [file-index|getsize].

With `file-index` the dataset is dlprobe.fixes.FileIndexDataset (cached next to DIR) instead of the walk; with
`getsize` it is WalkedFolder, whose constructor checks every file's size (os.path.getsize: one stat each).

Every directory entry costs 1 ms to list (with `getsize`: every stat, and listing is fast), as a metadata round
trip does on NFS or a parallel file system; the emulation wraps os.scandir, which os.walk uses (os.stat, which
os.path.getsize uses).
"""

import os
import sys
import time

import torch
from torch.utils.data import DataLoader, Dataset

IMAGE_EXTENSIONS = (".jpg", ".png")
_local_scandir = os.scandir
listed = 0  # directory entries read through the emulated network storage


class NetworkScandir:
    def __init__(self, path):
        self.inner = _local_scandir(path)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.inner.close()

    def __iter__(self):
        return self

    def __next__(self):
        global listed
        entry = next(self.inner)
        listed += 1
        time.sleep(0.001)
        return entry


_local_stat = os.stat


def network_stat(path, *args, **kwargs):
    time.sleep(0.001)
    return _local_stat(path, *args, **kwargs)


if sys.argv[2:] == ["getsize"]:
    os.stat = network_stat
else:
    os.scandir = NetworkScandir


def index_image_files(root):
    samples = []
    for directory, _, files in os.walk(root):
        for name in sorted(files):
            if name.endswith(IMAGE_EXTENSIONS):
                samples.append((os.path.join(directory, name), len(samples) % 10))
    return samples


class FolderDataset(Dataset):
    def __init__(self, root):
        self.samples = index_image_files(root)

    def __len__(self):
        return len(self.samples)

    def __getitem__(self, i):
        return torch.zeros(4), self.samples[i][1]


class WalkedFolder(Dataset):
    def __init__(self, root):
        self.samples = []
        for directory, _, files in os.walk(root):
            for name in sorted(files):
                path = os.path.join(directory, name)
                if os.path.getsize(path) >= 0:  # skip nothing, as a check for empty files would
                    self.samples.append((path, len(self.samples) % 10))

    def __len__(self):
        return len(self.samples)

    def __getitem__(self, i):
        return torch.zeros(4), self.samples[i][1]


def zeros(path):
    return torch.zeros(4)


if __name__ == "__main__":
    if sys.argv[2:] == ["file-index"]:
        from dlprobe.fixes import FileIndexDataset

        cache_dir = os.path.join(os.path.dirname(os.path.abspath(sys.argv[1])), "index-cache")
        dataset = FileIndexDataset(sys.argv[1], loader=zeros, cache_dir=cache_dir)
    elif sys.argv[2:] == ["getsize"]:
        dataset = WalkedFolder(sys.argv[1])
    else:
        dataset = FolderDataset(sys.argv[1])
    loader = DataLoader(dataset, batch_size=64, num_workers=0)
    print(f"batches {sum(1 for _ in loader)}")
    if sys.argv[2:] == ["file-index"]:
        print(f"listed {listed} entries")
