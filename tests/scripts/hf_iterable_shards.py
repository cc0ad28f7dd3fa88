"""HuggingFace datasets: Dataset.from_dict(...).to_iterable_dataset(num_shards=SHARDS) read by NUM_WORKERS workers.

Args: [shards] [num_workers]. datasets gives each worker whole shards, so workers beyond the shards read nothing.
"""

import sys

from datasets import Dataset
from torch.utils.data import DataLoader

if __name__ == "__main__":
    shards = int(sys.argv[1]) if len(sys.argv) > 1 else 2
    num_workers = int(sys.argv[2]) if len(sys.argv) > 2 else 4
    ds = Dataset.from_dict({"x": list(range(512))}).to_iterable_dataset(num_shards=shards)
    loader = DataLoader(ds.with_format("torch"), batch_size=16, num_workers=num_workers)
    print("samples", sum(len(batch["x"]) for batch in loader))
