"""Which bound a starved loader is (CPU, I/O) from its workers' CPU time, and the advice that follows, on synthetic
runs at the thresholds."""

from __future__ import annotations

import pytest

from dlprobe.analysis.findings.hotspots import find_worker_hotspots
from dlprobe.analysis.findings.throughput import find_input_bound, find_too_many_workers
from dlprobe.analysis.measures.worker_cpu import CPU_BOUND, HAND_OVER, IO_BOUND, MIXED, loader_cpu
from dlprobe.analysis.run.model import Epoch, ProcessRecord, RunData
from dlprobe.analysis.run.stackfile import StackCount, StackProfile
from dlprobe.loader_model.limits import WORKER_CAP
from tests.unit.fakes import cpu_series, loader, run, series, worker

WAIT_S, STEP_S, BATCHES = 0.08, 0.002, 40  # the loop waits 80 ms per batch for 2 ms of its own work


def _starved(num_workers: int, cpu_share: float | None, runq_share: float | None = 0.0, cores: int = 2,
             stacks: list[StackCount] | None = None) -> RunData:  # fmt: skip
    """A loader whose loop starves for BATCHES batches, its workers on a CPU `cpu_share` of the time (None: the
    CPU time was never read)."""
    end = 100.0 + BATCHES * (WAIT_S + STEP_S)
    epoch = Epoch(0, 100.0, 0.0, t_end=end, batches=BATCHES, waits=[WAIT_S] * BATCHES)
    procs = []
    for k in range(num_workers):
        s = cpu_series(100.0, end, cpu_share or 0.0, runq_share)
        if cpu_share is None:
            s = series(s.uss, s.rss, t0=100.0)
        procs.append(worker(1000 + k, k, s))
    r = run([loader(num_workers=num_workers, epochs=[epoch])], procs)
    r.meta["machine"]["usable_cores"] = cores
    if stacks is not None:
        r.stacks = StackProfile(rate=100, stacks=stacks)
    return r


@pytest.mark.parametrize(
    ("cpu", "runq", "bound"),
    [(0.5, 0.0, IO_BOUND), (0.52, 0.0, MIXED), (0.3, 0.4, CPU_BOUND), (0.3, 0.38, MIXED), (0.2, None, IO_BOUND)],
)
def test_bound_thresholds_count_waiting_for_a_core_as_wanting_the_cpu(cpu, runq, bound):
    r = _starved(2, cpu, runq)
    measured = loader_cpu(r, r.loaders[0])
    assert measured is not None and measured.bound == bound
    assert measured.cpu_share == pytest.approx(cpu, abs=0.01)


def test_too_short_or_unread_cpu_time_is_not_measured():
    assert loader_cpu(_starved(2, None), _starved(2, None).loaders[0]) is None
    short = _starved(2, 0.1)
    for proc in short.processes:  # two readings 0.2 s apart per worker: 0.4 s in all
        proc.series.t, proc.series.cpu, proc.series.runq = [101.0, 101.2], [0.0, 0.02], [0.0, 0.0]
    assert loader_cpu(short, short.loaders[0]) is None


def test_io_bound_workers_on_all_cores_are_told_to_add_workers_with_a_prediction():
    [finding] = find_input_bound(_starved(2, 0.05))
    e = finding.evidence
    assert e["bound"] == IO_BOUND and e["worker_wait_share"] == pytest.approx(0.95, abs=0.01)
    # 2 workers x 82 ms per batch: one worker's batch takes 164 ms, 5% of it on a CPU: 2 cores feed 40 workers,
    # the loop's 2 ms step takes 103, so the stated cap decides. Waking together, 32 such workers queue a little for
    # the 2 cores: the queueing curve predicts 186 batches/s, under the 195 of 32 never queueing.
    assert e["suggested_num_workers"] == WORKER_CAP and e["model_limit"] == "cap"
    assert e["predicted_batches_per_s"] == pytest.approx(186.3, rel=0.01)
    assert e["predicted_batches_per_s"] < WORKER_CAP / 0.164
    assert "I/O-bound" in finding.title and "asleep 95%" in finding.title
    assert f"num_workers={WORKER_CAP}" in finding.fix and "will not help" not in finding.fix
    assert "Predicted 1,489 samples/s against 97 samples/s now" in finding.fix


