"""A job to attach to, given a credential on its command line (`--token=...`): 2 persistent workers, a training
loop until the stop file (argv[1]) appears. With --other-user it first starts a `sleep` as uid 65534 (needs root):
another user's process inside the tree. Prints `first batch` once training has started."""

import argparse
import os
import subprocess
import time

import torch
from torch.utils.data import DataLoader, TensorDataset

if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("stop_file")
    parser.add_argument("--token")
    parser.add_argument("--other-user", action="store_true")
    args = parser.parse_args()
    helper = None
    if args.other_user:
        setpriv = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
        helper = subprocess.Popen([*setpriv, "sleep", "300"])
    loader = DataLoader(TensorDataset(torch.arange(1000.0)), batch_size=2, num_workers=2, persistent_workers=True)
    batches = 0
    while not os.path.exists(args.stop_file):
        for _ in loader:
            batches += 1
            if batches == 1:
                print("first batch", flush=True)
            if os.path.exists(args.stop_file):
                break
            time.sleep(0.05)
    if helper is not None:
        helper.kill()
        helper.wait()
    print(f"stopped after {batches} batches")
