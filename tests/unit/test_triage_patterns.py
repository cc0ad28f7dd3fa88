"""The triage pattern matcher and log scanner on hand-written snippets of PyTorch's exact messages."""

from __future__ import annotations

import gzip
import io
import signal

import pytest

from dlprobe.analysis.findings.deaths.worker_deaths import WORKER_KILLED_CAUSES
from dlprobe.analysis.measures.tracebacks import signal_cause, signal_name
from dlprobe.triage.logscan import MAX_SEGMENT, scan_stream
from dlprobe.triage.patterns import PATTERNS, exception_line, has_keyword, match_line

# One sample per pattern, as PyTorch (or the shell/kernel) prints it; S1's trailing space is torch's own.
SAMPLES = {
    "S1": "RuntimeError: DataLoader worker (pid 7847) is killed by signal: Killed. ",
    "S2": "RuntimeError: DataLoader worker (pid 7850) exited unexpectedly with exit code 3. Details are lost due to "
    "multiprocessing. Rerunning with num_workers=0 may give better error trace.",
    "S3": "RuntimeError: DataLoader worker (pid(s) 7847, 7848) exited unexpectedly",
    "S4": "RuntimeError: DataLoader timed out after 3 seconds",
    "S5": "RuntimeError: Pin memory thread exited unexpectedly",
    "S6": "RuntimeError: Too many open files. Communication with the workers is no longer possible. Please increase "
    "the limit using `ulimit -n` in the shell or change the sharing strategy by calling "
    "`torch.multiprocessing.set_sharing_strategy('file_system')` at the beginning of your code",
    "S7": "RuntimeError: received 0 items of ancdata",
    "S8": "ERROR: Unexpected bus error encountered in worker. This might be caused by insufficient shared memory "
    "(shm).",
    "S9": "OSError: Caught OSError in DataLoader worker process 3.",
    "S10": "RuntimeError: Caught RuntimeError in pin memory thread for device 0.",
    "S11": "UserWarning: This DataLoader will create 4 worker processes in total. Our suggested max number of worker "
    "in current system is 2, which is smaller than what this DataLoader is going to create.",
    "S12": "UserWarning: Length of IterableDataset <__main__.DS object at 0x7f> was reported to be 100(when accessing "
    "len(dataloader)), but 120 samples have been fetched. For multiprocessing data-loading, this could be caused",
    "S14": "TypeError: default_collate: batch must contain tensors, numpy arrays, numbers, dicts or lists; found "
    "<class 'NoneType'>",
    "S15": "RuntimeError: each element in list of batch should be of equal size",
    "S16": "RuntimeError: stack expects each tensor to be equal size, but got [3, 64, 64] at entry 0 and [3, 64, 60] "
    "at entry 5",
    "S17": "RuntimeError: Trying to resize storage that is not resizable",
    "S18": "RuntimeError: Cannot re-initialize CUDA in forked subprocess. To use CUDA with multiprocessing, you must "
    "use the 'spawn' start method",
    "S19": "RuntimeError: unable to allocate shared memory(shm) for file </torch_8030_3247194276_0>: No space left on "
    "device (28)",
    "S20": "RuntimeError: unable to write to file </torch_1394_2747491098>: No space left on device (28)",
    "S21": "ValueError: prefetch_factor option could only be specified in multiprocessing.let num_workers > 0 to "
    "enable multiprocessing, otherwise set prefetch_factor to None.",
    "errno24": "OSError: [Errno 24] Too many open files: '/data/img_001.jpg'",
    "none-sample": "AttributeError: 'NoneType' object has no attribute 'numel'",
    "pickle": "AttributeError: Can't pickle local object 'main.<locals>.<lambda>'",
    "kernel-oom": "[ 895.79] Memory cgroup out of memory: Killed process 6565 (pt_data_worker) total-vm:1043728kB",
    "main-killed": "Killed",
    "tokenizers-fork": "huggingface/tokenizers: The current process just got forked, after parallelism has already "
    "been used. Disabling parallelism to avoid deadlocks...",
    "fork-threads": "DeprecationWarning: This process (pid=4242) is multi-threaded, use of fork() may lead to "
    "deadlocks in the child.",
    "native-abort": "terminate called after throwing an instance of 'std::runtime_error'",
}