def test_cpu_bound_workers_on_all_cores_are_told_to_make_samples_cheaper():
    [finding] = find_input_bound(_starved(2, 0.3, 0.4))  # busy 70%, most of it queued: the machine is full
    assert finding.evidence["bound"] == CPU_BOUND and finding.evidence["suggested_num_workers"] == 2
    assert "will not help" in finding.fix and "make each sample cheaper" in finding.fix
    assert "queued for a core 40%" in finding.fix  # the cores are full, whoever else uses them


def test_cpu_bound_advice_over_restarted_epochs_asks_for_persistent_workers_once():
    r = _starved(2, 0.3, 0.4)
    first = r.loaders[0].epochs[0]
    assert first.t_end is not None
    later = first.t_end + 1.0
    r.loaders[0].epochs.append(Epoch(1, later, 0.0, t_end=later + first.t_end - 100.0, batches=BATCHES,
                                     waits=[WAIT_S] * BATCHES))  # fmt: skip
    [finding] = find_input_bound(r)
    assert finding.fix.count("persistent_workers=True") == 1 and finding.fix.endswith("persistent_workers=True.")
    assert "num_workers=3" not in finding.fix


def test_half_asleep_workers_get_the_workers_the_cores_hold():
    [finding] = find_input_bound(_starved(2, 0.5))
    # The corner is 4 (2 cores / 0.5), but workers that wake together queue for the cores: 4 reach 85% of the cores'
    # bound, 6 reach 98% (the queueing curve's knee, as tune measures it: a mixed loader's sweep ran 26% faster at
    # 16 workers than at the corner's 6).
    assert finding.evidence["bound"] == IO_BOUND and finding.evidence["suggested_num_workers"] == 6
    assert finding.evidence["model_limit"] == "cores" and "num_workers=6" in finding.fix


def test_unmeasured_cpu_never_claims_more_workers_will_not_help():
    [finding] = find_input_bound(_starved(2, None))
    assert finding.evidence["bound"] is None and finding.evidence["suggested_num_workers"] == 2
    assert "will not help" not in finding.fix and "not measured" in finding.fix
    assert "CPU-bound" not in finding.title and "I/O-bound" not in finding.title


def test_more_workers_than_cores_are_too_many_only_when_they_want_the_cpu():
    assert find_too_many_workers(_starved(8, 0.05)) == []  # asleep: 8 workers want 0.4 of a core
    assert find_too_many_workers(_starved(8, None)) == []  # not measured: no claim
    [finding] = find_too_many_workers(_starved(8, 0.25, 0.7))
    assert finding.evidence["workers_that_fit"] == 2 and "num_workers=2" in finding.fix
    assert "95% of its time" in finding.title


def test_too_many_workers_for_a_loop_that_does_not_wait_says_it_is_consumer_bound():
    fed = _starved(8, 0.25, 0.7)
    fed.loaders[0].epochs[0].waits = [0.002] * BATCHES  # the loop waits 2 ms of each 84 ms: its step sets the pace
    [finding] = find_too_many_workers(fed)
    assert finding.evidence["bound"] == "consumer-bound" and finding.evidence["loop_wait_share"] < 0.3
    assert "consumer-bound: it waited for data only 2% of the time" in finding.detail
    [starved] = find_too_many_workers(_starved(8, 0.25, 0.7))
    assert starved.evidence["bound"] == "CPU-bound" and "consumer-bound" not in starved.detail


HOT = [StackCount(1000, ["_MapDatasetFetcher.fetch (torch/utils/data/_utils/fetch.py:50)",
                         "RemoteBlobs.__getitem__ (train.py:12)"], 40)]  # fmt: skip


def test_hotspots_of_sleeping_workers_say_they_wait_instead_of_speed_it_up():
    [asleep] = find_worker_hotspots(_starved(2, 0.05, stacks=HOT))
    assert "mostly wait" in asleep.title and "asleep 95%" in asleep.title
    assert "Speed up" not in asleep.fix and "barely help" in asleep.fix
    [busy] = find_worker_hotspots(_starved(2, 0.52, stacks=HOT))  # just under the I/O-bound wait share
    assert "mostly wait" not in busy.title and busy.fix.startswith("Speed up RemoteBlobs.__getitem__")


