"""A dataset that fetches whole batches through __getitems__, and one row (index 11) that raises, chosen by argv[1]:

plain  a torch Dataset defining __getitems__
hf     a HuggingFace datasets.Dataset whose transform raises on that row
argv[2] (optional): num_workers (default 2).
"""

import sys

import torch
from torch.utils.data import DataLoader, Dataset

BAD_INDEX = 11


class RowsInBatches(Dataset):
    def __len__(self):
        return 32

    def __getitem__(self, i):
        return self.__getitems__([i])[0]

    def __getitems__(self, indices):
        rows = []
        for i in indices:
            if i == BAD_INDEX:
                raise ValueError(f"unparsable row {i}")
            rows.append(torch.tensor([i]))
        return rows


def hf_dataset():
    import datasets

    def transform(batch):
        if BAD_INDEX in batch["x"]:
            raise ValueError(f"unparsable row {BAD_INDEX}")
        return {"x": [torch.tensor([x]) for x in batch["x"]]}

    ds = datasets.Dataset.from_dict({"x": list(range(32))})
    ds.set_transform(transform)
    return ds


if __name__ == "__main__":
    kind = sys.argv[1]
    workers = int(sys.argv[2]) if len(sys.argv) > 2 else 2
    dataset = hf_dataset() if kind == "hf" else RowsInBatches()
    loader = DataLoader(dataset, batch_size=8, num_workers=workers)
    for batch in loader:
        print("batch", len(batch), flush=True)
