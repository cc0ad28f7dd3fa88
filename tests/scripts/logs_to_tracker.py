"""A training loop that logs to W&B or MLflow itself, as a script that already uses one does. argv: the library
(wandb, mlflow, or none), the dataset (leaky: a list of dicts read by 2 forked workers, copy-on-access; normal: a
numpy-free range), and the steps to log (one per batch; 40). W&B runs offline in $WANDB_DIR; MLflow logs to
$MLFLOW_TRACKING_URI; under torchrun each rank makes its own run, named rankR. The logged values depend only on
the step, so two runs log the same numbers. Prints which of the two libraries ended up imported."""

import os
import sys
import time

import torch
from torch.utils.data import DataLoader, Dataset


class RecordsDataset(Dataset):
    def __init__(self, n, leaky):
        self.records = [{"path": f"/data/img_{i:09d}.jpg", "label": i % 100} for i in range(n)] if leaky else None
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        if self.records is None:
            return torch.tensor([i]), i % 100
        rec = self.records[i]
        return torch.tensor([len(rec["path"])]), rec["label"]


def main():
    library = sys.argv[1] if len(sys.argv) > 1 else "none"
    leaky = (sys.argv[2] if len(sys.argv) > 2 else "leaky") == "leaky"
    steps = int(sys.argv[3]) if len(sys.argv) > 3 else 40
    loader = DataLoader(RecordsDataset(200_000, leaky), batch_size=200_000 // steps, num_workers=2)
    if library == "wandb":
        import wandb

        run = wandb.init(project="dlprobe-test", mode="offline")
        log = lambda step, loss: wandb.log({"loss": loss, "lr": 0.1}, step=step)  # noqa: E731
    elif library == "mlflow":
        import mlflow

        mlflow.set_experiment("dlprobe-test")
        run = mlflow.start_run(run_name=f"rank{os.environ['RANK']}" if "RANK" in os.environ else None)

        def log(step, loss):
            mlflow.log_metric("loss", loss, step=step)
            mlflow.log_metrics({"lr": 0.1}, step=step)
    else:
        run = None
        log = lambda step, loss: None  # noqa: E731
    for step, (_x, y) in enumerate(loader):
        time.sleep(0.1)  # a training step: the run lasts a few of the supervisor's seconds
        log(step, 1.0 / (step + 1) + int(y.sum()) * 0.0)
    if library == "wandb":
        print(f"run {run.id} {run.dir}")
        run.finish()
    elif library == "mlflow":
        print(f"run {run.info.run_id}")
        mlflow.end_run()
    print(f"imported wandb={'wandb' in sys.modules} mlflow={'mlflow' in sys.modules}")


if __name__ == "__main__":
    main()