def _timed_batches(r: RunData, seconds_per_batch: float) -> RunData:
    """Each worker's own timing of the batches it built (worker_batches events), `seconds_per_batch` each."""
    per_batch = len(r.workers(0)) * (WAIT_S + STEP_S)  # one worker's wall time per batch while the loop starves
    for k, proc in enumerate(r.workers(0)):
        rows = [[k + 2 * i, k * (WAIT_S + STEP_S) + i * per_batch, seconds_per_batch, 0.0, i] for i in range(20)]
        r.events.append({"ev": "worker_batches", "pid": proc.pid, "loader": 0, "worker": k, "t0": 100.0,
                         "rows": rows, "stride": 1})  # fmt: skip
    return r


def test_asleep_workers_that_build_batches_quickly_are_waiting_for_the_hand_over_not_for_reads():
    # Asleep 95% of their time, but each batch took them 20 ms of their 164: between batches they wait for an index,
    # so the loop's wait is not in loading and more workers would not shorten it (the demo's leaky run looks so).
    r = _timed_batches(_starved(2, 0.05), 0.02)
    measured = loader_cpu(r, r.loaders[0])
    assert measured is not None and measured.bound == HAND_OVER
    assert measured.fetch_share == pytest.approx(0.02 / 0.164, rel=0.05)
    [finding] = find_input_bound(r)
    assert finding.evidence["suggested_num_workers"] == 2 and "num_workers=" not in finding.fix
    assert "More workers will not help" in finding.fix and "building batches 12%" in finding.title
    assert finding.evidence["suggested_changes"] == ["prefetch_factor=4"]


def test_asleep_workers_that_spend_their_time_inside_the_fetch_stay_io_bound():
    r = _timed_batches(_starved(2, 0.05), 0.15)  # 150 ms of each 164 ms batch inside fetch: waiting on reads
    measured = loader_cpu(r, r.loaders[0])
    assert measured is not None and measured.bound == IO_BOUND and measured.fetch_share > 0.9
    [finding] = find_input_bound(r)
    assert finding.evidence["suggested_num_workers"] == WORKER_CAP


def _with_main(r: RunData, cpu_share: float, runq_share: float | None) -> RunData:
    """The loop's own process beside the workers, on a CPU and waiting for a core these shares of the loop's time."""
    end = 100.0 + BATCHES * (WAIT_S + STEP_S)
    r.processes.append(ProcessRecord(1, "main", comm="python", series=cpu_series(100.0, end, cpu_share, runq_share)))
    return r


def test_a_loop_that_waits_while_other_programs_hold_the_cores_is_a_note_that_names_the_load():
    # workers idle on a CPU 10% and queued for one 45%: the job used 0.3 of 2 cores, the queue was other programs'
    [busy] = find_input_bound(_with_main(_starved(2, 0.1, 0.45), 0.1, 0.3))
    assert busy.severity == "info" and busy.evidence["busy"] == {"runq_share": 0.45, "used_cores": 0.3}
    assert "the machine was busy: other programs held the cores (its processes waited for one 45% of the time" in (
        busy.title
    )
    assert "this is a note, not a warning" in busy.detail
    # the same wait with hardly any queue is the loader's: a warning
    [quiet] = find_input_bound(_with_main(_starved(2, 0.1, 0.1), 0.1, 0.05))
    assert quiet.severity == "warning" and quiet.evidence["busy"] is None and "busy" not in quiet.title
    # the loader's own processes filling its cores queue each other: not the machine's load
    [crowded] = find_input_bound(_with_main(_starved(4, 0.45, 0.45), 0.3, 0.3))
    assert crowded.severity == "warning" and crowded.evidence["busy"] is None
    # the run-queue wait was not read: nothing is concluded from it
    [unread] = find_input_bound(_with_main(_starved(2, 0.1, None), 0.1, None))
    assert unread.severity == "warning" and unread.evidence["busy"] is None
