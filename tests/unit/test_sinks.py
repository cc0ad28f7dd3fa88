"""`--log-to` inside the training process (in_training/sinks.py), on stand-ins for the libraries: which run it logs
into, how often, what it says when it logged nothing, and that no error of a library's reaches the loop. The real
libraries are driven by tests/integration/test_log_to.py."""

from __future__ import annotations

import json
import os
import sys
import types
from pathlib import Path
from typing import Any

import pytest

from dlprobe import atomic
from dlprobe.analysis.findings.probe import find_probe_degraded
from dlprobe.errors import DlprobeError
from dlprobe.in_training import probe_errors, sinks
from dlprobe.rundir.schema import LIVE_SUMMARY_FILE, LOG_TO_ENV, RUN_DIR_ENV
from dlprobe.supervisor.run_target import check_log_to
from tests.unit import fakes

MiB = 1 << 20


class FakeWandb(types.ModuleType):
    def __init__(self, active: bool = True, fails: bool = False) -> None:
        super().__init__("wandb")
        self.run = object() if active else None
        self.fails = fails
        self.calls: list[tuple[dict[str, float], dict[str, Any]]] = []

    def log(self, values: dict[str, float], **kwargs: Any) -> None:
        if self.fails:
            raise RuntimeError("run is finished")
        self.calls.append((dict(values), kwargs))


@pytest.fixture
def recorded(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str, str]]:
    seen: list[tuple[str, str, str]] = []
    monkeypatch.setattr(
        probe_errors, "record", lambda where, exc, consequence: seen.append((where, type(exc).__name__, str(exc)))
    )
    return seen  # fmt: skip


@pytest.fixture
def run_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(sinks, "atexit", types.SimpleNamespace(register=lambda f: None))
    monkeypatch.setattr(sinks, "ON", False)
    monkeypatch.setattr(sinks, "_state", sinks._State())
    return tmp_path


def _write_summary(run_dir: Path, uss: int, pid: int | None = None) -> None:
    summary = {"t": 1.0, "shm_used": MiB, "processes": [{"pid": pid or os.getpid(), "uss": uss, "loaders": [
        {"loader": 0, "data_wait_share": 0.5, "workers": [{"worker": 0, "pid": 9, "uss": uss}]}]}]}  # fmt: skip
    atomic.write_bytes_atomic(run_dir / LIVE_SUMMARY_FILE, json.dumps(summary).encode())


def _configure(run_dir: Path, names: str) -> None:
    sinks.configure({LOG_TO_ENV: names, RUN_DIR_ENV: str(run_dir)})


def _due() -> None:
    sinks._state.next_at = 0.0
    sinks.on_batch()


def test_off_without_the_option(run_dir: Path) -> None:
    sinks.configure({RUN_DIR_ENV: str(run_dir)})
    assert sinks.ON is False
    sinks.configure({LOG_TO_ENV: "bogus", RUN_DIR_ENV: str(run_dir)})
    assert sinks.ON is False


def test_wandb_gets_the_summary_on_the_scripts_own_step_at_most_once_a_second_and_only_when_it_changed(
    run_dir: Path, monkeypatch: pytest.MonkeyPatch, recorded: list[Any]
) -> None:
    wandb = FakeWandb()
    monkeypatch.setitem(sys.modules, "wandb", wandb)
    _configure(run_dir, "wandb")
    assert sinks.ON
    _write_summary(run_dir, 40 * MiB)
    sinks.on_batch()
    sinks.on_batch()  # within the second: nothing read
    _due()  # due, but the file has not changed: nothing logged
    [(values, kwargs)] = wandb.calls
    assert kwargs == {"commit": False}
    assert values["dlprobe/loader0/worker0/uss_mib"] == 40.0 and values["dlprobe/shm_mib"] == 1.0
    _write_summary(run_dir, 41 * MiB)
    _due()
    assert [c[0]["dlprobe/main/uss_mib"] for c in wandb.calls] == [40.0, 41.0]
    sinks._at_exit()
    assert recorded == []  # it logged: nothing to say


def test_no_active_run_logs_nothing_and_says_so_once_at_exit(
    run_dir: Path, monkeypatch: pytest.MonkeyPatch, recorded: list[Any]
) -> None:
    monkeypatch.setitem(sys.modules, "wandb", FakeWandb(active=False))
    monkeypatch.delitem(sys.modules, "mlflow", raising=False)
    _configure(run_dir, "wandb,mlflow")
    for uss in (1, 2, 3):
        _write_summary(run_dir, uss)
        _due()
    assert recorded == []
    sinks._at_exit()
    assert recorded == [
        ("--log-to wandb", "SinkUnused", "the script started no W&B run; nothing was logged"),
        ("--log-to mlflow", "SinkUnused", "the script did not import mlflow; nothing was logged"),
    ]
    assert "mlflow" not in sys.modules  # never imported by dlprobe
    assert sinks.ON is False


