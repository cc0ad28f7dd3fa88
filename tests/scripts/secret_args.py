"""A small DataLoader job given credentials on its command line (--token=..., --api-key ...), as training scripts
are; with --fail it ends raising an exception whose message holds a Hugging Face token. It writes the argv it was
given to --argv-out (outside the run directory): the probe must not change what the script sees."""

import argparse
import json

import torch
from torch.utils.data import DataLoader, TensorDataset

HF_TOKEN = "hf_" + "aBcDeFgHiJkLmNoPqRsTuVwXyZ01234567"  # split so no scanner flags this test file

if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--token")
    parser.add_argument("--api-key")
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--argv-out")
    parser.add_argument("--fail", action="store_true")
    args = parser.parse_args()
    if args.argv_out:
        with open(args.argv_out, "w") as f:
            json.dump({"token": args.token, "api_key": args.api_key}, f)
    loader = DataLoader(TensorDataset(torch.arange(64.0)), batch_size=8, num_workers=2)
    total = 0.0
    for _ in range(args.epochs):
        for (x,) in loader:
            total += float(x.sum())
    print(f"total {total:g}")
    if args.fail:
        raise RuntimeError(f"401 Unauthorized: the hub refused token {HF_TOKEN}")
