"""`dlprobe run --log-to wandb|mlflow` with the real libraries: W&B offline (its own transaction log read back), MLflow
on a local file store (read back with MlflowClient), a real training script with forked workers, under torchrun too.
Each skips with the reason where its library cannot be imported."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import SCRIPTS, run_dlprobe
from tests.integration.test_launchers import torchrun

SCRIPT = str(SCRIPTS / "logs_to_tracker.py")
STEPS = 40
# W&B's own columns, set by W&B at each row (wall time): not the script's values
WANDB_OWN = ("_runtime", "_timestamp")


def _library(name: str) -> None:
    try:
        __import__(name)
    except Exception as exc:  # an install without it, or one broken: the reason is the skip's
        pytest.skip(f"{name} cannot be imported here: {type(exc).__name__}: {exc}")


def _run(tmp_path: Path, name: str, library: str, options: list[str], env: dict[str, str],
         *script_args: str) -> tuple[Any, Path]:  # fmt: skip
    run_dir = tmp_path / name
    args = ["run", "-q", "--out", str(run_dir), *options, SCRIPT, library, *script_args]
    return run_dlprobe(args, tmp_path, timeout=300, env=env), run_dir


def _log_to(run_dir: Path) -> dict[str, Any]:
    (finding,) = [f for f in json.loads((run_dir / "report.json").read_text())["findings"] if f["code"] == "log-to"]
    return finding


def _wandb_env(where: Path) -> dict[str, str]:
    where.mkdir()
    return {"WANDB_MODE": "offline", "WANDB_DIR": str(where), "WANDB_SILENT": "true", "WANDB_DISABLE_GIT": "true"}


def test_wandb_rows_carry_the_workers_numbers_and_keep_the_scripts_own(tmp_path: Path) -> None:
    _library("wandb")
    from tests.wandb_history import history, run_file

    with_env, without_env = _wandb_env(tmp_path / "w1"), _wandb_env(tmp_path / "w2")
    proc, run_dir = _run(tmp_path, "on", "wandb", ["--log-to", "wandb"], with_env, "leaky", str(STEPS))
    assert proc.returncode == 0, proc.stderr
    plain, _ = _run(tmp_path, "off", "wandb", [], without_env, "leaky", str(STEPS))
    assert plain.returncode == 0, plain.stderr

    rows = history(run_file(tmp_path / "w1"))
    plain_rows = history(run_file(tmp_path / "w2"))
    # the script's own values and steps, row for row, as without --log-to
    own = [{k: v for k, v in row.items() if not k.startswith("dlprobe/") and k not in WANDB_OWN} for row in rows]
    assert own == [{k: v for k, v in row.items() if k not in WANDB_OWN} for row in plain_rows]
    assert [row["_step"] for row in rows] == list(range(STEPS))
    assert not any(k.startswith("dlprobe/") for row in plain_rows for k in row)
    # the later rows (after the supervisor's first seconds) carry each forked worker's memory and the loader's waits
    last = rows[-1]
    for worker in (0, 1):
        assert last[f"dlprobe/loader0/worker{worker}/uss_bytes"] > 0
        assert last[f"dlprobe/loader0/worker{worker}/open_fds"] > 0
    assert 0 < last["dlprobe/loader0/batches_total"] <= STEPS
    assert last["dlprobe/loader0/data_wait_seconds_total"] >= 0
    assert "dlprobe/node/shm_used_bytes" in last

    finding = _log_to(run_dir)
    (row,) = finding["evidence"]["sinks"]
    carried = sum(1 for r in rows if any(k.startswith("dlprobe/") for k in r))
    assert row["state"] == "logged" and row["calls"] == STEPS and row["logged"] == carried
    assert row["target"] and row["target"] in str(run_file(tmp_path / "w1"))
    assert f"{row['keys']} dlprobe/ keys on {carried} of the script's {STEPS} logs" in finding["title"]
    assert not [f for f in json.loads((run_dir / "report.json").read_text())["findings"]
                if f["code"] == "probe-degraded"]  # fmt: skip


def _mlflow_env(tmp_path: Path, name: str) -> dict[str, str]:
    import os

    os.environ["MLFLOW_ALLOW_FILE_STORE"] = "true"  # MLflow 3 refuses a file store without it (this reader too)
    return {"MLFLOW_TRACKING_URI": (tmp_path / name).as_uri(), "MLFLOW_ALLOW_FILE_STORE": "true"}


def _mlflow_runs(uri: str) -> dict[str, dict[str, list[tuple[int, float]]]]:
    """Each run (by name) -> each metric -> its (step, value) history."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name("dlprobe-test")
    out = {}
    for run in client.search_runs([experiment.experiment_id]):
        out[run.info.run_name] = {
            key: sorted((m.step, m.value) for m in client.get_metric_history(run.info.run_id, key))
            for key in run.data.metrics
        }
    return out