def test_a_library_that_raises_is_recorded_once_and_turned_off(
    run_dir: Path, monkeypatch: pytest.MonkeyPatch, recorded: list[Any]
) -> None:
    monkeypatch.setitem(sys.modules, "wandb", FakeWandb(fails=True))
    _configure(run_dir, "wandb")
    for uss in (1, 2, 3):
        _write_summary(run_dir, uss)
        _due()  # never raises into the loop
    assert recorded == [("--log-to wandb", "RuntimeError", "run is finished")]
    sinks._at_exit()
    assert len(recorded) == 1


def test_a_damaged_summary_is_recorded_and_turns_the_sinks_off(
    run_dir: Path, monkeypatch: pytest.MonkeyPatch, recorded: list[Any]
) -> None:
    monkeypatch.setitem(sys.modules, "wandb", FakeWandb())
    _configure(run_dir, "wandb")
    (run_dir / LIVE_SUMMARY_FILE).write_text("{not json")
    _due()
    assert [r[0] for r in recorded] == ["--log-to"] and sinks.ON is False


def test_mlflow_logs_into_the_active_run_of_this_thread_with_the_loops_step(
    run_dir: Path, monkeypatch: pytest.MonkeyPatch, recorded: list[Any]
) -> None:
    batches: list[dict[str, Any]] = []

    class Client:
        def log_batch(self, run_id: str, metrics: Any = (), synchronous: bool | None = None) -> None:
            batches.append({"run_id": run_id, "metrics": metrics, "synchronous": synchronous})

    active: list[Any] = [None]
    mlflow = types.ModuleType("mlflow")
    mlflow.active_run = lambda: active[0]  # type: ignore[attr-defined]
    mlflow.get_tracking_uri = lambda: "file:x"  # type: ignore[attr-defined]
    mlflow.MlflowClient = Client  # type: ignore[attr-defined]
    mlflow.entities = types.SimpleNamespace(Metric=lambda k, v, t, s: (k, v, s))  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "mlflow", mlflow)
    monkeypatch.setattr(sinks, "_step", lambda: 17)
    _configure(run_dir, "mlflow")
    _write_summary(run_dir, 2 * MiB)
    _due()
    assert batches == []  # no active run yet
    active[0] = types.SimpleNamespace(info=types.SimpleNamespace(run_id="r1"))
    _write_summary(run_dir, 3 * MiB)
    _due()
    [batch] = batches
    assert batch["run_id"] == "r1" and batch["synchronous"] is False
    assert ("dlprobe/loader0/worker0/uss_mib", 3.0, 17) in batch["metrics"]
    sinks._at_exit()
    assert recorded == []


def test_the_keys_over_a_run_are_bounded(run_dir: Path, monkeypatch: pytest.MonkeyPatch, recorded: list[Any]) -> None:
    wandb = FakeWandb()
    monkeypatch.setitem(sys.modules, "wandb", wandb)
    monkeypatch.setattr(sinks, "MAX_KEYS", 3)
    _configure(run_dir, "wandb")
    _write_summary(run_dir, MiB)
    _due()
    assert len(wandb.calls[0][0]) == 3
    assert [r[0] for r in recorded] == ["--log-to keys"]


def test_the_option_takes_names_repeated_or_comma_separated_and_refuses_others() -> None:
    assert check_log_to(["wandb", "MLflow,wandb"]) == ("wandb", "mlflow")
    assert check_log_to([]) == ()
    with pytest.raises(DlprobeError, match="--log-to must name wandb or mlflow, not 'tensorboard'"):
        check_log_to(["wandb,tensorboard"])


def test_the_report_says_which_sink_logged_nothing_and_why() -> None:
    event = {"ev": "probe_error", "t": 1.0, "pid": 7, "where": "--log-to wandb", "type": "SinkUnused",
             "message": "the script started no W&B run; nothing was logged", "consequence": "nothing was logged",
             "count": 1}  # fmt: skip
    [finding] = find_probe_degraded(fakes.run([], [], events=[{"ev": "start", "t": 0.0, "pid": 7}, event]))
    assert finding.severity == "info"
    assert finding.title == "--log-to wandb: the script started no W&B run; nothing was logged"
    assert "never starts one" in finding.detail
