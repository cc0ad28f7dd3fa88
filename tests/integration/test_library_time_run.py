"""A dataset whose loading time is pandas' (a DataFrame row per sample) is told apart from the dataset's own code:
worker-hotspots names pandas and the user's line that calls it; the same data as numpy arrays names no library."""

from __future__ import annotations

import pytest

pytest.importorskip("pandas")


def test_per_row_pandas_indexing_is_named_as_pandas_time_not_the_datasets_own(probe):
    result = probe("pandas_rows.py", "80000", options=["--quiet"])
    assert result.returncode == 0, result.stderr[-2000:]
    [finding] = result.findings("worker-hotspots")
    inside = finding["evidence"]["inside_library"]
    assert inside is not None and inside["library"] == "pandas" and inside["share"] >= 0.5, finding["evidence"]
    assert "pandas_rows.py:" in inside["called_from"]
    assert "inside pandas" in finding["fix"] and "to_numpy()" in finding["fix"]
    assert "it is your dataset's own code" not in finding["fix"]


def test_the_same_columns_as_numpy_arrays_name_no_library(probe):
    result = probe("pandas_rows.py", "80000", "numpy", options=["--quiet"])
    assert result.returncode == 0, result.stderr[-2000:]
    for finding in result.findings("worker-hotspots"):
        # the script's own file is pandas_rows.py: a fix may name it ("Rows.__getitem__ (pandas_rows.py)", on a busy
        # machine where the workers wait for the hand-over), never the library
        assert finding["evidence"]["inside_library"] is None, finding
        assert "inside pandas" not in finding["fix"] and "to_numpy()" not in finding["fix"], finding["fix"]
