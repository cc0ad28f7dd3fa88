"""fd-leak: a process whose open descriptors climb through the run, its limit, and who hit `Too many open files`."""

from __future__ import annotations

import os
import resource

from dlprobe.analysis.findings.descriptors import find_fd_leak, leak_cause, target_kind
from dlprobe.analysis.run.model import Epoch, ProcessRecord, Series
from dlprobe.system import procfds
from dlprobe.torch_text import KEPT_BATCHES_FIX
from tests.unit.fakes import loader, run, worker


def _worker(pid: int, wid: int, counts: list[int], nofile: int | None = 1024) -> ProcessRecord:
    n = len(counts)
    proc = worker(pid, wid, Series(t=[100.0 + i for i in range(n)], rss=[1] * n, uss=[1] * n, pss=[1] * n))
    proc.series.fds = list(counts)
    proc.nofile = nofile
    return proc


def test_a_climbing_count_is_a_leak_with_its_rate_time_to_the_limit_and_targets():
    leaking = _worker(11, 0, [20, 60, 100, 140, 180])
    leaking.fd_targets = (103.0, 140, [("/data/shard_*.npy", 120), ("pipe", 8)])
    [finding] = find_fd_leak(run([loader()], [leaking, _worker(12, 1, [20, 21, 20, 22, 21])]))
    assert finding.code == "fd-leak" and finding.severity == "warning"
    assert finding.title.startswith("Loader 0 worker 0 (pid 11) leaks file descriptors: 20 -> 180 open over 4 s")
    assert "(+40/s)" in finding.title and "reaches its limit of 1,024 in ~21 s" in finding.title
    assert "/data/shard_*.npy (120), pipe (8)" in finding.detail
    [row] = finding.evidence["leaking"]
    assert row["pid"] == 11 and row["fds_per_s"] == 40 and row["seconds_to_limit"] == 21.1


def test_files_opened_once_at_start_and_kept_are_no_leak():
    opened_at_start = _worker(11, 0, [20, 300, 301, 300, 302])
    small = _worker(12, 1, [10, 20, 30, 40, 50])  # climbing, but by fewer than FD_LEAK_MIN
    assert find_fd_leak(run([loader()], [opened_at_start, small])) == []


def test_too_many_open_files_is_the_process_that_reached_its_limit():
    leaking = _worker(11, 0, [13, 90, 170, 255], nofile=320)
    main = _worker(10, 0, [30, 31, 33, 31], nofile=20_000)
    main.role, main.loader_id, main.worker_id = "main", None, None
    data = run([loader()], [main, leaking, _worker(12, 1, [15, 15, 16, 15], nofile=320)])
    data.gone[11] = 104.0  # ended between two readings, climbing 80 a second: at its limit
    data.stderr_tail = "Traceback...\nOSError: [Errno 24] Too many open files\nEOFError"
    [finding] = find_fd_leak(data)
    assert finding.severity == "error" and finding.evidence["hit_limit_pids"] == [11]
    assert "loader 0 worker 0 (pid 11) reached its limit of 320 open files" in finding.title
    assert "`OSError: [Errno 24] Too many open files`: it came from loader 0 worker 0 (pid 11)" in finding.detail
    assert "The main process held 30 to 33 throughout: the leak is not its." in finding.detail


def test_the_reader_counts_this_process_and_folds_numbers_in_targets():
    before = procfds.fd_count(os.getpid())
    with open(os.devnull) as _a, open(os.devnull) as _b:
        assert procfds.fd_count(os.getpid()) == before + 2
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    assert procfds.nofile_limit(os.getpid()) == (None if soft == resource.RLIM_INFINITY else soft)
    assert procfds.target_pattern("/tmp/tmpa8b/00012/shard_3.npy") == "/tmp/tmpa8b/*/shard_*.npy"
    assert procfds.target_pattern("socket:[991]") == "socket"


