"""`dlprobe run --log-to wandb|mlflow` on a real script with 2 workers, read back with the libraries themselves: W&B
offline (its run's .wandb file, records parsed by wandb's own protobuf classes: offline there is no wandb.Api) and
MLflow's file store (MlflowClient); and a script that starts no run, whose output and exit code stay its own."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import SCRIPTS, assert_no_probe_frames, run_dlprobe

SCRIPT = SCRIPTS / "logs_to_tracker.py"
USS_KEYS = ("dlprobe/loader0/worker0/uss_mib", "dlprobe/loader0/worker1/uss_mib")
# Each worker holds 8 MiB of its own beside torch's pages: a plausible USS is above that and far below a GiB.
PLAUSIBLE_MIB = (8.0, 1024.0)


def _wandb_env(tmp_path: Path) -> dict[str, str]:
    return {"WANDB_MODE": "offline", "WANDB_DIR": str(tmp_path), "WANDB_SILENT": "true", "WANDB_DISABLE_GIT": "true"}


def _mlflow_env(tmp_path: Path) -> dict[str, str]:
    # MLflow 3 refuses the file store unless asked; it is the one backend mlflow-skinny has without a database
    return {"MLFLOW_TRACKING_URI": f"file:{tmp_path / 'mlruns'}", "MLFLOW_ALLOW_FILE_STORE": "true"}


def _wandb_records(path: Path) -> list[Any]:
    """Every record of a .wandb file: the LevelDB log format W&B writes (a 7-byte `:W&B` header, then 32 KiB blocks of
    chunks, each with a 7-byte header: CRC, length, type), each record a wandb_internal_pb2.Record."""
    from wandb.proto import wandb_internal_pb2

    data = path.read_bytes()
    ident, magic, _version = struct.unpack("<4sHB", data[:7])
    assert (ident, magic) == (b":W&B", 0xBEE1), "not a .wandb file of the format this reader knows"
    block, at, pending, records = 32768, 7, b"", []
    while at + 7 <= len(data):
        if block - at % block < 7:  # a block's tail too short for a header is padding
            at += block - at % block
            continue
        _crc, length, kind = struct.unpack("<IHB", data[at : at + 7])
        chunk, at = data[at + 7 : at + 7 + length], at + 7 + length
        if kind == 0 and length == 0:
            break
        pending = chunk if kind in (1, 2) else pending + chunk  # full, first | middle, last
        if kind in (1, 4):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pending)
            records.append(record)
            pending = b""
    return records


def _wandb_history(wandb_dir: Path) -> list[dict[str, Any]]:
    [run_file] = wandb_dir.glob("wandb/offline-run-*/run-*.wandb")
    rows = []
    for record in _wandb_records(run_file):
        if record.WhichOneof("record_type") == "history":
            rows.append(
                {item.key or "/".join(item.nested_key): json.loads(item.value_json) for item in record.history.item}
            )
    return rows


def test_wandb_offline_gets_each_workers_uss_on_the_scripts_own_steps(tmp_path: Path) -> None:
    pytest.importorskip("wandb", reason="wandb is not installed (pip install wandb)")
    proc = run_dlprobe(["run", "-q", "--out", "run", "--log-to", "wandb", str(SCRIPT), "wandb", "4"], tmp_path,
                       env=_wandb_env(tmp_path))  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert_no_probe_frames(proc.stderr)
    rows = _wandb_history(tmp_path)
    steps = [row for row in rows if "loss" in row]
    ours = [row for row in rows if any(key in row for key in USS_KEYS)]
    assert ours, f"no worker USS in {len(rows)} history rows"
    # every dlprobe value rode on one of the script's own steps (the last may be flushed at finish on its own)
    assert all("loss" in row for row in ours[:-1]) and len(rows) - len(steps) <= 1
    uss = [row[key] for row in ours for key in USS_KEYS if key in row]
    assert all(PLAUSIBLE_MIB[0] < value < PLAUSIBLE_MIB[1] for value in uss), uss
    assert any("dlprobe/shm_mib" in row for row in ours) and any(
        "dlprobe/loader0/data_wait_share" in row for row in rows
    )
    report = json.loads((tmp_path / "run" / "report.json").read_text())
    assert not [f for f in report["findings"] if f["title"].startswith("--log-to")]


def test_mlflow_file_store_gets_each_workers_uss_in_the_scripts_own_run(tmp_path: Path) -> None:
    pytest.importorskip("mlflow", reason="mlflow is not installed (pip install mlflow-skinny)")
    env = _mlflow_env(tmp_path)
    proc = run_dlprobe(["run", "-q", "--out", "run", "--log-to", "mlflow", str(SCRIPT), "mlflow", "4"], tmp_path,
                       env=env)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    run_id = proc.stdout.split()[-1]
    os.environ.update(env)  # for this test's own client only: restored below
    try:
        from mlflow.tracking import MlflowClient

        client = MlflowClient()
        history = {key: client.get_metric_history(run_id, key) for key in USS_KEYS}
        loss = client.get_metric_history(run_id, "loss")
        runs = client.search_runs([client.get_run(run_id).info.experiment_id])
    finally:
        for name in env:
            os.environ.pop(name, None)
    points = [m for metrics in history.values() for m in metrics]
    assert points, "no worker USS in the script's run"
    assert all(PLAUSIBLE_MIB[0] < m.value < PLAUSIBLE_MIB[1] for m in points), points
    assert all(0 < m.step <= len(loss) for m in points)  # the batches the loop had taken: within the script's steps
    assert [r.info.run_id for r in runs] == [run_id]  # no run of dlprobe's own


def test_a_script_without_a_run_logs_nothing_and_keeps_its_output_and_exit(tmp_path: Path) -> None:
    pytest.importorskip("wandb", reason="wandb is not installed (pip install wandb)")
    pytest.importorskip("mlflow", reason="mlflow is not installed (pip install mlflow-skinny)")
    env = {**_wandb_env(tmp_path), **_mlflow_env(tmp_path)}
    args = [str(SCRIPT), "wandb-no-run", "3", "5"]
    plain = subprocess.run([sys.executable, *args], cwd=tmp_path, capture_output=True, text=True, timeout=180,
                           env={**os.environ, **env})  # fmt: skip
    probed = run_dlprobe(["run", "--out", "run", "--log-to", "wandb", "--log-to", "mlflow", *args], tmp_path, env=env)
    assert (probed.returncode, probed.stdout) == (plain.returncode, plain.stdout) == (5, "steps>0 True run no run\n")
    assert_no_probe_frames(probed.stderr)
    assert not (tmp_path / "wandb").exists() and not (tmp_path / "mlruns").exists()  # no run was made for it
    report = json.loads((tmp_path / "run" / "report.json").read_text())
    titles = sorted(f["title"] for f in report["findings"] if f["code"] == "probe-degraded")
    assert titles == [
        "--log-to mlflow: the script did not import mlflow; nothing was logged",
        "--log-to wandb: the script started no W&B run; nothing was logged",
    ]
    assert "--log-to wandb: the script started no W&B run" in probed.stderr  # the summary says it too
    meta = json.loads((tmp_path / "run" / "meta.json").read_text())
    assert meta["log_to"] == ["wandb", "mlflow"]
