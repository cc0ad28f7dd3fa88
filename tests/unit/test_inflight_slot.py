"""The in-flight slot: what the target writes is what the supervisor reads back."""

from __future__ import annotations

import contextlib
import multiprocessing
import time
from pathlib import Path

from dlprobe.in_training.inflight_slot import Slot
from dlprobe.rundir import inflight_format as fmt
from dlprobe.rundir.schema import INFLIGHT_DIR


def _slot(tmp_path, role=fmt.ROLE_WORKER, loader=1, worker=3):
    path = fmt.slot_path(tmp_path, 4242)
    return Slot(path, role, loader, worker), path


def test_batch_and_sample_roundtrip(tmp_path):
    slot, path = _slot(tmp_path)
    slot.begin(fmt.KIND_MAP, [12, 13, 14])
    slot.sample(0, 12)
    slot.sample(1, 13)
    read = fmt.read_slot(path)
    assert read["role"] == "worker" and read["loader_id"] == 1 and read["worker_id"] == 3
    assert read["phase"] == "getitem" and read["kind"] == "map"
    assert read["indices"] == [12, 13, 14] and read["index"] == 13 and read["pos"] == 1
    assert read["seq"] % 2 == 0 and read["failed"] is None
    slot.set_phase(fmt.COLLATE)
    assert fmt.read_slot(path)["phase"] == "collate"


def test_an_unfinished_fetch_is_kept_as_the_first_failure(tmp_path):
    slot, path = _slot(tmp_path)
    slot.begin(fmt.KIND_MAP, [12, 13])
    slot.sample(1, 13)  # raises here: the worker goes on to its next batch
    slot.begin(fmt.KIND_MAP, [20, 21])
    slot.sample(0, 20)
    slot.begin(fmt.KIND_MAP, [30, 31])  # the second failure does not replace the first
    read = fmt.read_slot(path)
    assert read["failed"]["index"] == 13 and read["failed"]["indices"] == [12, 13]
    assert read["failed"]["pos"] == 1 and read["failed"]["fetch"] == 1
    assert read["indices"] == [30, 31]


def test_finished_fetches_leave_no_failure(tmp_path):
    slot, path = _slot(tmp_path)
    for start in (0, 2, 4):
        slot.begin(fmt.KIND_MAP, [start, start + 1])
        slot.set_phase(fmt.COLLATE)
        slot.set_phase(fmt.DONE)
    read = fmt.read_slot(path)
    assert read["failed"] is None and read["fetches"] == 3 and read["phase"] == "done"


def test_iterable_positions_and_odd_indices(tmp_path):
    slot, path = _slot(tmp_path)
    slot.begin(fmt.KIND_ITERABLE, [None] * 4, 8)
    slot.sample(2, 10)
    read = fmt.read_slot(path)
    assert read["kind"] == "iterable" and read["indices"] == [8, 9, 10, 11] and read["index"] == 10
    slot.begin(fmt.KIND_MAP, ["a", 5])  # a custom sampler's keys need not be ints
    slot.sample(0, "a")
    read = fmt.read_slot(path)
    assert read["indices"] == [None, 5] and read["index"] is None
    slot.begin(fmt.KIND_MAP, list(range(1000)))
    read = fmt.read_slot(path)
    assert read["batch_len"] == 1000 and read["indices"] == list(range(fmt.MAX_INDICES))


def test_one_shot_index_iterables_are_not_consumed(tmp_path):
    slot, path = _slot(tmp_path)
    indices = iter([1, 2, 3])
    slot.begin(fmt.KIND_MAP, indices)
    assert list(indices) == [1, 2, 3]
    assert fmt.read_slot(path)["batch_len"] == 0


def test_main_loop_state(tmp_path):
    slot, path = _slot(tmp_path, role=fmt.ROLE_MAIN, loader=-1, worker=-1)
    slot.loop(fmt.WAITING, 0, 1, 7, 6)
    loop = fmt.read_slot(path)["loop"]
    assert loop["state"] == "waiting-for-batch" and loop["awaited_worker"] == 1 and loop["awaited_task"] == 7
    assert loop["batches"] == 6 and loop["since"] > 0


def _write_forever(path: str) -> None:
    slot = Slot(Path(path), fmt.ROLE_WORKER, 0, 0)
    n = 0
    while True:
        n += 1
        slot.begin(fmt.KIND_MAP, [n] * 8)
        slot.sample(3, n)


