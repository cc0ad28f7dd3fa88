"""What dlprobe keeps of the script's stderr without sitting between them: the end of what the run wrote to a stderr
file, read back after the run; nothing from a terminal or a pipe, and the report says why."""

from __future__ import annotations

import os
import pty
from pathlib import Path

import pytest

from dlprobe.analysis.run.stderr_log import read_launcher_failures, stderr_not_kept, stderr_tail
from dlprobe.rundir.schema import STDERR_FILE, STDERR_KEPT_BYTES
from dlprobe.supervisor.stderr_copy import keep_stderr, stderr_origin
from tests.unit.test_job_findings import CHILD_FAILED


def _fd(path: Path, flags: int) -> int:
    return os.open(path, flags | os.O_CREAT, 0o600)


@pytest.mark.parametrize("append", [False, True])
def test_a_stderr_file_keeps_only_what_the_run_wrote_to_it(tmp_path: Path, append: bool) -> None:
    log = tmp_path / "slurm.log"
    log.write_bytes(b"the job's earlier steps\n")  # before the run: not the run's output
    fd = _fd(log, os.O_WRONLY | (os.O_APPEND if append else 0))
    os.lseek(fd, 0, os.SEEK_END)
    origin = stderr_origin(fd)
    os.write(fd, b"Traceback (most recent call last):\nValueError: boom\n")
    run = tmp_path / "run"
    run.mkdir()
    kept = keep_stderr(origin, run, fd)
    os.close(fd)
    assert kept == {"kind": "file", "written_bytes": 52, "kept_bytes": 52, "problem": None}
    assert (run / STDERR_FILE).read_bytes() == b"Traceback (most recent call last):\nValueError: boom\n"
    assert stderr_tail(run) == "Traceback (most recent call last):\nValueError: boom\n"
    assert stderr_not_kept(kept) is None


def test_a_long_stderr_file_keeps_its_head_and_its_end(tmp_path: Path) -> None:
    log = tmp_path / "ci.log"
    fd = _fd(log, os.O_WRONLY)
    origin = stderr_origin(fd)
    os.write(fd, b"the first error\n" + b"x" * (2 * STDERR_KEPT_BYTES) + CHILD_FAILED.encode())
    run = tmp_path / "run"
    run.mkdir()
    kept = keep_stderr(origin, run, fd)
    os.close(fd)
    assert kept["written_bytes"] == 2 * STDERR_KEPT_BYTES + len(CHILD_FAILED) + 16
    assert kept["kept_bytes"] <= STDERR_KEPT_BYTES
    copy = (run / STDERR_FILE).read_bytes()
    assert len(copy) == kept["kept_bytes"] and copy.startswith(b"the first error\n")
    assert b"bytes of stderr left out here]\n" in copy and copy.endswith(CHILD_FAILED.encode())
    assert [f["rank"] for f in read_launcher_failures(run)] == [0, 1]


def test_a_terminal_or_a_pipe_is_left_to_the_script_and_the_report_says_so(tmp_path: Path) -> None:
    parent, child = pty.openpty()
    read_end, write_end = os.pipe()
    try:
        assert stderr_origin(child).kind == "terminal"
        assert stderr_origin(write_end).kind == "pipe"
        assert stderr_origin(os.open(os.devnull, os.O_WRONLY)).kind == "other"  # a character device, not a tty
        kept = keep_stderr(stderr_origin(child), tmp_path, child)
    finally:
        for fd in (parent, child, read_end, write_end):
            os.close(fd)
    assert kept == {"kind": "terminal", "written_bytes": None, "kept_bytes": 0, "problem": None}
    assert not (tmp_path / STDERR_FILE).exists()
    said = stderr_not_kept(kept)
    assert said is not None and "a terminal" in said and "does not copy" in said


def test_a_stderr_file_replaced_during_the_run_is_not_read_as_the_runs(tmp_path: Path) -> None:
    first = tmp_path / "a.log"
    fd = _fd(first, os.O_WRONLY)
    origin = stderr_origin(fd)
    os.close(fd)
    fd = _fd(tmp_path / "b.log", os.O_WRONLY)  # another file on the same descriptor number
    kept = keep_stderr(origin, tmp_path, fd)
    os.close(fd)
    assert kept["kept_bytes"] == 0 and kept["problem"] == "stderr is no longer the file it was at the start"
    said = stderr_not_kept(kept)
    assert said is not None and "could not read back" in said


def test_a_run_directory_that_cannot_take_the_copy_raises_for_the_supervisor_to_record(tmp_path: Path) -> None:
    fd = _fd(tmp_path / "err.log", os.O_WRONLY)
    origin = stderr_origin(fd)
    os.write(fd, b"boom\n")
    with pytest.raises(OSError):
        keep_stderr(origin, tmp_path / "gone", fd)
    os.close(fd)


def test_a_run_directory_from_before_keeps_reading_its_whole_stderr_log(tmp_path: Path) -> None:
    assert stderr_not_kept(None) is None  # no "stderr" in result.json: its stderr.log is what it is
