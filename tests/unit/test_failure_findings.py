"""worker-hang, main-hang, worker-killed, bad-sample and shm-exhausted from fake runs."""

from __future__ import annotations

from typing import Any

from dlprobe.analysis import analyze
from dlprobe.analysis.evidence.finding import Finding
from dlprobe.analysis.findings.deaths.worker_deaths import WORKER_KILLED_CAUSES, find_worker_deaths
from dlprobe.analysis.findings.descriptors import explains as _fd_leak_explains
from dlprobe.analysis.findings.hangs import find_hangs
from dlprobe.analysis.run.fault_records import parse_fault
from dlprobe.analysis.run.model import Epoch, SystemSeries
from tests.unit import fakes
from tests.unit.test_stack_causes import native, py, worker

MiB = 1024 * 1024


def slot(pid: int, wid: int | None, phase: str, indices: list[int], index: int, t: float = 100.0, **kw) -> dict:
    role = "worker" if wid is not None else "main"
    base = {"pid": pid, "role": role, "loader_id": 0 if wid is not None else None, "worker_id": wid,
            "phase": phase, "kind": "map", "indices": indices, "index": index, "pos": indices.index(index),
            "t_fetch": t, "t_sample": t, "fetches": 7, "failed": None}  # fmt: skip
    return {**base, **kw}


def hang_record(processes: list[dict[str, Any]], awaited: int | None = 0, t: float = 110.0) -> dict[str, Any]:
    loop = {"state": "waiting-for-batch", "loader_id": 0, "awaited_worker": awaited, "awaited_task": 6, "since": 104.0}
    return {"number": 1, "t": t, "waited_s": t - 104.0, "loop": loop, "processes": processes, "on_hang": "stop"}


def stuck_worker() -> dict[str, Any]:
    proc = worker([native("read"), py("misbehave", "os.read(r, 1)")], wchan="anon_pipe_read", syscall="read",
                  fd_target="pipe:[9]")  # fmt: skip
    return {**proc, "pid": 11, "role": "worker", "loader_id": 0, "worker_id": 0, "stack_tool": "py-spy-native",
            "inflight": slot(11, 0, "getitem", [12, 13], 13)}  # fmt: skip


def idle_worker(pid: int = 12, wid: int = 1) -> dict[str, Any]:
    proc = worker([py("select", user=False)], wchan="poll_schedule_timeout", syscall="poll")
    return {**proc, "pid": pid, "role": "worker", "loader_id": 0, "worker_id": wid,
            "inflight": slot(pid, wid, "done", [18, 19], 19)}  # fmt: skip


def main_proc(phase: str = "idle") -> dict[str, Any]:
    frames = [py("_try_get_data", user=False), py("<module>", "for batch in loader:")]
    return {"pid": 10, "role": "main", "state": "S", "wchan": "poll_schedule_timeout", "syscall": "poll",
            "cpu_share": 0.0, "stack": [{"name": "MainThread", "frames": frames}],
            "inflight": slot(10, None, phase, [12, 13], 13)}  # fmt: skip


def test_worker_holding_the_awaited_batch_is_the_hang_with_its_frame_first():
    run = fakes.run([fakes.loader()], [])
    run.hangs = [hang_record([main_proc(), stuck_worker(), idle_worker()])]
    [finding] = find_hangs(run)
    ev = finding.evidence
    assert finding.code == "worker-hang" and finding.severity == "error"
    assert (ev["worker_id"], ev["index"], ev["cause"]) == (0, 13, "blocked-read")
    assert ev["stuck_frame"].startswith("misbehave (train.py:10)")
    assert ev["stack"][0] == ev["stuck_frame"] and ev["stack"][-1].startswith("_worker_loop")
    assert "<module>" not in " ".join(ev["user_frames"])  # the parent's frames at fork are not the worker's
    assert "stopped the run" in finding.detail


def test_idle_workers_make_it_a_main_hang():
    run = fakes.run([fakes.loader()], [])
    run.hangs = [hang_record([main_proc(), idle_worker(11, 0), idle_worker()])]
    [finding] = find_hangs(run)
    assert finding.code == "main-hang" and finding.evidence["cause"] == "queue-wait"
    assert "2 of 2 workers are idle" in finding.detail


def test_a_stall_that_recovers_is_a_warning():
    run = fakes.run([fakes.loader()], [], events=[{"ev": "batches", "loader": 0, "t": 120.0, "waits": [16.0]}])
    run.hangs = [hang_record([main_proc(), stuck_worker()])]
    [finding] = find_hangs(run)
    assert finding.severity == "warning" and finding.title.startswith("(recovered later)")