def test_reader_never_sees_a_half_written_batch(tmp_path):
    path = fmt.slot_path(tmp_path, 4242)
    writer = multiprocessing.get_context("fork").Process(target=_write_forever, args=(str(path),), daemon=True)
    writer.start()
    try:
        deadline = time.monotonic() + 10
        while fmt.read_slot(path) is None and time.monotonic() < deadline:
            time.sleep(0.01)
        consistent = 0
        for _ in range(3000):
            read = fmt.read_slot(path)
            if read is not None and read["indices"] and not read["torn"]:
                # the batch's indices and the sample in flight were written in separate stores
                assert read["indices"] == [read["index"]] * 8, {k: read[k] for k in ("index", "pos", "fetches")}
                consistent += 1
        assert consistent > 100
    finally:
        writer.kill()
        writer.join()


def test_read_all_skips_foreign_files(tmp_path):
    _slot(tmp_path)
    (tmp_path / INFLIGHT_DIR / "notes.txt").write_text("x")
    (tmp_path / INFLIGHT_DIR / "99.bin").write_bytes(b"short")
    assert list(fmt.read_all(tmp_path)) == [4242]
    assert fmt.read_all(tmp_path / "nowhere") == {}


def test_the_ring_of_recent_batches_keeps_the_last_ones_in_order(tmp_path):
    slot, path = _slot(tmp_path)
    assert fmt.read_slot(path)["recent"] == []
    for task in range(fmt.MAX_RECENT + 8):
        slot.keep_recent(task, 100.0 + task, 100.5 + task, 100.75 + task, 4 * task)
    recent = fmt.read_slot(path)["recent"]
    assert [row[0] for row in recent] == list(range(8, fmt.MAX_RECENT + 8))
    assert recent[-1] == [39, 139.0, 139.5, 139.75, 156]


_THREAD_WORKERS = """
import json, sys, threading
from dlprobe.in_training import inflight
from dlprobe.rundir import inflight_format as fmt

run_dir = sys.argv[1]
inflight.start_main(run_dir)
tids = []

def worker(worker_id):
    inflight.InflightInit(None, run_dir, 0)(worker_id)  # as torch calls worker_init_fn in a worker thread
    tids.append(threading.get_native_id())
    inflight._current_slot().begin(fmt.KIND_MAP, [10 * worker_id, 10 * worker_id + 1])

threads = [threading.Thread(target=worker, args=(i,)) for i in range(2)]
for t in threads:
    t.start()
for t in threads:
    t.join()
inflight.loop_outside(0, 7)  # the loop's own state still goes to the process's slot
print(json.dumps(tids))
"""


def test_worker_threads_write_slots_of_their_own_and_leave_the_process_slot_alone(tmp_path):
    import json
    import os
    import subprocess
    import sys

    out = subprocess.run(
        [sys.executable, "-c", _THREAD_WORKERS, str(tmp_path)], capture_output=True, text=True, check=True
    )
    tids = json.loads(out.stdout)
    slots = fmt.read_all(tmp_path)
    (main_pid,) = [pid for pid, s in slots.items() if s["role"] == "main"]
    assert main_pid not in tids and slots[main_pid]["loop"]["batches"] == 7
    assert slots[main_pid]["fetches"] == 0  # no worker's batch landed in the training process's slot
    for tid in tids:
        slot = slots[tid]
        assert slot["role"] == "thread-worker" and slot["tid"] == tid and slot["pid"] == main_pid
        assert slot["faulthandler_signal"] is None  # the process's handler dumps every thread already
        assert slot["indices"] == [10 * slot["worker_id"], 10 * slot["worker_id"] + 1]
    assert os.getpid() != main_pid


def test_a_fetch_names_the_sample_it_raised_on_the_first_as_well_as_a_later_one(tmp_path):
    # begin() records the batch's first sample as the one in flight, and the fetch records the others itself
    from torch.utils.data._utils import fetch

    from dlprobe.in_training import inflight

    class Raises:
        def __init__(self, bad):
            self.bad = bad

        def __getitem__(self, i):
            if i == self.bad:
                raise ValueError(i)
            return i

    path = fmt.slot_path(tmp_path, 4242)
    inflight._slot = Slot(path, fmt.ROLE_WORKER, 0, 0)
    try:
        for bad, pos in ((12, 0), (14, 2)):
            fetcher = fetch._MapDatasetFetcher(Raises(bad), True, lambda data: data, False)
            with contextlib.suppress(ValueError):
                inflight._map_fetch(fetcher, [12, 13, 14])
            read = fmt.read_slot(path)
            assert (read["phase"], read["index"], read["pos"]) == ("getitem", bad, pos)
        fetcher = fetch._MapDatasetFetcher(Raises(-1), True, lambda data: data, False)
        assert inflight._map_fetch(fetcher, [3, 4]) == [3, 4]
        assert fmt.read_slot(path)["phase"] == "done"
    finally:
        inflight._slot = None