def test_the_leak_names_the_files_and_the_frame_that_opens_them():
    leaking = _worker(11, 0, [20, 60, 100, 140, 180])
    leaking.fd_targets = (103.0, 140, [("/data/shard-*.tar", 120), ("pipe", 8)])
    lo = loader()
    lo.errors = [{"type": "OSError", "message": "Caught OSError in DataLoader worker process 0.\nOriginal Traceback "
                  '(most recent call last):\n  File "/home/u/train.py", line 28, in __getitem__\n    archive = '
                  'tarfile.open(path)\n  File "/usr/lib/python3.11/tarfile.py", line 1794, in open\n'
                  "OSError: [Errno 24] Too many open files: '/data/shard-023.tar'"}]  # fmt: skip
    [finding] = find_fd_leak(run([lo], [leaking]))
    assert finding.title.endswith("most point to /data/shard-*.tar")
    assert finding.evidence["opened_at"] == "__getitem__ (train.py:28)"
    assert "opening one more at __getitem__ (train.py:28)" in finding.detail
    assert finding.fix.startswith("At __getitem__ (train.py:28): close what")


def test_a_leaking_worker_read_at_its_limit_reached_it_though_no_error_line_was_kept():
    leaking = _worker(11, 0, [12, 40, 80, 127], nofile=128)  # worker_init_fn set 128; stderr was a pipe: not kept
    [finding] = find_fd_leak(run([loader()], [leaking]))
    assert finding.severity == "error" and finding.evidence["hit_limit_pids"] == [11]
    assert "reached its limit of 128 open files (RLIMIT_NOFILE)" in finding.title
    assert "Too many open files` was raised" not in finding.title and "torch's EOFError" in finding.detail


def test_two_readings_are_enough_for_a_worker_that_climbed_to_its_limit_between_them():
    fast = _worker(11, 0, [76, 127], nofile=128)  # it lived a second: read twice, 51 more (under FD_LEAK_MIN)
    [finding] = find_fd_leak(run([loader()], [fast]))
    assert finding.evidence["hit_limit_pids"] == [11] and finding.severity == "error"
    assert find_fd_leak(run([loader()], [_worker(11, 0, [76, 127], nofile=20_000)])) == []  # far from it: too few


def test_a_worker_read_once_before_it_died_climbed_from_what_it_inherited():
    # A busy machine's sampler found the worker 0.8 s after it began and read it once (102 of 128) before it died of
    # `Too many open files`: it began with its parent's descriptors, so one reading is a climb (a clean-clone CI run).
    main = _main(10, [6, 6, 16], nofile=20_000)
    main.series.t = [99.0, 99.5, 100.5]
    late = _worker(11, 0, [102], nofile=128)
    late.series.t, late.ppid, late.started = [100.3], 10, 99.5
    data = run([loader()], [main, late])
    data.gone[11] = 100.55
    data.stderr_tail = "OSError: [Errno 24] Too many open files: '/data/shard-023.tar'"
    [finding] = find_fd_leak(data)
    assert finding.severity == "error" and finding.evidence["hit_limit_pids"] == [11]
    assert "leaks file descriptors: 6 (its parent's, read before the fork) -> 102 open over 0.8 s" in finding.title
    [row] = finding.evidence["leaking"]
    assert row["fds_first_inherited"] is True
    # without the error the one reading proves nothing; nor for a worker that was read from its start
    data.stderr_tail = ""
    assert find_fd_leak(data) == []
    data.stderr_tail, late.started = "OSError: [Errno 24] Too many open files", 100.3
    assert find_fd_leak(data) == []


def test_a_worker_whose_own_traceback_says_too_many_open_files_reached_its_limit_wherever_it_was_read():
    # Read once at 72 of 128, 0.8 s after it began, gone 0.3 s later: at the rate read it would hold 94 as it ended,
    # but torch's "Caught OSError in DataLoader worker process 0" says this worker was refused (1 run in 9, idle).
    main = _main(10, [6, 6, 17], nofile=20_000)
    main.series.t = [99.0, 99.3, 100.6]
    late = _worker(11, 0, [72], nofile=128)
    late.series.t, late.ppid, late.started = [100.3], 10, 99.5
    lo = loader()
    lo.errors = [{"type": "OSError", "message": "Caught OSError in DataLoader worker process 0.\nOriginal Traceback "
                  '(most recent call last):\n  File "/home/u/train.py", line 28, in __getitem__\n'
                  "OSError: [Errno 24] Too many open files: '/data/shard-023.tar'"}]  # fmt: skip
    data = run([lo], [main, late])
    data.gone[11] = 100.6
    [finding] = find_fd_leak(data)
    assert finding.severity == "error" and finding.evidence["hit_limit_pids"] == [11]
    assert "6 (its parent's, read before the fork) -> 72 open over 0.8 s" in finding.title
    # another worker's error, or another error of this one, says nothing of this worker's limit
    lo.errors[0]["message"] = lo.errors[0]["message"].replace("worker process 0", "worker process 1")
    assert find_fd_leak(data) == []
    lo.errors[0]["message"] = "Caught OSError in DataLoader worker process 0.\nOSError: [Errno 5] Input/output error"
    assert find_fd_leak(data) == []