def test_every_pattern_has_a_sample():
    assert {p.id for p in PATTERNS} == set(SAMPLES)


@pytest.mark.parametrize("pid", sorted(SAMPLES))
def test_each_sample_matches_its_pattern(pid):
    assert pid in {m.id for m in match_line(SAMPLES[pid])}


@pytest.mark.parametrize("pid", sorted(SAMPLES))
def test_each_sample_is_found_in_a_traceback_of_a_scanned_log(pid):
    # Inside a traceback every line is read; outside one, only lines that pass the keyword gate.
    log = f'Traceback (most recent call last):\n  File "/torch/utils/data/x.py", line 1, in f\n{SAMPLES[pid]}\n'
    scan = scan_stream(io.BytesIO(log.encode()), "t")
    assert pid in scan.counts


@pytest.mark.parametrize("pid", ["S1", "S2", "S3", "S4", "S8", "S9", "S11", "S12", "S19", "S6", "kernel-oom",
                                 "main-killed", "tokenizers-fork", "fork-threads", "native-abort"])  # fmt: skip
def test_messages_printed_outside_a_traceback_pass_the_keyword_gate(pid):
    assert has_keyword(SAMPLES[pid].encode())
    scan = scan_stream(io.BytesIO(b"step 1 loss 0.3\n" + SAMPLES[pid].encode() + b"\nstep 2\n"), "t")
    assert scan.counts.get(pid) == 1


def test_python_3_13s_wording_of_an_unpicklable_lambda_is_a_pickle_error():
    # 2.13.0/3.13 forkserver (compat matrix): pickle says "get" where 3.10-3.12 say "pickle"
    line = "AttributeError: Can't get local object 'S.__init__.<locals>.<lambda>'"
    assert "pickle" in {m.id for m in match_line(line)}


def test_fields_of_the_worker_death_messages():
    [s1] = match_line(SAMPLES["S1"])
    assert s1.fields == {"pid": 7847, "signal": "Killed", "signal_number": 9}
    [s2] = match_line(SAMPLES["S2"])
    assert s2.fields == {"pid": 7850, "exit_code": 3}
    [s3] = match_line(SAMPLES["S3"])
    assert s3.fields == {"pids": [7847, 7848]}
    bus = "RuntimeError: DataLoader worker (pid 325) is killed by signal: Bus error. It is possible that dataloader's "
    [s1_bus] = match_line(bus + "workers are out of shared memory. Please try to raise your shared memory limit.")
    assert s1_bus.fields["signal"] == "Bus error" and s1_bus.fields["signal_number"] == 7
    [s1_segv] = match_line("RuntimeError: DataLoader worker (pid 26471) is killed by signal: Segmentation fault. ")
    assert s1_segv.fields["signal_number"] == 11
    assert match_line(SAMPLES["S4"])[0].fields == {"timeout": 3.0}
    assert match_line("RuntimeError: DataLoader timed out after 2.5 seconds")[0].fields == {"timeout": 2.5}
    assert match_line(SAMPLES["S9"])[0].fields == {"exception": "OSError", "worker_kind": "process", "worker_id": 3}
    assert match_line("KeyError: Caught KeyError in DataLoader worker thread 1.")[0].fields["worker_kind"] == "thread"
    assert match_line(SAMPLES["S19"])[0].fields["error"] == "No space left on device (28)"


@pytest.mark.parametrize(
    ("text", "name", "cause"),
    [("Killed", "SIGKILL", "oom"), ("Bus error", "SIGBUS", "bus"), ("Segmentation fault", "SIGSEGV", "segfault"),
     ("Aborted", "SIGABRT", "abort"), ("Floating point exception", "SIGFPE", "fpe"),
     ("Illegal instruction", "SIGILL", "sigill"), ("Terminated", "SIGTERM", "signal")],
)  # fmt: skip
def test_signal_in_the_message_maps_to_the_shared_worker_killed_vocabulary(text, name, cause):
    """triage and run read torch's signal text through one table, so `worker-killed` says the same in both."""
    [s1] = match_line(f"RuntimeError: DataLoader worker (pid 5) is killed by signal: {text}. ")
    assert signal.Signals(s1.fields["signal_number"]).name == signal_name(text) == name
    assert signal_cause(text) == cause and cause in WORKER_KILLED_CAUSES


