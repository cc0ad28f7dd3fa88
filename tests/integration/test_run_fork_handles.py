"""`dlprobe run` names what a dataset's objects hand its forked workers: a file or database opened in `__init__`."""

from __future__ import annotations

import pytest


@pytest.mark.parametrize(
    ("kind", "attribute", "library", "owner"),
    [("h5py", "self.h5", "h5py", "h5py._hl.files.File"), ("lmdb", "self.env", "lmdb", "lmdb.Environment")],
)
def test_a_handle_opened_before_fork_is_named_with_its_attribute_library_and_fix(probe, kind, attribute, library,
                                                                                  owner):  # fmt: skip
    result = probe("handle_opened_before_fork.py", kind)
    [finding] = result.findings("shared-handle")
    evidence = finding["evidence"]
    assert evidence["attributes"][0] == attribute and evidence["libraries"][0] == library
    assert evidence["handles"][0]["owner"] == owner
    assert f"`{attribute}`" in finding["title"] and "before its 4 workers forked" in finding["title"]
    assert f"`if {attribute} is None:`" in finding["fix"] and "worker_init_fn" in finding["fix"]
    # It fails at random: when a worker's error came of it, the finding says so and warns; otherwise it informs.
    # (raised to an error where it explains the worker's error: the verdict leads with it)
    if result.returncode != 0:
        assert finding["severity"] in ("warning", "error") and evidence["error_type"], finding["title"]
        if finding["severity"] == "error":
            assert result.report["verdict"]["code"] == "shared-handle", result.report["verdict"]
    else:
        assert finding["severity"] == "info"


@pytest.mark.parametrize("kind", ["h5py", "lmdb"])
def test_a_handle_opened_in_each_worker_is_not_shared(probe, kind):
    result = probe("handle_opened_before_fork.py", kind, "per-worker")
    assert result.returncode == 0, result.stderr
    assert result.findings("shared-handle") == []


def test_a_tar_gz_archive_opened_before_fork_blames_no_sample_even_where_the_check_fails_too(probe, tmp_path):
    # The check's copy is forked from the training process, whose archive the workers left mid-stream: the index
    # fails there too (KeyError: member not found, zlib.error), which says nothing of the sample.
    result = probe("tar_gz_opened_before_fork.py", str(tmp_path))
    [finding] = result.findings("shared-handle")
    assert finding["evidence"]["attributes"][0] == "self.tar" and finding["evidence"]["libraries"][0] == "tarfile"
    assert result.findings("bad-sample") == []
    if result.returncode != 0:
        assert result.report["verdict"]["code"] == "shared-handle", result.report["verdict"]
        for error in result.findings("worker-error"):
            assert error["explained_by"] == "shared-handle" and error["evidence"]["sample_alone"] != "fails"


def test_a_tar_gz_archive_opened_in_each_worker_is_not_shared(probe, tmp_path):
    result = probe("tar_gz_opened_before_fork.py", str(tmp_path), "per-worker")
    assert result.returncode == 0, result.stderr
    assert result.findings("shared-handle") == [] and result.findings("worker-error") == []


def test_an_lmdb_environment_read_in_the_parent_before_fork_is_the_verdict_not_a_sample(probe):
    pytest.importorskip("lmdb", reason="lmdb is not installed")
    result = probe("handle_opened_before_fork.py", "lmdb", "read-first")
    [finding] = result.findings("shared-handle")
    assert finding["evidence"]["attributes"][0] == "self.env" and finding["evidence"]["libraries"][0] == "lmdb"
    assert result.findings("bad-sample") == []
    if result.returncode != 0:  # MDB_READERS_FULL in a worker, whatever index it was on
        assert result.report["verdict"]["code"] == "shared-handle", result.report["verdict"]


def test_an_lmdb_environment_opened_in_each_worker_gets_no_warning(probe):
    pytest.importorskip("lmdb", reason="lmdb is not installed")
    twin = probe("handle_opened_before_fork.py", "lmdb", "read-first", "per-worker")
    assert twin.returncode == 0, twin.stderr
    assert twin.findings("shared-handle") == [] and twin.findings("worker-error") == []