def test_a_leak_too_quick_for_its_targets_names_the_file_the_refused_open_named():
    data = run([loader()], [_worker(11, 0, [76, 127], nofile=128)])
    data.stderr_tail = "OSError: [Errno 24] Too many open files: '/data/shard-023.tar'"
    [finding] = find_fd_leak(data)
    assert finding.title.endswith("it was opening /data/shard-023.tar when refused")


def test_a_count_that_stopped_at_its_limit_is_a_leak_that_reached_it():
    # read every tick from its start: the climb, then the readings at the limit until the worker died of it
    stopped = _worker(11, 0, [30, 69, 86, 119, 127, 127, 127, 127], nofile=128)
    [finding] = find_fd_leak(run([loader()], [stopped]))
    assert finding.evidence["hit_limit_pids"] == [11] and finding.severity == "error"
    settled = _worker(11, 0, [30, 69, 86, 119, 127, 127, 127, 127], nofile=20_000)
    assert find_fd_leak(run([loader()], [settled])) == []  # far below its limit: files kept open, then no more
    [row] = find_fd_leak(run([loader()], [stopped]))[0].evidence["leaking"]
    assert row["seconds"] == 4 and row["fds_per_s"] == 24.25  # 30 -> 127 over its first 4 s, not its 7 s of readings


def test_a_count_still_rising_as_it_neared_its_limit_has_not_settled():
    # 6 (its parent's) -> 54 -> 92 -> 120 of 128: its later half rose 28 of 114, less than a quarter, because the
    # limit was near; it died of EMFILE before the next reading (a busy run read it three times)
    main = _main(10, [6, 6], nofile=20_000)
    main.series.t = [99.0, 99.4]
    rising = _worker(11, 0, [54, 92, 120], nofile=128)
    rising.series.t, rising.ppid, rising.started = [100.4, 100.7, 100.9], 10, 99.5
    [finding] = find_fd_leak(run([loader()], [main, rising]))
    assert finding.evidence["hit_limit_pids"] == [11] and finding.severity == "error"
    rising.series.fds = [54, 120, 120]  # it stopped rising below its ceiling: settled
    assert find_fd_leak(run([loader()], [main, rising])) == []


def test_a_process_that_holds_most_of_its_limit_and_stays_there_has_settled():
    # 950 shard files opened at start and kept, under the common soft limit of 1024: near it, not at it
    holder = _worker(11, 0, [20, 940, 950, 950, 950, 950], nofile=1024)
    assert find_fd_leak(run([loader()], [holder])) == []


def _main(pid: int, counts: list[int], nofile: int | None = 256) -> ProcessRecord:
    proc = _worker(pid, 0, counts, nofile)
    proc.role, proc.loader_id, proc.worker_id, proc.comm = "main", None, None, "python"
    return proc


MAIN_OUT = (
    "RuntimeError: Too many open files. Communication with the workers is no longer possible. Please increase the "
    "limit using `ulimit -n` in the shell or change the sharing strategy by calling "
    "`torch.multiprocessing.set_sharing_strategy('file_system')` at the beginning of your code"
)


def test_the_kinds_of_targets_are_told_apart():
    assert target_kind("/dev/shm/torch_*_*_* (deleted)") == "torch-shm"
    assert target_kind("/data/shard_*.npy") == "file" and target_kind("/tmp/x (deleted)") == "file"
    assert target_kind("socket") == "socket" and target_kind("pipe") == "pipe"
    assert target_kind("/dev/null") == "other" and target_kind("anon_inode:[eventfd]") == "other"
    assert target_kind("/dev/shm/my_segment") == "other"  # not torch's: no cause here names it


