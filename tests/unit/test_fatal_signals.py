"""A worker's fatal-signal record: written as it dies of a signal, gone after a clean exit, and the worker's own
faulthandler (the user's) left alone; the process dies of the same signal either way."""

from __future__ import annotations

import ctypes
import faulthandler
import multiprocessing
import signal
from pathlib import Path

from dlprobe.analysis.run.fault_records import read_fault_records
from dlprobe.in_training import fatal_signals
from dlprobe.rundir.files import ReadProblems
from dlprobe.rundir.schema import FAULTS_DIR, fault_record_name

_fork = multiprocessing.get_context("fork")


def _worker(run_dir: str) -> bool:
    faulthandler.disable()  # pytest's own is on in this process (and so in its forks); a script's worker has none
    return fatal_signals.record_in_worker(run_dir)


def _crash(run_dir: str) -> None:
    _worker(run_dir)
    ctypes.string_at(0)


def _abort(run_dir: str) -> None:
    _worker(run_dir)
    signal.raise_signal(signal.SIGABRT)


def _clean(run_dir: str) -> None:
    if not _worker(run_dir):
        raise SystemExit(3)


def _users_own(run_dir: str) -> None:
    faulthandler.disable()
    faulthandler.enable()  # the user's, to stderr
    if fatal_signals.record_in_worker(run_dir):
        raise SystemExit(3)


def _run(target, run_dir: Path) -> multiprocessing.process.BaseProcess:
    proc = _fork.Process(target=target, args=(str(run_dir),))
    proc.start()
    proc.join(60)
    return proc


def test_a_crash_is_recorded_and_the_worker_still_dies_of_its_signal(tmp_path):
    crashed, aborted = _run(_crash, tmp_path), _run(_abort, tmp_path)
    assert crashed.exitcode == -signal.SIGSEGV and aborted.exitcode == -signal.SIGABRT
    records = read_fault_records(tmp_path, ReadProblems())
    assert records[crashed.pid].signal == "Segmentation fault" and records[aborted.pid].signal == "Aborted"
    assert any(frame.startswith("_crash (") for frame in records[crashed.pid].frames)


def test_a_clean_exit_leaves_no_record_and_the_users_faulthandler_is_kept(tmp_path):
    clean = _run(_clean, tmp_path)
    assert clean.exitcode == 0
    assert not (tmp_path / FAULTS_DIR / fault_record_name(clean.pid)).exists()
    users = _run(_users_own, tmp_path)
    assert users.exitcode == 0
    assert not (tmp_path / FAULTS_DIR / fault_record_name(users.pid)).exists()