def test_a_batch_the_awaited_worker_already_made_is_lost_not_stuck_on_its_stale_sample():
    # The worker made batch 6 at 103.5 (its ring), then its next fetch raised at index 13 (the slot still says
    # getitem), and it waits idle for an index: the loop waits for batch 6, which never came.
    epoch = Epoch(0, 101.0, 0.1)
    recent = [[4, 102.0, 102.4, 102.5, 8], [6, 103.0, 103.4, 103.5, 12]]
    proc = {**stuck_worker(), "inflight": slot(11, 0, "getitem", [12, 13], 13, recent=recent)}
    run = fakes.run([fakes.loader(epochs=[epoch])], [])
    run.hangs = [hang_record([main_proc(), proc, idle_worker()])]
    [finding] = find_hangs(run)
    ev = finding.evidence
    assert finding.code == "worker-hang" and ev["cause"] == "batch-lost" and (ev["batch"], ev["pid"]) == (6, 11)
    assert ev["made_s_before"] == 6.5 and "index" not in ev and "stuck_frame" not in ev
    assert finding.title.startswith("Loader 0's batch 6 never reached the training loop: worker 0 (pid 11)")
    assert "Queue._feed" in finding.fix and ev["send_error"] is None  # its stderr holds why: the fix says where
    sent = {"ev": "batch_send_error", "t": 103.6, "pid": 11, "task": 6, "type": "TypeError",
            "message": "h5py objects cannot be pickled"}  # fmt: skip
    run.events.append(sent)
    [finding] = find_hangs(run)
    assert finding.evidence["send_error"] == "TypeError: h5py objects cannot be pickled"
    assert finding.title.endswith("batch-lost (TypeError: h5py objects cannot be pickled)")
    assert "Queue._feed" not in finding.fix and "picklable" in finding.fix
    # held by a pin-memory thread stuck outside its queues: main-hang's pin-thread says where, not lost
    pinned = main_proc()
    pinned["stack"] = [*pinned["stack"], {"name": "Thread-2 (_pin_memory_loop)", "frames": [
        native("cudaHostAlloc"), py("pin_memory", user=False), py("_pin_memory_loop", user=False)]}]  # fmt: skip
    run.hangs = [hang_record([pinned, {**proc, "inflight": {**proc["inflight"], "phase": "done"}}, idle_worker()])]
    assert [(f.code, f.evidence["cause"]) for f in find_hangs(run)] == [("main-hang", "pin-thread")]
    # a batch 6 of an earlier epoch is not this one: the worker still holds this epoch's
    run = fakes.run([fakes.loader(epochs=[Epoch(0, 90.0, 0.1), Epoch(1, 103.6, 0.1)])], [])
    run.hangs = [hang_record([main_proc(), proc, idle_worker()])]
    [finding] = find_hangs(run)
    assert finding.evidence["cause"] == "blocked-read" and finding.evidence["index"] == 13


def test_a_lost_batch_of_a_worker_at_its_descriptor_limit_is_explained_by_the_leak():
    lost = Finding("worker-hang", "error", "t", "d", "f", {"pid": 11, "cause": "batch-lost", "worker_id": 0}, 0)
    leak = Finding("fd-leak", "error", "t", "d", "f", {"leaking": [{"pid": 11}], "hit_limit_pids": [11]}, 0)
    assert _fd_leak_explains(leak, lost) == "the lost batch of loader 0 worker 0 (worker-hang)"
    other = Finding("worker-hang", "error", "t", "d", "f", {**lost.evidence, "pid": 12}, 0)
    assert _fd_leak_explains(leak, other) is None
    stuck = Finding("worker-hang", "error", "t", "d", "f", {**lost.evidence, "cause": "blocked-read"}, 0)
    assert _fd_leak_explains(leak, stuck) is None


def test_faulthandler_fallback_names_the_permission_fix():
    proc = {**stuck_worker(), "stack_tool": "faulthandler"}
    record = hang_record([main_proc(), proc])
    record["stack_problem"] = {"kind": "permission", "advice": "add --cap-add SYS_PTRACE"}
    run = fakes.run([fakes.loader()], [])
    run.hangs = [record]
    [finding] = find_hangs(run)
    assert "faulthandler" in finding.detail and "SYS_PTRACE" in finding.detail


def _error(message: str, cause: str | None = None) -> dict[str, Any]:
    return {"t": 105.0, "loader": 0, "epoch": 0, "type": "RuntimeError", "message": message, "cause": cause}


