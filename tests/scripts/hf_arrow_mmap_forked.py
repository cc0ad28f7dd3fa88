"""A ~150 MB HuggingFace `datasets` table saved to disk (argv[1]) and loaded back memory-mapped, read as numpy by 2
forked workers for 3,000 samples: the workers' pages are the mapped Arrow file, not memory they allocate."""

import sys

import numpy as np
from datasets import Dataset, load_from_disk
from torch.utils.data import DataLoader

ROWS, COLS = 4_000, 10_240  # float32: 4,000 x 10,240 x 4 B = ~156 MiB on disk, 40 KiB a row


def build(path):
    rng = np.random.default_rng(0)
    chunks = []
    for start in range(0, ROWS, 1_000):  # in parts, so the parent never holds one big anonymous copy for long
        part = Dataset.from_dict(
            {"x": rng.random((1_000, COLS), dtype=np.float32), "y": np.arange(start, start + 1_000)}
        )
        chunks.append(part)
    from datasets import concatenate_datasets

    concatenate_datasets(chunks).save_to_disk(path)


if __name__ == "__main__":
    build(sys.argv[1])
    table = load_from_disk(sys.argv[1]).with_format("numpy")
    # shuffle so the workers touch pages all over the file, which is what grows their file-backed memory
    loader = DataLoader(table, batch_size=25, shuffle=True, num_workers=2)
    total, seen = 0.0, 0
    for batch in loader:
        total += float(batch["x"][:, 0].sum())
        seen += len(batch["y"])
        if seen >= 3_000:
            break
    print(f"samples {seen}")
