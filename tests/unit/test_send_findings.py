"""batch-dropped: the batches a worker's queue recorded it could not send, and what they explain."""

from __future__ import annotations

from dlprobe.analysis.evidence.finding import Finding
from dlprobe.analysis.findings.dropped_batch import find_dropped_batches
from dlprobe.analysis.report.verdict import judge
from tests.unit import fakes


def _dropped(pid: int, worker: int, task: int | None, message: str, t: float, kind: str = "TypeError") -> dict:
    return {"ev": "batch_send_error", "t": t, "pid": pid, "loader": 0, "worker_id": worker, "task": task,
            "type": kind, "message": message}  # fmt: skip


def test_batches_a_workers_queue_dropped_are_one_finding_led_by_the_first_error():
    events = [_dropped(12, 1, 1, "h5py objects cannot be pickled", 101.0),
              _dropped(11, 0, 0, "h5py objects cannot be pickled", 100.5),
              _dropped(11, 0, 2, "cannot pickle '_thread.lock' object", 101.5)]  # fmt: skip
    [finding] = find_dropped_batches(fakes.run([fakes.loader()], [], events=events))
    assert finding.code == "batch-dropped" and finding.severity == "error" and finding.loader_id == 0
    assert finding.title == (
        "Loader 0's workers could not send 3 batches to the training loop (TypeError: h5py objects cannot be "
        "pickled): batches 0, 1, 2 dropped"
    )
    ev = finding.evidence
    assert (ev["batch_numbers"], ev["worker_ids"], ev["pids"], ev["count"]) == ([0, 1, 2], [0, 1], [11, 12], 3)
    assert ev["other_errors"] == ["TypeError: cannot pickle '_thread.lock' object"]
    assert "picklable" in finding.fix
    assert find_dropped_batches(fakes.run([fakes.loader()], [], events=[])) == []


def test_the_dropped_batch_explains_its_hang_and_timeout_and_a_leak_at_the_limit_explains_it():
    events = [_dropped(11, 0, 25, "[Errno 24] Too many open files", 100.5, "OSError")]
    [dropped] = find_dropped_batches(fakes.run([fakes.loader()], [], events=events))
    assert "out of file descriptors" in dropped.fix
    hang = Finding("worker-hang", "error", "h", "d", "f", {"pid": 11, "cause": "batch-lost", "batch": 25}, 0)
    timeout = Finding("script-error", "error", "s", "d", "f", {"type": "RuntimeError",
                      "message": "DataLoader timed out after 30 seconds"})  # fmt: skip
    leak = Finding("fd-leak", "error", "l", "d", "f", {"leaking": [{"pid": 11}], "hit_limit_pids": [11]}, 0)
    ordered, verdict = judge([dropped, hang, timeout, leak])
    assert verdict is not None and verdict["code"] == "fd-leak"
    explained = {f.code: f.explained_by for f in ordered}
    assert explained == {"fd-leak": None, "batch-dropped": "fd-leak", "worker-hang": "batch-dropped",
                         "script-error": "batch-dropped"}  # fmt: skip
    # a hang on another worker's batch, in another loader, is not this drop's
    other = Finding("worker-hang", "error", "h", "d", "f", {"pid": 12, "cause": "batch-lost", "batch": 3}, 0)
    elsewhere = Finding("worker-hang", "error", "h", "d", "f", {"pid": 11, "cause": "batch-lost", "batch": 25}, 1)
    ordered, _ = judge([dropped, other, elsewhere])
    assert [f.explained_by for f in ordered if f.code == "worker-hang"] == [None, None]


def test_only_torchs_batches_are_recorded_and_a_closed_pipe_is_no_dropped_batch(monkeypatch):
    from dlprobe.in_training import send_errors

    emitted: list[dict] = []

    class Log:
        def emit(self, ev: str, **fields: object) -> None:
            emitted.append({"ev": ev, **fields})

    monkeypatch.setattr(send_errors, "get_log", lambda: Log())
    send_errors._record(0, 1, TypeError("h5py objects cannot be pickled"), (3, {"frames": None}))
    send_errors._record(0, 1, TypeError("cannot pickle"), {"a log record": 1})  # a queue of the user's
    send_errors._record(0, 1, BrokenPipeError(32, "Broken pipe"), (4, None))  # the training process went away
    assert [(e["task"], e["type"]) for e in emitted] == [(3, "TypeError")]


def test_a_lost_batch_whose_queue_named_another_error_is_not_the_descriptors():
    from dlprobe.analysis.findings.descriptors import explains as _fd_leak_explains

    leak = Finding("fd-leak", "error", "l", "d", "f", {"leaking": [{"pid": 11}], "hit_limit_pids": [11]}, 0)
    hang = Finding("worker-hang", "error", "h", "d", "f", {"pid": 11, "cause": "batch-lost", "batch": 2,
                   "send_error": "TypeError: h5py objects cannot be pickled"}, 0)  # fmt: skip
    assert _fd_leak_explains(leak, hang) is None
    hang.evidence["send_error"] = "OSError: [Errno 24] Too many open files"
    assert _fd_leak_explains(leak, hang) is not None


def test_a_batch_dev_shm_had_no_room_for_is_not_unpicklable_and_views_are_named():
    full = "unable to allocate shared memory(shm) for file </torch_11_1_2>: No space left on device (28)"
    event = {**_dropped(11, 0, 0, full, 100.5, "RuntimeError"), "batch_bytes": 800_000, "storage_bytes": 16_000_000}
    [finding] = find_dropped_batches(fakes.run([fakes.loader()], [], events=[event]))
    ev = finding.evidence
    assert (ev["cause"], ev["batch_bytes"], ev["sent_bytes"]) == ("views", 800_000, 16_000_000)
    assert "its batches hold 781.2 KiB each but send 15.3 MiB (storages 20x larger" in finding.title
    assert "Ruled out: an unpicklable batch" in finding.detail and "picklable" not in finding.fix
    assert finding.fix.startswith("Return copies, not views")
    plain = {**event, "storage_bytes": 800_000}  # the batch's own bytes: /dev/shm is simply too small
    [finding] = find_dropped_batches(fakes.run([fakes.loader()], [], events=[plain]))
    assert finding.evidence["cause"] == "shm-full" and finding.fix.startswith("Give the job more shared memory")