def test_mlflow_run_carries_the_numbers_at_the_scripts_steps(tmp_path: Path) -> None:
    _library("mlflow")
    on_env, off_env = _mlflow_env(tmp_path, "m1"), _mlflow_env(tmp_path, "m2")
    proc, run_dir = _run(tmp_path, "on", "mlflow", ["--log-to", "mlflow"], on_env, "leaky", str(STEPS))
    assert proc.returncode == 0, proc.stderr
    plain, _ = _run(tmp_path, "off", "mlflow", [], off_env, "leaky", str(STEPS))
    assert plain.returncode == 0, plain.stderr
    (metrics,) = _mlflow_runs(on_env["MLFLOW_TRACKING_URI"]).values()
    (plain_metrics,) = _mlflow_runs(off_env["MLFLOW_TRACKING_URI"]).values()
    assert {k: v for k, v in metrics.items() if not k.startswith("dlprobe/")} == plain_metrics
    assert plain_metrics["loss"] == [(step, 1.0 / (step + 1)) for step in range(STEPS)]
    uss = metrics["dlprobe/loader0/worker1/uss_bytes"]
    steps = [step for step, _ in uss]
    assert steps == sorted(set(steps)) and set(steps) <= set(range(STEPS))  # once per step, at the script's steps
    assert all(value > 0 for _, value in uss)
    (row,) = _log_to(run_dir)["evidence"]["sinks"]
    added = {step for key, rows in metrics.items() if key.startswith("dlprobe/") for step, _ in rows}
    # MLflow gets the numbers at most every few seconds: at steps of the script's own, one log each
    assert row["state"] == "logged" and row["calls"] == 2 * STEPS and row["logged"] == len(added)


def test_mlflow_under_torchrun_each_rank_logs_its_own_workers(tmp_path: Path) -> None:
    _library("mlflow")
    env = _mlflow_env(tmp_path, "m")
    run_dir = tmp_path / "run"
    command = torchrun(SCRIPT, "mlflow", "normal", str(STEPS))
    proc = run_dlprobe(["run", "-q", "--out", str(run_dir), "--log-to", "mlflow", "--", *command], tmp_path,
                       timeout=300, env=env)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    runs = _mlflow_runs(env["MLFLOW_TRACKING_URI"])
    assert set(runs) == {"rank0", "rank1"}
    for rank in (0, 1):
        ours = [k for k in runs[f"rank{rank}"] if k.startswith("dlprobe/")]
        assert f"dlprobe/rank{rank}/loader0/worker0/uss_bytes" in ours
        assert not [k for k in ours if k.startswith(f"dlprobe/rank{1 - rank}/")]  # never the other rank's
    finding = _log_to(run_dir)
    rows = finding["evidence"].get("ranks") or finding["evidence"]
    assert "logged" in json.dumps(rows)


def test_a_script_without_the_library_gets_it_never_imported(tmp_path: Path) -> None:
    proc, run_dir = _run(tmp_path, "none", "none", ["--log-to", "wandb,mlflow"], {}, "normal", "10")
    assert proc.returncode == 0, proc.stderr
    assert "imported wandb=False mlflow=False" in proc.stdout
    finding = _log_to(run_dir)
    assert {r["sink"]: r["state"] for r in finding["evidence"]["sinks"]} == {
        "wandb": "not-imported",
        "mlflow": "not-imported",
    }
    assert "W&B: nothing, the script never imported wandb" in finding["title"]


def test_a_bad_sink_name_is_one_error_line(tmp_path: Path) -> None:
    for options in (["--log-to", "tensorboard"], ["--log-to", "wandb,nope"]):
        proc = run_dlprobe(["run", *options, SCRIPT, "none"], tmp_path)
        assert proc.returncode == 2
        errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
        assert len(errors) == 1 and "no sink named" in errors[0], proc.stderr
        assert "Traceback" not in proc.stderr
    assert not (tmp_path / "dlprobe-runs").exists()  # refused before any run directory


def test_without_the_flag_no_live_file_and_no_finding(tmp_path: Path) -> None:
    proc, run_dir = _run(tmp_path, "plain", "none", [], {}, "normal", "10")
    assert proc.returncode == 0, proc.stderr
    assert not (run_dir / "live.json").exists()
    assert not [f for f in json.loads((run_dir / "report.json").read_text())["findings"] if f["code"] == "log-to"]
