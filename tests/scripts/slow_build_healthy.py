"""A healthy loader whose dataset takes 2.5 s to build (a listing, a download, a cache read): the start-up is slow
but paid once per job, and nothing in the loop needs a change. One epoch of 100 batches of float32 features,
2 workers; the step dominates, so the loop waits for data only for the first batch."""

import time

from healthy_loader import FeatureDataset  # the script's folder is first on sys.path, as plain python puts it
from torch.utils.data import DataLoader


class SlowBuildDataset(FeatureDataset):
    def __init__(self, n):
        time.sleep(2.5)  # building the index: the same 2.5 s on a quiet and a busy machine
        super().__init__(n)


if __name__ == "__main__":
    loader = DataLoader(SlowBuildDataset(3200), batch_size=32, shuffle=True, num_workers=2)
    total = 0
    for _x, y in loader:
        total += int(y.sum())
        time.sleep(0.1)  # the training step dominates: the workers have 0.1 s for each batch
    print(f"total {total}")
