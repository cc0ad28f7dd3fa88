"""An HF dataset whose transform returns one row (index 13) a different length: the default collate cannot stack it."""

import sys

import torch
from datasets import Dataset
from torch.utils.data import DataLoader

ODD_INDEX = int(sys.argv[1]) if len(sys.argv) > 1 else 13


def to_tensors(batch: dict) -> dict:
    # One row comes out one element longer, as a tokenizer without padding does for a longer text.
    return {"x": [torch.zeros(8 if i == ODD_INDEX else 7) for i in batch["i"]], "i": batch["i"]}


if __name__ == "__main__":
    rows = Dataset.from_dict({"i": list(range(64))})
    rows.set_transform(to_tensors)
    loader = DataLoader(rows, batch_size=8, num_workers=2)
    for _batch in loader:
        pass
