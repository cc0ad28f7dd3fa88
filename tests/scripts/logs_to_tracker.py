"""A training loop that logs its own loss into W&B or MLflow every step, over a DataLoader with 2 workers that each
hold a few MiB of their own, for about SECONDS seconds.

argv: wandb | mlflow | wandb-no-run | mlflow-no-run | none [SECONDS] [EXIT_CODE]
- wandb / mlflow: the script starts its own run (W&B offline under $WANDB_DIR; MLflow at $MLFLOW_TRACKING_URI)
- *-no-run: the script imports the library and never starts a run
- none: imports neither
It prints one line, the steps it took and its run's id (or "no run"), then exits with EXIT_CODE."""

import sys
import time

import torch
from torch.utils.data import DataLoader, Dataset


class HeldDataset(Dataset):
    def __init__(self):
        self.held = None

    def __len__(self):
        return 100_000

    def __getitem__(self, i):
        if self.held is None:  # each worker's own 8 MiB: a USS well above zero
            self.held = bytearray(8 << 20)
            for at in range(0, len(self.held), 4096):
                self.held[at] = 1
        time.sleep(0.002)
        return torch.full((4,), float(i % 7))


def main():
    mode = sys.argv[1]
    seconds = float(sys.argv[2]) if len(sys.argv) > 2 else 4.0
    exit_code = int(sys.argv[3]) if len(sys.argv) > 3 else 0
    run_id = "no run"
    if mode.startswith("wandb"):
        import wandb

        if mode == "wandb":
            run_id = wandb.init(project="dlprobe-test", mode="offline").id
    elif mode.startswith("mlflow"):
        import mlflow

        if mode == "mlflow":
            run_id = mlflow.start_run().info.run_id
    loader = DataLoader(HeldDataset(), batch_size=8, num_workers=2)
    steps = 0
    end = time.monotonic() + seconds
    for batch in loader:
        loss = float(batch.mean())
        if mode == "wandb":
            wandb.log({"loss": loss})
        elif mode == "mlflow":
            mlflow.log_metric("loss", loss, step=steps)
        steps += 1
        time.sleep(0.01)
        if time.monotonic() > end:
            break
    if mode == "wandb":
        wandb.finish()
    elif mode == "mlflow":
        mlflow.end_run()
    print(f"steps>0 {steps > 0} run {run_id}")
    sys.exit(exit_code)


if __name__ == "__main__":
    main()
