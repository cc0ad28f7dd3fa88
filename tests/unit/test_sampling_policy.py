"""The sampler's choice of which processes get an expensive smaps_rollup read, and the supervisor's CPU cap."""

from __future__ import annotations

from collections import Counter

from dlprobe.supervisor.budget import RUN_SHARE, WINDOW_S, CpuBudget
from dlprobe.supervisor.sampler import (
    GROWTH_BYTES,
    MAX_STALE_CAP_S,
    MAX_STALE_S,
    MOVE_BYTES,
    STALE_SHARE,
    FullRead,
    choose_full_reads,
    stale_bound,
)
from dlprobe.system.procmem import PAGE_SIZE

MB = 1 << 20
UNLIMITED = float("inf")


def test_new_processes_are_read_at_once_and_still_ones_wait_for_the_bound():
    last = {1: FullRead(t=10.0, rss=200 * MB, faults=5000)}
    cheap = {1: (200 * MB, 5000), 2: (150 * MB, 100)}
    assert choose_full_reads(11.0, cheap, last, UNLIMITED, 0.004) == ([2], 0)
    assert choose_full_reads(10.0 + MAX_STALE_S - 0.01, cheap, last, UNLIMITED, 0.004) == ([2], 0)
    assert choose_full_reads(10.0 + MAX_STALE_S, cheap, last, UNLIMITED, 0.004) == ([1, 2], 0)


def test_the_stale_bound_stretches_only_where_reading_every_process_that_often_would_break_the_budget():
    # A few processes keep the 5 s bound; 64 torch-sized ones (~2 ms a read) would cost 2.6% of a core at 5 s, so
    # their bound is what keeps those reads to STALE_SHARE of a core; a huge read cost stops at the cap.
    assert stale_bound(8, 0.002) == MAX_STALE_S
    assert stale_bound(64, 0.002) == 64 * 0.002 / STALE_SHARE
    assert 64 * 0.002 / stale_bound(64, 0.002) <= STALE_SHARE + 1e-12
    assert stale_bound(64, 0.5) == MAX_STALE_CAP_S


def test_a_stretched_bound_is_the_one_still_processes_wait_for_and_still_always_honoured():
    cheap = {pid: (100 * MB, 0) for pid in range(1, 65)}
    last = {pid: FullRead(t=10.0, rss=100 * MB, faults=0) for pid in cheap}
    stale = stale_bound(len(cheap), 0.002)
    assert choose_full_reads(10.0 + MAX_STALE_S, cheap, last, UNLIMITED, 0.002, stale) == ([], 0)
    # past the stretched bound every one is read, with no allowance left at all
    assert choose_full_reads(10.0 + stale, cheap, last, 0.0, 0.002, stale) == (sorted(cheap), 0)


def test_copy_on_write_moves_faults_not_rss_and_is_read():
    """A worker copying its parent's pages keeps its RSS (the pages were resident, shared) but faults on each."""
    last = {1: FullRead(t=10.0, rss=200 * MB, faults=5000)}
    copied = MOVE_BYTES // PAGE_SIZE
    assert choose_full_reads(10.5, {1: (200 * MB, 5000 + copied)}, last, UNLIMITED, 0.004) == ([1], 0)
    assert choose_full_reads(10.5, {1: (200 * MB, 5000 + copied - 1)}, last, UNLIMITED, 0.004) == ([], 0)


def test_rss_moving_either_way_is_read():
    last = {1: FullRead(t=10.0, rss=200 * MB, faults=5000)}
    assert choose_full_reads(10.5, {1: (200 * MB + MOVE_BYTES, 5000)}, last, UNLIMITED, 0.004) == ([1], 0)
    assert choose_full_reads(10.5, {1: (200 * MB - MOVE_BYTES, 5000)}, last, UNLIMITED, 0.004) == ([1], 0)
    assert choose_full_reads(10.5, {1: (200 * MB + MOVE_BYTES - 1, 5000)}, last, UNLIMITED, 0.004) == ([], 0)