def _dead_run(error: dict[str, Any], system: SystemSeries | None = None, kernel: dict | None = None):
    lo = fakes.loader(batch_bytes=12 * MiB)
    lo.errors = [error]
    events = [{"ev": "epoch", "loader": 0, "epoch": 0, "t": 101.0, "workers": [{"worker_id": 0, "pid": 11}]}]
    proc = fakes.worker(11, 0, fakes.series([10 * MiB, 300 * MiB], [150 * MiB, 440 * MiB]))
    run = fakes.run([lo], [proc], system=system, events=events)
    run.inflight = {11: slot(11, 0, "getitem", [12, 13], 13)}
    run.kernel = kernel or {}
    return run


KILLED = "DataLoader worker (pid(s) 11) exited unexpectedly"


def test_sigkill_with_an_oom_count_is_oom_and_without_evidence_unknown():
    system = SystemSeries(cgroup_oom_kills=[0, 0, 1], cgroup_usage=[1, 2, 3], cgroup_limit=600 * MiB)
    run = _dead_run(_error(KILLED, "RuntimeError: DataLoader worker (pid 11) is killed by signal: Killed. "), system)
    [finding] = find_worker_deaths(run)
    ev = finding.evidence
    assert (finding.code, ev["cause"], ev["worker_id"], ev["index"]) == ("worker-killed", "oom", 0, 13)
    assert (ev["pids"], ev["signal"]) == ([11], "SIGKILL")  # the vocabulary `dlprobe triage` speaks too
    assert ev["cgroup_oom_kills"] == 1 and ev["last_rss_bytes"] == 440 * MiB and ev["peak_uss_bytes"] == 300 * MiB
    kernel = {"kills": [{"pid": 11, "line": "Memory cgroup out of memory: Killed process 11 (pt_data_worker)"}]}
    run = _dead_run(_error(KILLED, "RuntimeError: DataLoader worker (pid 11) is killed by signal: Killed. "),
                    kernel=kernel)  # fmt: skip
    assert find_worker_deaths(run)[0].evidence["kernel_log"].startswith("Memory cgroup")
    run = _dead_run(_error(KILLED, "RuntimeError: DataLoader worker (pid 11) is killed by signal: Killed. "))
    assert find_worker_deaths(run)[0].evidence["cause"] == "unknown"


def test_bus_error_is_a_killed_worker_and_shm_exhausted():
    cause = (
        "RuntimeError: DataLoader worker (pid 11) is killed by signal: Bus error. It is possible that "
        "dataloader's workers are out of shared memory. Please try to raise your shared memory limit."
    )
    system = SystemSeries(shm_used=[0, 60 * MiB], shm_total=64 * MiB)
    codes = {f.code: f for f in find_worker_deaths(_dead_run(_error(KILLED, cause), system))}
    killed = codes["worker-killed"].evidence
    assert (killed["cause"], killed["signal"], killed["pids"]) == ("bus", "SIGBUS", [11])
    assert set(WORKER_KILLED_CAUSES) >= {"oom", "bus", "unknown"} and "shm" not in WORKER_KILLED_CAUSES
    assert codes["shm-exhausted"].evidence["cause"] == "shm"
    shm = codes["shm-exhausted"].evidence
    assert shm["shm_total_bytes"] == 64 * MiB and shm["in_flight_estimate_bytes"] == 2 * 2 * 12 * MiB
    assert "--shm-size" in codes["shm-exhausted"].fix


def test_segfault_abort_and_exit_codes():
    for how, cause in (("Segmentation fault", "segfault"), ("Aborted", "abort")):
        text = f"RuntimeError: DataLoader worker (pid 11) is killed by signal: {how}. "
        [finding] = find_worker_deaths(_dead_run(_error(KILLED, text)))
        assert finding.evidence["cause"] == cause and "dataset[13]" in finding.fix
    text = ("RuntimeError: DataLoader worker (pid 11) exited unexpectedly with exit code 3. Details are lost due "
            "to multiprocessing. Rerunning with num_workers=0 may give better error trace.")  # fmt: skip
    [finding] = find_worker_deaths(_dead_run(_error(KILLED, text)))
    assert finding.evidence["cause"] == "exit" and finding.evidence["exit_code"] == 3