def test_torch_storages_name_kept_batches_only_in_the_main_process():
    kinds = {"torch-shm": 590, "pipe": 13, "file": 4}
    assert leak_cause("main", kinds, 607) == "kept-batches"
    assert leak_cause("worker", kinds, 607) == "unknown"  # a worker keeps what it sends: not the loop's batches
    assert leak_cause("worker", {"file": 290, "pipe": 8}, 300) == "dataset-files"
    assert leak_cause("main", {"socket": 200, "file": 20}, 230) == "sockets"
    assert leak_cause("main", {"torch-shm": 100, "file": 90, "socket": 80}, 300) == "unknown"  # none holds half
    assert leak_cause("main", {}, None) == "unknown"


def test_a_main_process_holding_torch_storages_is_the_loop_keeping_batches_with_the_dataset_ruled_out():
    """The real report's numbers: 590 of 607 descriptors of the main process were torch's /dev/shm storages, the
    workers flat, and torch's `Too many open files. Communication with the workers ...`."""
    main = _main(1, [17, 200, 400, 607], nofile=608)
    main.fd_targets = (103.0, 607, [("/dev/shm/torch_*_*_* (deleted)", 590), ("pipe", 13), ("/dev/null", 2),
                                    ("/home/u/log_*.txt", 2)])  # fmt: skip
    epochs = [Epoch(0, 100.0, 0.1, batches=295)]
    lo = loader(epochs=epochs)
    lo.batch_info = {"bytes": 576, "leaves": [{"path": "batch[0]"}, {"path": "batch[1]"}]}
    data = run([lo], [main, _worker(21, 0, [20, 21, 20, 21], 608), _worker(22, 1, [20, 20, 20, 20], 608)])
    data.stderr_tail = f"Traceback...\n{MAIN_OUT}\n"
    [finding] = find_fd_leak(data)
    evidence = finding.evidence
    assert evidence["cause"] == "kept-batches" and evidence["holder"] == "main"
    assert evidence["by_kind"] == {"torch-shm": 590, "pipe": 13, "other": 2, "file": 2}
    assert "590 of 607 are torch shared-memory storages: the loop keeps the batches it receives" in finding.title
    assert evidence["fds_per_batch"] == 2.0 and evidence["tensors_per_batch"] == 2  # 590 over 295 batches
    assert "It rose by 2 per batch received (590 over 295 batches of 2 tensors each)" in finding.detail
    assert (
        "Ruled out: files the dataset opens: 2 of 607 are regular files (too few to be the climb), and the workers' "
        "descriptors are flat (worker 0: 20 to 21, worker 1: 20): none are files the dataset keeps open"
    ) in finding.detail
    assert "sockets: 0 of 607; pipes: 13 of 607" in finding.detail
    assert "torch raises it in the main process when it cannot take the next batch's descriptor" in finding.detail
    assert "not the cause" not in finding.detail
    assert finding.fix == KEPT_BATCHES_FIX and "batch.clone()" in finding.fix


def test_a_worker_holding_data_files_keeps_the_datasets_advice_with_the_kept_batches_ruled_out():
    leaking = _worker(11, 0, [13, 90, 170, 255], nofile=320)
    leaking.fd_targets = (102.0, 170, [("/data/shard_*.npy", 150), ("pipe", 8), ("/dev/shm/torch_*_*_* (deleted)", 2)])
    main = _main(10, [30, 31, 33, 31], nofile=20_000)
    data = run([loader()], [main, leaking])
    [finding] = find_fd_leak(data)
    assert finding.evidence["cause"] == "dataset-files" and finding.evidence["holder"] == "worker"
    assert finding.title.endswith("most point to /data/shard_*.npy")
    assert "the loop keeping batches: the main process held 30 to 33" in finding.detail
    assert "torch shared-memory storages: 2 of 170" in finding.detail
    assert "`__getitem__`" in finding.fix


def test_sockets_name_a_client_left_open():
    leaking = _worker(11, 0, [13, 90, 170, 255], nofile=1024)
    leaking.fd_targets = (102.0, 170, [("socket", 150), ("pipe", 8)])
    [finding] = find_fd_leak(run([loader()], [leaking]))
    assert finding.evidence["cause"] == "sockets" and "150 of 170 are sockets" in finding.title
    assert "one client per worker" in finding.fix