def test_over_budget_the_fastest_movers_are_read_and_stale_ones_always():
    last = {pid: FullRead(t=10.0, rss=100 * MB, faults=0) for pid in (1, 2, 3)}
    last[4] = FullRead(t=10.0 - MAX_STALE_S, rss=100 * MB, faults=0)
    cheap = {1: (102 * MB, 0), 2: (120 * MB, 0), 3: (110 * MB, 0), 4: (100 * MB, 0)}
    # room for the stale one and two more: the one growing by 20 MB and the one by 10 MB, not the 2 MB one
    assert choose_full_reads(10.5, cheap, last, 0.0125, 0.004) == ([2, 3, 4], 1)
    # no allowance left at all: still no process goes unread past the bound
    assert choose_full_reads(10.5, cheap, last, -1.0, 0.004) == ([4], 3)


def test_a_growing_process_is_read_whatever_the_budget():
    # A worker filling a cache exits at the end of its epoch: its last growth must be read before it goes.
    last = {1: FullRead(t=10.0, rss=200 * MB, faults=0), 2: FullRead(t=10.0, rss=600 * MB, faults=0)}
    cheap = {1: (200 * MB + GROWTH_BYTES, 0), 2: (600 * MB + GROWTH_BYTES, 0)}
    assert choose_full_reads(10.5, cheap, last, -1.0, 0.004) == ([1], 1)  # 2 needs a tenth of its 600 MB: 60 MB
    cheap[2] = (660 * MB, 0)
    assert choose_full_reads(10.5, cheap, last, -1.0, 0.004) == ([1, 2], 0)
    # shrinking by as much is churn, not growth: left to the budget
    assert choose_full_reads(10.5, {1: (200 * MB - GROWTH_BYTES, 0)}, last, -1.0, 0.004) == ([], 1)