def test_death_raised_outside_next_comes_from_the_script_error():
    run = _dead_run(_error(KILLED))
    run.loaders[0].errors = []
    run.events.append({"ev": "script_error", "type": "RuntimeError",
                       "message": "DataLoader worker (pid 11) is killed by signal: Segmentation fault. "})  # fmt: skip
    findings = analyze(run)
    assert [f.code for f in findings][:2] == ["worker-killed", "script-error"]


CAUGHT = """Caught ValueError in DataLoader worker process 0.
Original Traceback (most recent call last):
  File "/venv/lib/python3.11/site-packages/torch/utils/data/_utils/worker.py", line 374, in _worker_loop
    data = fetcher.fetch(index)
  File "/home/u/train.py", line 67, in misbehave
    raise ValueError(f"corrupt record at index {FAULT_INDEX}")
ValueError: corrupt record at index 13
"""


def test_exception_is_a_bad_sample_from_the_first_failed_fetch():
    run = _dead_run({**_error(CAUGHT), "type": "ValueError"})
    failed = {"phase": "getitem", "kind": "map", "fetch": 4, "pos": 1, "index": 13, "indices": [12, 13]}
    run.inflight = {11: slot(11, 0, "done", [16, 17], 17, failed=failed)}  # the worker went on afterwards
    run.events.append({"ev": "sample_check", "loader": 0, "index": 13, "exception": "ValueError", "outcome": "fails",
                       "error_alone": "ValueError: corrupt record at index 13", "control_index": 12,
                       "control_loads": True})  # fmt: skip
    [finding] = find_worker_deaths(run)
    ev = finding.evidence
    assert finding.code == "bad-sample" and (ev["index"], ev["worker_id"], ev["exception"]) == (13, 0, "ValueError")
    assert ev["sample_alone"] == "fails" and "dataset[13] fails too" in finding.detail
    assert ev["error"] == "ValueError: corrupt record at index 13" and ev["raised_in"] == "misbehave (train.py:67)"


def test_shm_allocation_error_in_collate_is_shm_exhausted_without_an_index():
    message = CAUGHT.replace("ValueError", "RuntimeError").replace(
        "RuntimeError: corrupt record at index 13",
        "RuntimeError: unable to allocate shared memory(shm) for file </torch_1_2_0>: No space left on device (28)",
    )
    run = _dead_run(_error(message), SystemSeries(shm_used=[0], shm_total=8 * MiB))
    run.inflight = {11: slot(11, 0, "collate", list(range(16)), 15)}
    [finding] = find_worker_deaths(run)
    assert finding.code == "shm-exhausted" and finding.evidence["index"] is None
    assert 13 in finding.evidence["batch_indices"] and "8.0 MiB" in finding.title


def _caught(exception: str) -> str:
    """torch's re-raised worker error, ending in `exception` (one or more lines)."""
    return CAUGHT.replace("ValueError: corrupt record at index 13\n", exception + "\n").replace(
        "Caught ValueError", f"Caught {exception.split(':')[0]}"
    )


def _names_a_missing_index(finding) -> bool:
    text = finding.fix + finding.title + finding.detail
    return any(words in text for words in ("sample None", "[None]", "index None", "position None"))


def _collate_run(message: str, kind: str = "getitems", indices: list[int] | None = None):
    run = _dead_run(_error(_caught(message)))
    failed = {"phase": "collate", "kind": kind, "fetch": 4, "pos": None, "index": None,
              "indices": indices or list(range(8, 16))}  # fmt: skip
    run.inflight = {11: slot(11, 0, "done", [16, 17], 17, failed=failed)}  # the worker went on afterwards
    [finding] = find_worker_deaths(run)
    return finding


def test_a_collate_size_error_names_the_entry_unlike_entry_0_by_its_index():
    stack = "RuntimeError: stack expects each tensor to be equal size, but got [7] at entry 0 and [8] at entry 5"
    finding = _collate_run(stack)
    ev = finding.evidence
    assert finding.code == "bad-sample" and (ev["index"], ev["position_in_batch"], ev["entry_0_index"]) == (13, 5, 8)
    assert finding.title.startswith("Sample index 13 does not collate") and "size [8]" in finding.title
    assert "dataset[13]" in finding.fix and not _names_a_missing_index(finding)
    # entry 1: the message cannot tell entry 0 from entry 1, so both are named
    finding = _collate_run(stack.replace("entry 5", "entry 1"))
    assert finding.evidence["index"] == 9 and "compare it with dataset[8]" in finding.fix
    # a non-tensor entry (torch.stack's own message), and a stream position for an iterable dataset
    finding = _collate_run("TypeError: expected Tensor as element 3 in argument 0, but got NoneType", "iterable")
    assert finding.evidence["index"] == 11 and "stream position 11" in finding.title and "NoneType" in finding.title