def test_near_misses_do_not_match():
    for text in (
        "DataLoader worker count: 4",
        "Killed 3 zombie processes",
        "epoch 3: Killed it, loss 0.1",
        "ERROR: something else encountered in worker.",
        "training finished; no DataLoader timed out",
    ):
        assert match_line(text) == [], text


def test_exception_line_recognises_python_errors_not_log_levels():
    assert exception_line("ValueError: corrupt record at index 13") == ("ValueError", "corrupt record at index 13")
    assert exception_line("PIL.UnidentifiedImageError: cannot identify image file 'x.jpg'")[0] == (
        "PIL.UnidentifiedImageError"
    )
    assert exception_line("KeyboardInterrupt") == ("KeyboardInterrupt", "")
    assert exception_line("ERROR: Unexpected segmentation fault encountered in worker.") is None
    assert exception_line("epoch 3 loss 0.1") is None


# The bytes torch's worker signal handler writes, NUL included, then the main process's report.
SEGFAULT_LOG = (
    b"ERROR: Unexpected segmentation fault encountered in worker.\n\x00Traceback (most recent call last):\n"
    b'  File "/home/u/train.py", line 86, in <module>\n    time.sleep(0.05)\n'
    b'  File "/venv/lib/python3.11/site-packages/torch/utils/data/_utils/signal_handling.py", line 73, in handler\n'
    b"    _error_if_any_worker_fails()\n"
    b"RuntimeError: DataLoader worker (pid 6271) is killed by signal: Segmentation fault. \n"
)

WORKER_EXCEPTION_LOG = b"""Traceback (most recent call last):
  File "/home/u/train.py", line 84, in <module>
    for batch in loader:
  File "/venv/lib/python3.11/site-packages/torch/utils/data/dataloader.py", line 725, in __next__
    data = self._next_data()
  File "/venv/lib/python3.11/site-packages/torch/_utils.py", line 794, in reraise
    raise exception
OSError: Caught OSError in DataLoader worker process 1.
Original Traceback (most recent call last):
  File "/venv/lib/python3.11/site-packages/torch/utils/data/_utils/worker.py", line 374, in _worker_loop
    data = fetcher.fetch(index)  # type: ignore[possibly-undefined]
  File "/home/u/data.py", line 40, in __getitem__
    img = Image.open(path).convert("RGB")
  File "/venv/lib/python3.11/site-packages/PIL/ImageFile.py", line 311, in load
    raise OSError(msg)
OSError: image file is truncated (1 bytes not processed)

"""


def test_nul_byte_after_the_worker_message_is_a_line_break_not_junk():
    scan = scan_stream(io.BytesIO(SEGFAULT_LOG), "t")
    assert scan.nul_bytes == 1 and not scan.binary
    assert [(m.id, m.line) for m in scan.matches] == [("S8", 1), ("S1", 7)]
    assert scan.script == "/home/u/train.py"
    assert scan.lines == 7


def test_a_worker_crash_line_interleaved_into_a_traceback_does_not_hide_its_exception():
    # The worker's message (NUL-terminated) lands between the main process's frames and its exception line.
    log = (
        b'Traceback (most recent call last):\n  File "/home/u/train.py", line 86, in <module>\n'
        b"ERROR: Unexpected segmentation fault encountered in worker.\n"
        b"\x00RuntimeError: DataLoader worker (pid 6271) is killed by signal: Segmentation fault. \n"
    )
    scan = scan_stream(io.BytesIO(log), "t")
    [block] = scan.tracebacks
    assert block.exception == "RuntimeError"
    assert block.message == "DataLoader worker (pid 6271) is killed by signal: Segmentation fault."
    assert block.end_line == 4


