"""The in-process API (dlprobe.watch) and the pytest marker, on real DataLoaders with real workers."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import DataLoader, TensorDataset

import dlprobe
from dlprobe.check.config import tomllib  # tomllib, or tomli on Python 3.10
from tests.conftest import SCRIPTS

ROOT = Path(__file__).resolve().parents[2]


def test_watch_returns_the_same_report_model_for_an_in_process_loader(tmp_path):
    loader = DataLoader(TensorDataset(torch.from_numpy(np.arange(4000))), batch_size=100, num_workers=2)
    with dlprobe.watch(out=tmp_path / "run") as probe:
        total = sum(int(batch.sum()) for (batch,) in loader)
    assert total == sum(range(4000))  # the loop's result is untouched
    report = probe.report
    assert report["schema_version"] == 4 and report["exit_code"] == 0
    [entry] = report["loaders"]
    assert entry["batches"] == 40 and entry["num_workers"] == 2
    workers = [p for p in report["processes"] if p["role"] == "worker"]
    assert {w["pid"] for w in workers} == {w["pid"] for w in entry["workers"]}
    assert all(w["uss"]["peak"] for w in workers)  # read from smaps_rollup by the watch's sampler thread
    assert next(p for p in report["processes"] if p["role"] == "main")["pid"] == os.getpid()
    assert (tmp_path / "run" / "report.json").exists()
    assert [r.status for r in probe.check(fail_on=["cow-growth"])] == ["pass", "pass"]
    # outside the block the patched DataLoader records nothing
    assert sum(1 for _ in loader) == 40 and probe.report["loaders"][0]["batches"] == 40


PLUGIN_TESTS = """
import pytest
from torch.utils.data import DataLoader

from leaky_list_dataset import RecordsDataset
from numpy_dataset import ArrayDataset


def consume(dataset, batches=400):
    loader = DataLoader(dataset, batch_size=1000, shuffle=True, num_workers=2)
    for n, _ in enumerate(loader, start=1):
        if n == batches:
            break


@pytest.mark.dlprobe(max_worker_uss_growth="64 MiB")
def test_leaky():
    consume(RecordsDataset(600_000))


@pytest.mark.dlprobe(max_worker_uss_growth="64 MiB")
def test_clean():
    consume(ArrayDataset(600_000))


@pytest.mark.dlprobe(max_worker_uss="1 parsec")
def test_bad_limit():
    pass


def test_unmarked():
    assert True
"""


def test_pytest_marker_fails_the_test_with_a_leaky_loader(tmp_path):
    (tmp_path / "test_loaders.py").write_text(PLUGIN_TESTS)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), str(SCRIPTS)]),
        "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",  # load exactly this checkout's plugin, by name
    }
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "dlprobe.pytest_plugin", "-q", "-p", "no:cacheprovider", "-rf",
         "test_loaders.py"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120, env=env,
    )  # fmt: skip
    out = proc.stdout
    assert proc.returncode == 1, out + proc.stderr
    assert "2 failed, 2 passed" in out
    assert "FAILED test_loaders.py::test_leaky" in out and "FAILED test_loaders.py::test_clean" not in out
    assert "max_worker_uss_growth: per-worker USS growth was" in out
    assert "fail_on cow-growth:" in out  # the default finding codes apply to a marked test too
    assert "FAILED test_loaders.py::test_bad_limit" in out and "'1 parsec' is not a size" in out


def test_plugin_is_registered_as_a_pytest11_entry_point():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["entry-points"]["pytest11"] == {"dlprobe": "dlprobe.pytest_plugin"}