def test_a_collate_error_naming_no_entry_names_the_batch_never_a_missing_index():
    finding = _collate_run("RuntimeError: each element in list of batch should be of equal size", "map")
    assert finding.evidence["index"] is None and "One of the 8 indices [8, 9, 10" in finding.title
    assert not _names_a_missing_index(finding) and "dataset[i] for i in [8" in finding.fix


def test_webdataset_without_shards_for_every_worker_is_a_loader_setting_quoted_whole():
    message = ("ValueError: No samples found in dataset; perhaps you have fewer shards than workers.\n"
               "Turn off using empty_check=False in the WebDataset constructor.")  # fmt: skip
    run = _dead_run(_error(_caught(message)))
    run.inflight = {11: {**slot(11, 0, "getitem", [0, 1, 2, 3], 0), "kind": "iterable"}}
    [finding] = find_worker_deaths(run)
    assert finding.code == "too-few-shards" and finding.evidence["error"] == message
    assert "index" not in finding.evidence and "empty_check=False" in finding.fix and "num_workers" in finding.fix
    assert "fewer shards than the 2 workers" in finding.title


def test_a_multi_line_exception_is_quoted_whole_with_its_first_line_in_the_title():
    message = "ValueError: record 13 is corrupt\nexpected 4 fields, got 3"
    run = _dead_run(_error(_caught(message)))
    run.events.append({"ev": "sample_check", "loader": 0, "index": 13, "outcome": "fails"})  # it fails alone
    [finding] = find_worker_deaths(run)
    assert finding.evidence["error"] == message
    assert "raises ValueError: record 13 is corrupt (loader" in finding.title


FAULT_TEXT = """Fatal Python error: Segmentation fault

Current thread 0x00007f3a (most recent call first):
  File "/usr/lib/python3.12/ctypes/__init__.py", line 519 in string_at
  File "/home/u/train.py", line 59 in misbehave
  File "/home/u/train.py", line 47 in __getitem__
  File "/venv/lib/python3.12/site-packages/torch/utils/data/_utils/worker.py", line 374 in _worker_loop

Extension modules: numpy._core._multiarray_umath, torch._C (total: 2)
"""
RESET = "ConnectionResetError: [Errno 104] Connection reset by peer"


def _died_without_torchs_word(faults: bool = True, kernel: dict | None = None):
    """Worker 11 died on index 13; the script's error (torch 2.15's, raised first) names no worker."""
    run = _dead_run(_error(KILLED), kernel=kernel)
    run.loaders[0].errors = []
    run.events.append({"ev": "script_error", "type": "ConnectionResetError", "message": RESET})
    if faults:
        run.faults = {11: parse_fault(11, FAULT_TEXT)}
    return run


def test_a_workers_fault_record_is_parsed_with_its_signal_and_frames():
    record = parse_fault(11, FAULT_TEXT)
    assert record is not None and record.signal == "Segmentation fault"
    assert record.frames[1] == "misbehave (/home/u/train.py:59)" and len(record.frames) == 4
    older = FAULT_TEXT.replace("Current thread 0x00007f3a", "Stack")  # all_threads=False, Python <= 3.11
    assert parse_fault(11, older).frames == record.frames
    assert parse_fault(12, "") is None and parse_fault(12, "garbage\n") is None


def test_a_death_torchs_error_does_not_name_comes_from_the_workers_fault_record():
    [finding] = find_worker_deaths(_died_without_torchs_word())
    ev = finding.evidence
    assert (finding.code, ev["cause"], ev["signal"], ev["pids"]) == ("worker-killed", "segfault", "SIGSEGV", [11])
    assert (ev["worker_id"], ev["index"], ev["seen_by"]) == (0, 13, ["fault-record"])
    assert ev["crash_frame"] == "misbehave (train.py:59)" and ev["message"] == RESET
    assert "did not say how the worker died" in finding.detail and "fatal-signal record" in finding.detail
    assert find_worker_deaths(_died_without_torchs_word(faults=False)) == []  # no evidence: no finding


def test_a_death_torchs_error_does_not_name_comes_from_the_kernels_oom_kill():
    kernel = {"kills": [{"pid": 11, "line": "Memory cgroup out of memory: Killed process 11 (pt_data_worker)"}]}
    [finding] = find_worker_deaths(_died_without_torchs_word(faults=False, kernel=kernel))
    ev = finding.evidence
    assert (ev["cause"], ev["signal"], ev["index"], ev["seen_by"]) == ("oom", "SIGKILL", 13, ["kernel-log"])
    other = {"kills": [{"pid": 99, "line": "Killed process 99 (python)"}]}  # not a worker of ours
    assert find_worker_deaths(_died_without_torchs_word(faults=False, kernel=other)) == []


