"""A training whose dataset acts on the world, to check that dlprobe's own checks (the sample check, which loads a
failing sample again, and the start-readiness copy, which pickles the dataset) never do it again behind its back.

    acts_on_the_world.py append LOG      __getitem__ appends its index to LOG; index 9 raises ValueError
    acts_on_the_world.py http URL        __getitem__ GETs URL?i=INDEX; index 9 raises ValueError
    acts_on_the_world.py atfork          an at-fork handler prints in every child; index 9 raises ValueError
    acts_on_the_world.py sigchld         a SIGCHLD handler counts; prints the count at the first batch
    acts_on_the_world.py libreduce DIR   the dataset holds an object of an installed library (DIR/site-packages)
                                         whose __reduce__ writes DIR/reduced.txt; nothing fails
"""

from __future__ import annotations

import os
import signal
import sys
import urllib.request

import torch
from torch.utils.data import DataLoader, Dataset

BAD = 9


class Acts(Dataset):
    def __init__(self, mode: str, arg: str | None) -> None:
        self.mode, self.arg = mode, arg
        self.thing = None
        if mode == "libreduce":
            sys.path.insert(0, os.path.join(str(arg), "site-packages"))
            import fakelib

            self.thing = fakelib.Thing(os.path.join(str(arg), "reduced.txt"))

    def __len__(self) -> int:
        return 16

    def __getitem__(self, index: int) -> torch.Tensor:
        if self.mode == "append":
            with open(str(self.arg), "a") as log:
                log.write(f"{index}\n")
        elif self.mode == "http":
            with urllib.request.urlopen(f"{self.arg}?i={index}", timeout=5) as reply:
                reply.read()
        if index == BAD and self.mode in ("append", "http", "atfork"):
            raise ValueError(f"record {index} is corrupt")
        return torch.full((4,), float(index))


def main() -> None:
    mode = sys.argv[1]
    arg = sys.argv[2] if len(sys.argv) > 2 else None
    counted = [0]
    if mode == "atfork":
        os.register_at_fork(after_in_child=lambda: print("at-fork handler ran in a child", flush=True))
    if mode == "sigchld":
        signal.signal(signal.SIGCHLD, lambda *_: counted.__setitem__(0, counted[0] + 1))
    loader = DataLoader(Acts(mode, arg), batch_size=4, num_workers=2)
    total = 0.0
    for n, batch in enumerate(loader):
        if n == 0 and mode == "sigchld":
            print(f"SIGCHLD seen at the first batch: {counted[0]}", flush=True)
        total += float(batch.sum())
    print("done", total, flush=True)


if __name__ == "__main__":
    main()
