"""--log-to's pure parts: the option, live.json's keys (supervisor/live_json.py), the W&B arguments and the MLflow
call the sinks make (in_training/sinks.py), the live.json reader, and the log-to finding."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import pytest

from dlprobe.analysis.sink_findings import find_log_to
from dlprobe.errors import DlprobeError
from dlprobe.in_training import sinks
from dlprobe.rundir.schema import LIVE_FILE, RUN_DIR_ENV
from dlprobe.supervisor.live_json import live_record
from dlprobe.supervisor.log_to_option import parse_log_to
from dlprobe.supervisor.prom.exposition import Family
from tests.unit.fakes import run


def test_log_to_takes_repeats_and_commas_once_each() -> None:
    assert parse_log_to(["wandb"]) == ("wandb",)
    assert parse_log_to(["mlflow,wandb", "wandb", " MLflow "]) == ("mlflow", "wandb")
    assert parse_log_to([]) == ()


@pytest.mark.parametrize("bad", ["tensorboard", "wandb,", "wandb,nope", ""])
def test_log_to_refuses_a_library_it_has_no_sink_for(bad: str) -> None:
    with pytest.raises(DlprobeError, match="no sink named"):
        parse_log_to([bad])


def _family(name: str, *samples: tuple[dict[str, str], float]) -> Family:
    family = Family(name, "gauge", "")
    for labels, value in samples:
        family.add(labels, value)
    return family


def test_live_record_keys_each_number_by_the_process_that_owns_it() -> None:
    rank0 = {"job": "j", "host": "h", "rank": "0", "local_rank": "0"}
    rank1 = {**rank0, "rank": "1", "local_rank": "1"}
    worker1 = {**rank0, "loader": "0", "worker": "1", "pid": "11"}
    fams = [
        _family("dlprobe_worker_uss_bytes", ({**rank0, "loader": "0", "worker": "1", "pid": "11"}, 5.0),
                ({**rank1, "loader": "0", "worker": "0", "pid": "21"}, 7.0)),  # fmt: skip
        _family("dlprobe_worker_pss_kind_bytes", ({**worker1, "kind": "anon"}, 3.0)),
        _family("dlprobe_worker_private_bytes", ({**worker1, "kind": "dirty"}, 2.0)),
        _family("dlprobe_main_open_fds", ({**rank0, "pid": "10"}, 9.0)),
        _family("dlprobe_loader_batches_total", ({**rank1, "loader": "2", "pid": "20"}, 40.0)),
        _family("dlprobe_loader_last_batch_timestamp_seconds", ({**rank1, "loader": "2", "pid": "20"}, 1e9)),
        _family("dlprobe_shm_used_bytes", ({"job": "j", "host": "h"}, 4096.0)),
        _family("dlprobe_worker_open_fds", ({**rank0, "loader": "0", "worker": "3", "pid": "99"}, 1.0)),  # not known
    ]  # fmt: skip
    record = live_record(fams, {11: 10, 21: 20}, 12.5)
    assert record["t"] == 12.5
    assert record["processes"]["10"] == {"rank": 0, "values": {
        "dlprobe/rank0/loader0/worker1/uss_bytes": 5.0,
        "dlprobe/rank0/loader0/worker1/pss_anon_bytes": 3.0,
        "dlprobe/rank0/loader0/worker1/private_dirty_bytes": 2.0,
        "dlprobe/rank0/main/open_fds": 9.0,
    }}  # fmt: skip
    assert record["processes"]["20"]["values"] == {
        "dlprobe/rank1/loader0/worker0/uss_bytes": 7.0,
        "dlprobe/rank1/loader2/batches_total": 40.0,  # a timestamp is no curve: left to Prometheus
    }
    assert record["node"] == {"dlprobe/node/shm_used_bytes": 4096.0}


def test_live_record_without_ranks_has_no_rank_in_its_keys() -> None:
    fams = [_family("dlprobe_worker_uss_bytes", ({"job": "j", "host": "h", "loader": "0", "worker": "0",
                                                  "pid": "11"}, 5.0))]  # fmt: skip
    assert live_record(fams, {11: 10}, 0.0)["processes"]["10"] == {
        "rank": None,
        "values": {"dlprobe/loader0/worker0/uss_bytes": 5.0},
    }


@pytest.fixture
def live(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    """A run directory whose live.json holds numbers for this process; the sinks' state fresh."""
    monkeypatch.setenv(RUN_DIR_ENV, str(tmp_path))
    monkeypatch.setattr(sinks, "_numbers", None)
    monkeypatch.setattr(sinks, "_mlflow_last", None)
    monkeypatch.setattr(sinks, "_mlflow_at", None)
    monkeypatch.setattr(sinks, "MLFLOW_EVERY_S", 0.0)
    monkeypatch.setattr(sinks, "_tallies", {name: sinks.Tally(patched=True) for name in sinks.LOG_TO_CHOICES})

    def write(values: dict[str, float], node: dict[str, float] | None = None) -> None:
        record = {"t": 1.0, "processes": {str(os.getpid()): {"rank": None, "values": values}}, "node": node or {}}
        tmp = tmp_path / "live.tmp"
        tmp.write_text(json.dumps(record))
        tmp.rename(tmp_path / LIVE_FILE)

    return write


