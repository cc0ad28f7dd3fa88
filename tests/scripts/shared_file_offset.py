"""One unbuffered file opened in Dataset.__init__, read with seek() then read() by 4 forked workers: the workers share
the descriptor's offset, so one worker's seek moves another's read and records come back from the wrong place.
Each record holds its own index; a mismatch raises at whatever index the race hit (a different one each run),
although every record is intact and loads alone."""

import os
import struct
import sys

import torch
from torch.utils.data import DataLoader, Dataset

N, RECORD = 6000, 4096


def write_records(path):
    with open(path, "wb") as f:
        for i in range(N):
            f.write(struct.pack("<4sq", b"REC0", i).ljust(RECORD, b"\0"))


class Records(Dataset):
    def __init__(self, path):
        self.f = open(path, "rb", buffering=0)  # noqa: SIM115 - one descriptor, one offset, inherited by every worker

    def __len__(self):
        return N

    def __getitem__(self, i):
        self.f.seek(i * RECORD)
        raw = self.f.read(RECORD)
        magic, stored = struct.unpack_from("<4sq", raw)
        if magic != b"REC0" or stored != i:
            raise ValueError(f"record {i} is corrupt: its header says {stored}")
        return torch.tensor([stored])


if __name__ == "__main__":
    path = os.path.join(sys.argv[1], "records.bin")
    write_records(path)
    loader = DataLoader(Records(path), batch_size=32, num_workers=4, shuffle=True)
    for _epoch in range(20):
        for _batch in loader:
            pass