def test_exited_unexpectedly_gets_its_signal_from_the_fault_record_and_one_finding_per_death():
    # Under forkserver torch only ever says "exited unexpectedly": the worker is not the training process's child.
    run = _dead_run(_error(KILLED))
    assert find_worker_deaths(run)[0].evidence["cause"] == "unknown"
    run.faults = {11: parse_fault(11, FAULT_TEXT)}
    [finding] = find_worker_deaths(run)
    assert (finding.evidence["cause"], finding.evidence["seen_by"]) == ("segfault", ["torch", "fault-record"])
    text = "RuntimeError: DataLoader worker (pid 11) is killed by signal: Segmentation fault. "
    run = _dead_run(_error(KILLED, text))
    run.faults = {11: parse_fault(11, FAULT_TEXT)}
    [finding] = find_worker_deaths(run)
    assert finding.evidence["seen_by"] == ["torch", "fault-record"]
    assert "did not say how" not in finding.detail


def starting_worker(pid: int, wid: int) -> dict[str, Any]:
    """A spawn worker still importing torch: no in-flight record yet, and no `_worker_loop` frame."""
    frames = [native("inflate", "/usr/lib/libz.so"), py("_find_and_load", user=False, file="<frozen importlib>")]
    return {"pid": pid, "role": "worker", "loader_id": 0, "worker_id": wid, "state": "R", "inflight": None,
            "stack": [{"name": "MainThread", "frames": frames}]}  # fmt: skip


def test_workers_that_have_not_started_are_named_starting_not_a_lost_batch():
    run = fakes.run([fakes.loader()], [])
    run.hangs = [hang_record([main_proc(), starting_worker(11, 0), starting_worker(12, 1)])]
    [finding] = find_hangs(run)
    assert finding.code == "main-hang" and finding.evidence["cause"] == "workers-starting"
    assert "none of the 2 workers has started" in finding.detail and "lost" not in finding.detail
    assert "--hang-timeout" in finding.fix
    # One worker in its loop (idle) is enough to say the workers started: then the batch is lost.
    run.hangs = [hang_record([main_proc(), starting_worker(11, 0), idle_worker()])]
    assert find_hangs(run)[0].evidence["cause"] == "queue-wait"


def test_an_iterable_datasets_record_is_blamed_only_when_its_workers_stream_replayed_alone_fails_there():
    run = _dead_run(_error(_caught("ValueError: record 250 has a negative length")))
    run.inflight = {11: {**slot(11, 0, "getitem", [62, 63], 62), "kind": "iterable"}}
    [finding] = find_worker_deaths(run)  # no replay recorded: no record blamed, what can be checked said
    assert finding.code == "worker-error" and "index" not in finding.evidence
    assert finding.evidence["stream_position"] == 62 and finding.evidence["sample_alone"] == "unverified"
    assert "the record was not checked" in finding.title and "blames no record" in finding.detail
    assert "worker 0 of 2" in finding.detail and "Replay worker 0 of 2's share alone" in finding.fix
    check = {
        "ev": "sample_check",
        "t": 105.0,
        "loader": 0,
        "worker_id": 0,
        "exception": "ValueError",
        "index": 62,
        "kind": "iterable",
        "outcome": "fails",
        "error_alone": "ValueError: record 250 has a negative length",
    }
    run.events.append(check)  # fmt: skip
    [finding] = find_worker_deaths(run)
    assert finding.code == "bad-sample" and finding.evidence["stream_position"] == 62
    assert "the 62 records before it load" in finding.detail and "islice(iter(dataset), 62, 63)" in finding.fix
    run.events[-1] = {**check, "worker_id": 1}  # another worker's stream at the same position is not this one's
    assert find_worker_deaths(run)[0].code == "worker-error"
    run.events[-1] = {**check, "outcome": "loads", "error_alone": None}
    [finding] = find_worker_deaths(run)
    assert finding.code == "worker-error" and "replayed alone: not the record" in finding.title
    run.events[-1] = {**check, "outcome": "fails-any", "control_index": 7, "control_error": "ValueError: x"}
    [finding] = find_worker_deaths(run)
    assert finding.code == "worker-error" and "at position 7 too" in finding.title
