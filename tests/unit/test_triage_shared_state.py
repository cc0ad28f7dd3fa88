"""`dlprobe triage` of worker errors that are state the workers share, never a bad sample: the errors a handle opened
before the fork raises (lmdb, a zip or tar.gz archive, a requests.Session's TLS connection) and one error at several
indices. The logs are the stderr of real runs of tests/scripts/ (an LMDB environment read in the parent, as
handle_opened_before_fork.py's `lmdb read-first` does; zip_opened_before_fork.py with and without `stored`,
tar_gz_opened_before_fork.py, handle_opened_before_fork.py (h5py), requests_session_before_fork.py,
socket_client_before_fork.py twice), saved as they were printed."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from dlprobe.torch_text import fork_shared_error
from dlprobe.triage.logscan import scan_stream
from dlprobe.triage.machine import KernelLog, MachineFacts
from dlprobe.triage.rank import diagnose, reproduce

LOGS = Path(__file__).parents[1] / "fixtures" / "logs"
NOW = 1_700_000_000.0


def diagnosed(name: str):
    scan = scan_stream(io.BytesIO((LOGS / name).read_bytes()), name)
    machine = MachineFacts(True, KernelLog("dmesg", kills=[]), {"total": 1 << 30, "used": 0}, None, (1024, 4096),
                           16 << 30)  # fmt: skip
    findings = diagnose(scan, machine, NOW)
    return scan, findings


@pytest.mark.parametrize(
    ("log", "library", "exception", "words"),
    [
        ("fork_lmdb_readers_full.log", "lmdb", "lmdb.ReadersFullError", "MDB_READERS_FULL"),
        ("fork_zip_deflated_zlib.log", "zipfile", "zlib.error", "Error -3 while decompressing"),
        ("fork_zip_stored_bad_crc.log", "zipfile", "zipfile.BadZipFile", "Bad CRC-32"),
        ("fork_requests_session_tls.log", "ssl", "requests.exceptions.SSLError", "BAD_RECORD_MAC"),
        ("fork_requests_session_tls_direct.log", "ssl", "requests.exceptions.SSLError", "BAD_RECORD_MAC"),
        ("fork_tar_gz_zlib.log", "tarfile", "zlib.error", "Error -3 while decompressing"),
        ("fork_h5py_file_object.log", "h5py", "OSError", "Can't synchronously read data"),
    ],
)
def test_an_error_a_handle_shared_across_the_fork_raises_is_named_so_and_never_a_bad_sample(log, library, exception,
                                                                                          words):  # fmt: skip
    scan, findings = diagnosed(log)
    first = findings[0]
    assert (first.code, first.evidence["cause"], first.evidence["library"]) == (
        "shared-handle", "fork-shared-handle", library)  # fmt: skip
    assert first.evidence["exception"] == exception and words in first.evidence["message"]
    assert "not a bad sample" in first.title and "opened before the workers forked" in first.title
    assert "index" not in first.evidence  # never a bad index
    assert [f.code for f in findings if f.code == "bad-sample"] == []
    # the alternative the same words can have, and the one measurement that tells them apart
    assert f"The other cause of these words is {first.evidence['alternative']}" in first.detail
    assert "dlprobe run" in first.evidence["confirm"]
    assert "loads the failing index again alone" in first.evidence["confirm"]
    assert "worker_init_fn" in first.fix and "`__init__`" in first.fix
    assert "names the dataset's object that the workers share" in reproduce(scan, findings)["note"]


@pytest.mark.parametrize("log", ["fork_requests_session_tls.log", "fork_requests_session_tls_direct.log"])
def test_a_chained_worker_exception_is_read_from_the_traceback_that_went_through_the_workers_loop(log):
    # requests raises its SSLError from urllib3's: torch prints "Original <the first cause>" (or "Original Traceback"
    # ending in ssl's own), then the chain; the worker raised the last one, requests'
    _, findings = diagnosed(log)
    assert findings[0].evidence["frame"].endswith("requests_session_before_fork.py:62 in __getitem__")
    assert findings[0].evidence["exception"] == "requests.exceptions.SSLError"


def test_one_error_at_several_indices_is_shared_state_and_one_at_one_index_stays_the_samples():
    _, findings = diagnosed("fork_socket_two_runs_alike.log")  # two runs' stderr in one job log
    first = findings[0]
    assert (first.code, first.evidence["cause"]) == ("worker-error", "shared-state")
    assert first.evidence["occurrences"] == 2 and "several indices failing alike" in first.detail
    assert "`reply for sample 16, asked for 4`; `reply for sample 17, asked for 6`" in first.detail
    assert [f.code for f in findings if f.code == "bad-sample"] == []
    # the same error once: the log alone cannot tell, the sample stays the first suspect
    _, once = diagnosed("fork_socket_one_run.log")
    assert once[0].code == "bad-sample"


@pytest.mark.parametrize(
    "text",
    [
        "lmdb.BadRslotError: mdb_txn_begin: MDB_BAD_RSLOT: Invalid reuse of reader locktable slot",
        "lmdb.Error: /data/train.lmdb: mdb_txn_begin: Invalid argument",
        "zipfile.BadZipFile: Bad magic number for file header",
        "zipfile.BadZipFile: Truncated file header",
        "requests.exceptions.ConnectionError: ('Connection aborted.', RemoteDisconnected('Remote end closed "
        "connection without response'))",
        "zlib.error: Error -3 while decompressing data: invalid stored block lengths\n/usr/lib/python3.11/zipfile.py",
    ],
)
def test_the_libraries_other_words_for_a_shared_handle_are_known(text):
    assert fork_shared_error(text) is not None


@pytest.mark.parametrize(
    "text",
    [
        "zlib.error: Error -3 while decompressing data: incorrect header check\n/home/u/gzip_reader.py",  # no zipfile
        "ValueError: corrupt record at index 13",
        "OSError: [Errno 2] No such file or directory: '/data/x.bin'",
    ],
)
def test_errors_of_one_sample_or_of_other_readers_are_not_taken_for_a_shared_handle(text):
    assert fork_shared_error(text) is None
