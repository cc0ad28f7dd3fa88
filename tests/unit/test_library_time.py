"""worker-hotspots where the dataset's time is a library's (pandas' per-row indexing): the fix names the library
and the user's call into it, not "your dataset's own code"; the script's own code keeps the old advice."""

from __future__ import annotations

import pytest

from dlprobe.analysis.findings import hotspots as hotspot_findings
from dlprobe.analysis.measures import fetch_stacks
from dlprobe.analysis.measures.fetch_stacks import library_of, library_time
from dlprobe.analysis.run.stackfile import StackCount

FETCH = "_MapDatasetFetcher.fetch (torch/utils/data/_utils/fetch.py:54)"
GETITEM = "Rows.__getitem__ (train.py:15)"
ILOC = "_iLocIndexer.__getitem__ (pandas/core/indexing.py:1191)"
SERIES = "Series.__getitem__ (pandas/core/series.py:1121)"
TENSOR = "<listcomp> (train.py:16)"


@pytest.fixture(autouse=True)
def pandas_installed(monkeypatch):
    monkeypatch.setattr(fetch_stacks, "_installed", lambda: frozenset({"pandas", "numpy"}))


def stack(*frames: str, count: int = 1) -> StackCount:
    return StackCount(pid=11, frames=["_worker_loop (torch/utils/data/_utils/worker.py:309)", FETCH, *frames],
                      count=count)  # fmt: skip


def test_a_library_frame_is_named_by_its_package_and_the_scripts_own_is_not():
    assert library_of(ILOC) == "pandas"
    assert library_of(GETITEM) is None and library_of(FETCH) is None
    assert library_of("Thing.load (mypkg/data.py:3)") is None  # a package of the script's, not installed


def test_most_of_the_time_inside_pandas_names_pandas_and_the_call_into_it():
    samples = [stack(GETITEM, ILOC, count=12), stack(GETITEM, SERIES, count=8), stack(GETITEM, TENSOR, count=6)]
    inside = library_time(samples, 26)
    assert inside == {"library": "pandas", "share": 0.769, "samples": 20, "called_from": GETITEM}
    assert "pandas" in hotspot_findings._library_fix(inside) and "to_numpy()" in hotspot_findings._library_fix(inside)


def test_the_scripts_own_code_or_a_minor_library_share_names_no_library():
    assert library_time([stack(GETITEM, TENSOR, count=20), stack(GETITEM, ILOC, count=5)], 25) is None
    assert library_time([stack(GETITEM, count=20)], 20) is None