def test_worker_exception_keeps_the_original_error_and_the_users_frame():
    scan = scan_stream(io.BytesIO(WORKER_EXCEPTION_LOG), "t")
    [wrapper] = scan.of("S9")
    assert wrapper.line == 8
    assert wrapper.fields["worker_id"] == 1
    assert wrapper.fields["original_exception"] == "OSError"
    assert wrapper.fields["original_message"] == "image file is truncated (1 bytes not processed)"
    assert wrapper.fields["frame"] == "/home/u/data.py:40 in __getitem__"
    assert scan.tracebacks[-1].original and scan.tracebacks[-1].through_loader


def test_rank_prefixes_ansi_colours_and_carriage_returns_are_stripped():
    log = (
        b"epoch 1:  40%|####      | 4/10\repoch 1:  50%|#####     | 5/10\r"
        b"[rank1]: Traceback (most recent call last):\n"
        b'[rank1]:   File "/home/u/train.py", line 9, in <module>\n'
        b"[rank1]: \x1b[31mRuntimeError: DataLoader timed out after 30 seconds\x1b[0m\r\n"
    )
    scan = scan_stream(io.BytesIO(log), "t")
    [timeout] = scan.of("S4")
    assert timeout.fields == {"timeout": 30.0, "rank": 1}  # the prefix is gone from the text, its rank kept
    assert timeout.line == 3
    assert scan.script == "/home/u/train.py"


def test_gzip_logs_are_read_transparently():
    from dlprobe.triage.logscan import open_log

    stream, compressed = open_log(io.BufferedReader(io.BytesIO(gzip.compress(SEGFAULT_LOG))))  # type: ignore[arg-type]
    scan = scan_stream(stream, "t")
    assert compressed and scan.counts == {"S8": 1, "S1": 1}


def test_a_torn_gzip_keeps_what_was_read_and_says_why():
    import random

    from dlprobe.triage.logscan import open_log

    data = gzip.compress(SEGFAULT_LOG + random.Random(1).randbytes(100_000))[:-2000]
    stream, _ = open_log(io.BufferedReader(io.BytesIO(data)))  # type: ignore[arg-type]
    scan = scan_stream(stream, "t")
    assert scan.read_error
    assert scan.counts == {"S8": 1, "S1": 1}


def test_an_endless_line_is_cut_and_the_message_after_it_still_found():
    log = b"x" * (3 * MAX_SEGMENT) + b"\n" + SAMPLES["S4"].encode() + b"\n"
    scan = scan_stream(io.BytesIO(log), "t")
    assert scan.truncated_lines == 1
    assert [(m.id, m.line) for m in scan.matches] == [("S4", 2)]


def test_messages_split_across_read_chunks_are_found(monkeypatch):
    from dlprobe.triage import logscan

    monkeypatch.setattr(logscan, "CHUNK_SIZE", 7)
    scan = scan_stream(io.BytesIO(WORKER_EXCEPTION_LOG), "t")
    assert scan.of("S9")[0].fields["original_message"].startswith("image file is truncated")


def test_binary_input_is_flagged():
    import random

    junk = bytes(random.Random(0).randrange(256) for _ in range(100_000))
    scan = scan_stream(io.BytesIO(junk), "t")
    assert scan.binary and scan.matches == []
    assert not scan_stream(io.BytesIO("héllo wörld ✓ 100%|██████|\n".encode() * 100), "t").binary


def test_matches_kept_are_bounded_but_the_first_of_each_kind_stays():
    from dlprobe.triage.logscan import MAX_RECENT_MATCHES

    log = SAMPLES["S11"].encode() + b"\n" + (SAMPLES["S4"].encode() + b"\n") * 5000
    scan = scan_stream(io.BytesIO(log), "t")
    assert scan.counts == {"S11": 1, "S4": 5000}
    # the first of each kind, then the most recent ones
    assert len(scan.matches) == 2 + MAX_RECENT_MATCHES
    assert [(m.id, m.line) for m in scan.matches[:3]] == [("S11", 1), ("S4", 2), ("S4", 5001 - MAX_RECENT_MATCHES + 1)]
    assert scan.matches[-1].line == 5001
