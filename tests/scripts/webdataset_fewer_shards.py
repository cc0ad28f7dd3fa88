"""A WebDataset of 2 tar shards read by 4 workers: two workers get no shard and webdataset raises (issue 21)."""

import io
import sys
import tarfile
from pathlib import Path

import webdataset as wds
from torch.utils.data import DataLoader


def write_shard(path: Path, first: int, count: int) -> None:
    with tarfile.open(path, "w") as tar:
        for i in range(first, first + count):
            data = str(i).encode()
            info = tarfile.TarInfo(f"{i:06d}.cls")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


if __name__ == "__main__":
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    for shard in range(2):
        write_shard(out / f"shard-{shard}.tar", shard * 16, 16)
    dataset = wds.WebDataset(str(out / "shard-{0..1}.tar"), shardshuffle=False).decode().to_tuple("cls")
    for _batch in DataLoader(dataset, batch_size=4, num_workers=4):
        pass