class _Run:
    id = "abc123"


def test_wandb_gets_the_numbers_in_a_copy_of_the_users_row(live: Any) -> None:
    live({"dlprobe/loader0/worker0/uss_bytes": 5.0, "loss": 99.0, "dlprobe/main/fds": 3.0},
         {"dlprobe/node/shm_used_bytes": 1.0})  # fmt: skip
    data = {"loss": 0.5, "dlprobe/main/fds": -1.0}
    args, kwargs = sinks.wandb_args(_Run(), (data,), {"step": 7, "commit": False})
    assert data == {"loss": 0.5, "dlprobe/main/fds": -1.0}  # the user's own dict is not changed
    assert kwargs == {"step": 7, "commit": False}
    # the user's keys win, and only dlprobe/ keys are ever added
    assert args == ({"loss": 0.5, "dlprobe/main/fds": -1.0, "dlprobe/loader0/worker0/uss_bytes": 5.0,
                     "dlprobe/node/shm_used_bytes": 1.0},)  # fmt: skip
    args, kwargs = sinks.wandb_args(_Run(), (), {"data": {"acc": 1.0}})
    assert args == () and set(kwargs["data"]) == {"acc", "dlprobe/loader0/worker0/uss_bytes", "dlprobe/main/fds",
                                                  "dlprobe/node/shm_used_bytes"}  # fmt: skip
    tally = sinks._tallies["wandb"]
    assert (tally.calls, tally.logged, tally.keys, tally.target, tally.state()) == (2, 2, 3, "abc123", "logged")


def test_wandb_before_the_first_numbers_or_with_no_dict_is_left_as_it_is(live: Any) -> None:
    assert sinks.wandb_args(_Run(), ({"loss": 1.0},), {}) == (({"loss": 1.0},), {})
    assert sinks._tallies["wandb"].state() == "no-numbers"
    live({"dlprobe/main/uss_bytes": 1.0})
    assert sinks.wandb_args(_Run(), ("not a dict",), {}) == (("not a dict",), {})


def test_the_reader_parses_live_json_again_only_once_it_was_replaced(live: Any) -> None:
    live({"dlprobe/main/uss_bytes": 1.0})
    numbers = sinks.Numbers(os.path.join(os.environ[RUN_DIR_ENV], LIVE_FILE))
    assert numbers.latest() == {"dlprobe/main/uss_bytes": 1.0}
    numbers.values = {"cached": 1.0}
    assert numbers.latest() == {"cached": 1.0}  # the same file: no second read
    live({"dlprobe/main/uss_bytes": 2.0})
    assert numbers.latest() == {"dlprobe/main/uss_bytes": 2.0}


class _Info:
    run_id = "run-1"


class _ActiveRun:
    info = _Info()


