"""A fast tokenizer (HF `tokenizers`) used in the parent with TOKENIZERS_PARALLELISM=true (what users set to silence
its warning), then in 2 forked workers: its Rust thread pool was started in the parent and does not exist in the
children, so the workers' batch encode waits forever. `off` sets TOKENIZERS_PARALLELISM=false: no pool, no hang."""

import os
import sys

os.environ["TOKENIZERS_PARALLELISM"] = "false" if "off" in sys.argv[1:] else "true"

import torch  # noqa: E402
from tokenizers import Tokenizer, models, pre_tokenizers  # noqa: E402
from torch.utils.data import DataLoader, Dataset  # noqa: E402

WORDS = [f"w{i}" for i in range(500)]


def build_tokenizer():
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(["[UNK]", *WORDS])}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    return tok


class TextDataset(Dataset):
    def __init__(self, n):
        self.tok = build_tokenizer()
        self.texts = [" ".join(WORDS[(i * 7 + k) % 500] for k in range(32)) for i in range(n)]

    def __len__(self):
        return len(self.texts) // 16

    def __getitem__(self, i):
        batch = self.tok.encode_batch(self.texts[i * 16 : (i + 1) * 16])  # the pool, in a worker
        return torch.tensor([e.ids for e in batch])


if __name__ == "__main__":
    dataset = TextDataset(4096)
    dataset.tok.encode_batch(dataset.texts[:256])  # the parent uses the pool first: its threads start here
    total = 0
    for x in DataLoader(dataset, batch_size=None, num_workers=2):
        total += int(x.sum())
    print(f"total {total}")
