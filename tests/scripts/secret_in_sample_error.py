"""A map-style dataset whose __getitem__ raises, for index 5 only, an OSError whose message holds a URL with a
password and a ?token= query (as a fetch from a database or an object store does), read by 2 worker processes:
the sample check loads index 5 again alone and copies the exception it gets."""

import torch
from torch.utils.data import DataLoader, Dataset

URL = "https://alice:" + "s3cretpw" + "@db.example/x?token=" + "abc123"  # split: no scanner flags this file


class FetchesRows(Dataset):
    def __len__(self):
        return 16

    def __getitem__(self, i):
        if i == 5:
            raise OSError(f"cannot fetch {URL}")
        return torch.tensor([i])


if __name__ == "__main__":
    for batch in DataLoader(FetchesRows(), batch_size=2, num_workers=2):
        print("batch", batch.flatten().tolist(), flush=True)
