"""A training script with its own command line (argparse): `--epochs N`; any other option is a usage error (exit 2)."""

import argparse

import torch
from torch.utils.data import DataLoader

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=1)
args = parser.parse_args()
total = 0.0
for _ in range(args.epochs):
    for batch in DataLoader(torch.arange(16.0), batch_size=4, num_workers=2):
        total += float(batch.sum())
print("total", total)
