"""`dlprobe run` on real libraries (Lightning's Trainer.fit, HuggingFace datasets): what a user reads is right."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import SCRIPTS

MiB = 1024 * 1024
# Findings whose firing depends on how busy the machine is, not on the script: allowed at any severity here.
LOAD_DEPENDENT = {"input-bound", "worker-hotspots", "slow-start"}
# Rich's progress bar prints elapsed/remaining times and a rate; everything else must match byte for byte.
_PROGRESS_NUMBERS = re.compile(r"\d+:\d\d:\d\d|[\d.]+it/s")


def _plain(script: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "120"}  # the width run_dlprobe gives the script, so rich draws the same bar
    return subprocess.run(
        [sys.executable, str(SCRIPTS / script), *args], capture_output=True, text=True, env=env, timeout=120
    )


def _steady(stdout: str) -> str:
    return _PROGRESS_NUMBERS.sub("#", stdout)


def test_lightning_fit_with_progress_bar_reads_right(probe, tmp_path: Path):
    plain = _plain("lightning_fit_progress_bar.py", str(tmp_path / "plain"))
    result = probe("lightning_fit_progress_bar.py", str(tmp_path / "probed"))
    assert plain.returncode == 0, plain.stderr
    assert result.returncode == 0, result.stderr
    assert "fit finished: epochs 2 global_step 32" in result.stdout
    assert _steady(result.stdout) == _steady(plain.stdout)

    report = result.report
    # Lightning's sanity check iterates the validation loader first, so it is loader 0; the training loader is 1.
    val, train = report["loaders"]
    assert (val["dataset_len"], val["num_workers"], val["batches"]) == (64, 2, 2 + 2 * 4)
    assert (train["dataset_len"], train["num_workers"], train["batches"]) == (512, 2, 2 * 16)
    assert train["epochs"] == 2

    findings = report["findings"]
    # The progress bar's refresh thread is idle in a wait when the workers fork: worth a note, not a warning.
    assert all(f["severity"] == "info" for f in findings if f["code"] == "fork-hazard")
    loud = [(f["code"], f["severity"], f["title"]) for f in findings if f["severity"] in ("warning", "error")]
    assert [x for x in loud if x[0] not in LOAD_DEPENDENT] == []
    for hotspot in (f for f in findings if f["code"] == "worker-hotspots"):
        top = hotspot["evidence"]["top_functions"][0]["function"]
        # Forked workers inherit the parent's frames (<module>, Lightning's CombinedLoader): never name them.
        assert "combined_loader" not in top and "<module>" not in top, top
        assert top.startswith(("slow_feature", "Points.__getitem__")), top


def test_hf_datasets_mapped_arrow_is_not_called_allocation(probe, tmp_path: Path):
    result = probe("hf_arrow_mmap_forked.py", str(tmp_path / "table"))
    assert result.returncode == 0, result.stderr
    assert result.stdout == "samples 3000\n"
    report = result.report
    [loader] = report["loaders"]
    assert (loader["dataset_len"], loader["num_workers"], loader["start_method"]) == (4_000, 2, "fork")
    workers = [p for p in report["processes"] if p["role"] == "worker"]
    assert len(workers) == 2
    # The workers read the table through the mapped Arrow file: their file-backed pages grow, not their heap.
    assert max(w["pss_file"]["peak"] - w["pss_file"]["start"] for w in workers) >= 16 * MiB
    for finding in result.findings("cow-growth"):
        # Copy-on-write of the parent's heap may be real; mapped Arrow pages must never read as new allocations.
        assert "keep allocating" not in finding["title"], finding["title"]
        assert "copy-on-write" in finding["title"] and "gc.freeze()" in finding["fix"]


def test_hf_streaming_dataset_settings_are_read(probe):
    # to_iterable_dataset().with_format("torch"): reading its summary raised (int() of a method), so the loader's
    # settings were lost and input-bound advised num_workers=2 from a num_workers it had never read.
    result = probe("hf_streaming_loader.py")
    assert result.returncode == 0, result.stderr
    assert result.stdout == "batches 32\n"
    [loader] = result.report["loaders"]
    assert (loader["num_workers"], loader["dataset_type"]) == (4, "datasets.iterable_dataset.IterableDataset")
    failed = [f["evidence"].get("where") for f in result.findings("probe-degraded")]
    assert not [w for w in failed if str(w).startswith(("hooks.", "dataset_inspect."))], failed


def test_hf_row_of_another_length_is_named_by_its_index(probe):
    # The default collate says "... but got [7] at entry 0 and [8] at entry 5"; the batch [8..15] was known, so
    # the sample is index 13 (it was "One of the 8 indices ... raises", with a fix to look at dataset[None]).
    pytest.importorskip("datasets")
    result = probe("hf_odd_length_row.py", "13")
    assert result.returncode == 1
    [finding] = result.findings("bad-sample")
    ev = finding["evidence"]
    assert (ev["index"], ev["batch_indices"], ev["collate_entry"], ev["phase"]) == (
        13,
        list(range(8, 16)),
        5,
        "collate",
    )
    assert finding["title"].startswith("Sample index 13 does not collate") and "dataset[13]" in finding["fix"]
    assert "None" not in finding["title"] + finding["fix"]


def test_webdataset_with_fewer_shards_than_workers_is_a_loader_setting(probe, tmp_path):
    # webdataset's two-line "No samples found in dataset; perhaps you have fewer shards than workers.\nTurn off
    # using empty_check=False ..." was a bad-sample titled with its last line.
    pytest.importorskip("webdataset")
    result = probe("webdataset_fewer_shards.py", str(tmp_path / "shards"))
    assert result.returncode == 1
    assert not result.findings("bad-sample")
    [finding] = result.findings("too-few-shards")
    assert finding["evidence"]["error"].startswith("ValueError: No samples found in dataset; perhaps you have fewer")
    assert finding["evidence"]["error"].endswith("Turn off using empty_check=False in the WebDataset constructor.")
    assert "the 4 workers" in finding["title"] and "empty_check=False" in finding["fix"]