def test_mlflow_logs_once_per_step_on_the_users_run(live: Any) -> None:
    live({"dlprobe/main/uss_bytes": 1.0})
    calls: list[tuple[dict[str, float], dict[str, Any]]] = []

    def log_metrics(metrics: dict[str, float], **kwargs: Any) -> None:
        calls.append((metrics, kwargs))

    sinks.mlflow_add({"key": "loss", "value": 1.0, "step": 3}, log_metrics, _ActiveRun)
    sinks.mlflow_add({"metrics": {"lr": 0.1}, "step": 3}, log_metrics, _ActiveRun)  # the same step: nothing more
    sinks.mlflow_add(
        {"key": "loss", "value": 1.0, "step": 4, "run_id": "other", "timestamp": 5}, log_metrics, _ActiveRun
    )
    assert calls == [
        ({"dlprobe/main/uss_bytes": 1.0}, {"step": 3, "synchronous": None, "run_id": "run-1", "timestamp": None}),
        ({"dlprobe/main/uss_bytes": 1.0}, {"step": 4, "synchronous": None, "run_id": "other", "timestamp": 5}),
    ]
    tally = sinks._tallies["mlflow"]
    assert (tally.calls, tally.logged, tally.target) == (3, 2, "other")


def test_mlflow_adds_at_most_once_every_few_seconds(live: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    # MLflow's file store writes a file per key (~35 ms for dlprobe's ~45): a script logging every step would slow.
    monkeypatch.setattr(sinks, "MLFLOW_EVERY_S", 5.0)
    live({"dlprobe/main/uss_bytes": 1.0})
    steps: list[Any] = []

    def log_metrics(metrics: dict[str, float], **kwargs: Any) -> None:
        steps.append(kwargs["step"])

    for step in range(20):
        sinks.mlflow_add({"key": "loss", "value": 1.0, "step": step}, log_metrics, _ActiveRun)
    assert steps == [0]  # the first, then nothing within 5 s
    monkeypatch.setattr(sinks, "_mlflow_at", time.monotonic() - 6.0)
    sinks.mlflow_add({"key": "loss", "value": 1.0, "step": 20}, log_metrics, _ActiveRun)
    assert steps == [0, 20]


def test_tally_says_why_nothing_was_logged() -> None:
    assert sinks.Tally().state() == "not-imported"
    assert sinks.Tally(patched=True).state() == "no-logs"
    assert sinks.Tally(patched=True, calls=3, failures=3).state() == "failed"
    assert sinks.Tally(patched=True, calls=3, failures=1).state() == "no-numbers"


def _run_with(events: list[dict[str, Any]], asked: list[str]) -> Any:
    data = run([], [], events=events)
    data.meta["log_to"] = asked
    return data


def test_log_to_finding_says_what_went_where_and_why_not() -> None:
    events = [
        {"ev": "log_to", "pid": 1, "t": 1.0, "sink": "wandb", "state": "logged", "calls": 40, "logged": 38,
         "keys": 44, "target": "abc", "failures": 0},
        {"ev": "log_to", "pid": 1, "t": 1.0, "sink": "mlflow", "state": "not-imported", "calls": 0, "logged": 0,
         "keys": 0, "target": None, "failures": 0},
    ]  # fmt: skip
    (finding,) = find_log_to(_run_with(events, ["wandb", "mlflow"]))
    assert finding.severity == "info"
    assert finding.title == (
        "dlprobe's numbers in the script's own logs: W&B: 44 dlprobe/ keys on 38 of the script's 40 logs (run abc); "
        "MLflow: nothing, the script never imported mlflow"
    )
    assert finding.fix.startswith("none")


def test_log_to_finding_names_a_process_that_never_said() -> None:
    (finding,) = find_log_to(_run_with([], ["mlflow"]))
    assert "never reached its exit handlers" in finding.title
    assert finding.evidence["sinks"][0]["state"] == "unreported"
    assert not finding.fix.startswith("none")


def test_no_log_to_no_finding() -> None:
    assert find_log_to(_run_with([], [])) == []