def test_a_moving_process_whose_memory_stayed_put_waits_its_backed_off_interval():
    # churn: faults past MOVE_BYTES while the last full read found USS where the one before left it
    last = {1: FullRead(t=10.0, rss=200 * MB, faults=5000, interval=2.0)}
    churned = (200 * MB, 5000 + 10 * MOVE_BYTES // PAGE_SIZE)
    assert choose_full_reads(11.0, {1: churned}, last, UNLIMITED, 0.004) == ([], 0)
    assert choose_full_reads(12.0, {1: churned}, last, UNLIMITED, 0.004) == ([1], 0)
    # growth still is read at once, interval or not
    assert choose_full_reads(10.5, {1: (200 * MB + GROWTH_BYTES, 5000)}, last, -1.0, 0.004) == ([1], 0)


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0
        self.cpu = 0.0


def _budget(share: float = 0.03) -> tuple[CpuBudget, FakeClock]:
    clock = FakeClock()
    return CpuBudget(share, clock=lambda: clock.now, cpu=lambda: clock.cpu), clock


def test_budget_allows_reads_while_the_share_is_under_the_cap():
    budget, clock = _budget()
    clock.now, clock.cpu = 10.0, 0.05
    budget.allowance()
    clock.now, clock.cpu = 20.0, 0.1  # 0.05 s of CPU in the last 10 s window: 0.5% of a core
    assert abs(budget.allowance() - (0.03 * WINDOW_S - 0.05)) < 1e-9
    assert budget.summary()["over_budget_s"] == 0


def test_budget_caps_the_run_so_far_not_only_each_window():
    # 64 new processes' first reads (mandatory, 0.3 s of CPU) in the first second of a run: a window judged alone
    # would allow another 0.3 s in each later window, 4% of a core over a 15 s run. The run's share stays capped.
    budget, clock = _budget()
    clock.now, clock.cpu = 1.0, 0.3
    spent = 0.3
    for tick in range(2, 31):  # then every half second, whatever the allowance lets optional reads use
        clock.now = tick / 2
        spent += max(0.0, budget.allowance())
        clock.cpu = spent
    assert spent <= 0.03 * 15.0 + 1e-9
    assert abs(spent - RUN_SHARE * 0.03 * 15.0) < 0.01  # the deferred reads come back once the burst is paid for


def test_budget_over_the_cap_cuts_reads_and_says_for_how_long():
    budget, clock = _budget()
    for second in range(1, 31):  # 5% of a core for 30 s
        clock.now, clock.cpu = float(second), 0.05 * second
        budget.allowance()
    assert budget.allowance() < 0
    budget.note_skipped(7)
    summary = budget.summary()
    assert summary["cpu_share"] == 0.05 and summary["cpu_budget"] == 0.03
    assert 15 <= summary["over_budget_s"] <= 30 and summary["deep_reads_skipped"] == 7


def test_budget_recovers_once_the_window_has_passed():
    budget, clock = _budget()
    clock.now, clock.cpu = 1.0, 1.0  # a burst: a whole second of CPU
    assert budget.allowance() < 0
    for second in range(2, 40):
        clock.now = float(second)  # then nothing
        budget.allowance()
    assert budget.allowance() > 0


FETCH = "_worker_loop (torch/utils/data/_utils/worker.py:374);_map_fetch (dlprobe/in_training/inflight.py:380);"


def _record(tmp_path, monkeypatch, fetch_lines: str):
    """A StackRecorder run to its end on two workers, with a real subprocess standing in for py-spy: each burst
    writes `fetch_lines`, 50 samples inside the probe's own clock read (not counted) and 30 of a worker waiting for
    its next index (not counted), to --output."""
    import time

    from dlprobe.supervisor.stack_recorder import StackRecorder

    stacks = tmp_path / "stacks.raw"
    stacks.write_text(
        fetch_lines
        + "_worker_loop (torch/utils/data/_utils/worker.py:374);_map_fetch (dlprobe/in_training/inflight.py:386);"
        "WorkerBatches.collating (dlprobe/in_training/worker_batches.py:65) 50\n"
        "_worker_loop (torch/utils/data/_utils/worker.py:319);get (multiprocessing/queues.py:113) 30\n"
    )
    fake = tmp_path / "py-spy"
    fake.write_text(f'#!/bin/sh\nwhile [ "$1" != "--output" ]; do shift; done\ncp "{stacks}" "$2"\n')
    fake.chmod(0o755)
    monkeypatch.setenv("DLPROBE_PY_SPY", str(fake))
    monkeypatch.delenv("DLPROBE_STACK_RATE", raising=False)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    recorder = StackRecorder(1, run_dir)
    recorder.process_exists = lambda pid: True  # pids 11 and 12 stand for live workers
    epoch = {"ev": "epoch", "pid": 7, "t": 100.0, "workers": [{"worker_id": 0, "pid": 11}, {"worker_id": 1, "pid": 12}]}
    starving = {"ev": "batches", "pid": 7, "t": 102.0, "waits": [0.5, 0.9, 0.9], "total": 3}
    recorder.observe([epoch, starving], 102.0)
    assert recorder.started and recorder.burst_pid == 11
    deadline = time.monotonic() + 30
    while recorder.started_at is not None and time.monotonic() < deadline:  # the bursts end by themselves
        recorder.observe([], 103.0)
        time.sleep(0.01)
    recorder.stop()
    return recorder, run_dir


def test_hotspot_sampler_takes_the_workers_in_turn_until_enough_samples_of_their_fetch(tmp_path, monkeypatch):
    from dlprobe.supervisor.stack_recorder import ENOUGH_SAMPLES

    # two functions at even shares: 120 samples a burst rank them within 4.6 points, 240 within 3.2
    even = f"{FETCH}MyDataset.__getitem__ (train.py:20) 60\n{FETCH}MyDataset.decode (train.py:30) 60\n"
    recorder, run_dir = _record(tmp_path, monkeypatch, even)
    # two bursts, one per worker in turn: 240 samples in the fetch path are enough (the probe's frames are not)
    assert recorder.sampled == [11, 12] and recorder.fetch_samples == 240 >= ENOUGH_SAMPLES
    lines = (run_dir / "stacks.txt").read_text().splitlines()
    assert [line.split(":", 1)[0] for line in lines] == ["process 11"] * 4 + ["process 12"] * 4


def test_hotspot_sampler_stops_sooner_where_one_function_takes_nearly_all_the_samples(tmp_path, monkeypatch):
    from dlprobe.supervisor.stack_recorder import ranked_enough

    # 95% in one function after 120 samples: its share is known within 2 points, the other's too
    dominated = f"{FETCH}MyDataset.__getitem__ (train.py:20) 114\n{FETCH}MyDataset.decode (train.py:30) 6\n"
    recorder, _ = _record(tmp_path, monkeypatch, dominated)
    assert recorder.sampled == [11] and recorder.fetch_samples == 120
    assert not ranked_enough(Counter({"a": 59}))  # never before MIN_RANKED, even a single function
    assert not ranked_enough(Counter({"a": 80, "b": 40}))  # a third and two thirds: 182 samples needed
    assert ranked_enough(Counter({"a": 130, "b": 62}))


def test_a_full_read_that_found_memory_unmoved_doubles_the_interval_and_one_that_found_it_moved_resets_it():
    import io

    from dlprobe.supervisor.sampler import BACKOFF_FACTOR, ROUND_S, SETTLED_BYTES, Sampler

    sampler = Sampler(1, io.StringIO(), None)
    values = {"rss": 200 * MB, "uss": 20 * MB, "pss": 60 * MB, "anon": 10 * MB}
    assert sampler._next_interval(7, values) == ROUND_S  # a first read: nothing to compare with
    sampler.last_deep[7] = values
    sampler.last_full[7] = FullRead(t=10.0, rss=200 * MB, faults=0, interval=ROUND_S)
    churned = {**values, "uss": values["uss"] + SETTLED_BYTES - 1, "pss": values["pss"] + 8 * MOVE_BYTES}
    assert sampler._next_interval(7, churned) == ROUND_S * BACKOFF_FACTOR
    sampler.last_full[7] = FullRead(t=10.0, rss=200 * MB, faults=0, interval=4.0)
    assert sampler._next_interval(7, churned) == sampler.stale_s  # never past the stale bound
    assert sampler._next_interval(7, {**values, "anon": values["anon"] - SETTLED_BYTES}) == ROUND_S


def test_hotspot_sampler_never_starts_py_spy_on_a_worker_that_has_exited(tmp_path):
    import subprocess
    import sys

    from dlprobe.supervisor.stack_recorder import StackRecorder

    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()  # exited and reaped: its /proc entry is gone, as a worker's at the loop's end
    alive = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        recorder = StackRecorder(1, tmp_path)
        workers = [{"worker_id": 0, "pid": gone.pid}, {"worker_id": 1, "pid": alive.pid}]
        recorder.observe([{"ev": "epoch", "pid": 7, "t": 100.0, "workers": workers}], 100.0)
        assert recorder._targets() == [alive.pid]
    finally:
        alive.kill()
        alive.wait()


def test_descriptors_are_counted_every_tick_while_a_process_is_young_or_nearing_its_limit():
    import io

    from dlprobe.supervisor.sampler import FD_EVERY_S, FD_YOUNG_S, Sampler

    sampler = Sampler(1, io.StringIO(), None)
    assert sampler._fd_urgent(100.0, 7)  # never counted yet
    sampler.fd_seen[7], sampler.first_fds[7], sampler.fd_limits[7] = 100.0, 20, 128
    sampler.fd_last[7] = (101.0, 21)
    assert sampler._fd_urgent(100.0 + FD_YOUNG_S / 2, 7)  # a worker at a low limit may die in its first second
    sampler.fd_last[7] = (110.0, 21)
    assert not sampler._fd_urgent(110.0, 7)  # old and settled: the regular FD_EVERY_S reading
    rate = 10.0  # 100 more over 10 s
    sampler.fd_last[7] = (110.0, 120)
    assert rate * 2 * FD_EVERY_S >= 128 - 120 and sampler._fd_urgent(110.0, 7)  # 8 left, 10 a second
    sampler.fd_limits[7] = 4096
    assert not sampler._fd_urgent(110.0, 7)  # far from its limit
