"""idle-workers: a worker that delivered no batch in an ended epoch, with the reason where it can be known."""

from __future__ import annotations

from dlprobe.analysis.findings.worker_use import find_idle_workers
from dlprobe.analysis.measures.worker_cpu import loader_cpu
from dlprobe.analysis.run.model import Epoch, RunData
from tests.unit.fakes import cpu_series, loader, run, worker


def _run(counts: list[int] | None, iterable: bool = True, ended: bool = True, dataset_type: str = "x.DS",
         shards: int | None = None, world_size: int | None = None) -> RunData:  # fmt: skip
    batches = sum(counts or [])
    epoch = Epoch(0, 100.0, 0.0, t_end=104.0 if ended else None, batches=batches, waits=[0.1] * batches,
                  t_last_batch=104.0, worker_batches=counts)  # fmt: skip
    lo = loader(num_workers=len(counts or [0, 0]), epochs=[epoch])
    lo.writer = 7
    lo.config["dataset"].update({"iterable": iterable, "type": dataset_type, "shards": shards})
    events = [{"ev": "process", "t": 99.0, "pid": 7, "world_size": world_size}] if world_size else []
    return run([lo], [], events=events)


def test_an_iterable_dataset_with_fewer_shards_than_workers_names_the_idle_ones_and_the_fix():
    [finding] = find_idle_workers(_run([8, 8, 0, 0]))
    assert finding.title == "Workers 2, 3 of loader 0 delivered no batch in epoch 0"
    assert finding.severity == "warning" and finding.evidence["idle_worker_ids"] == [2, 3]
    assert "only 2 of its 4 workers" in finding.detail and "at least 4 shards" in finding.detail
    assert finding.fix.startswith("DataLoader(..., num_workers=2)") and "at least 4 shards" in finding.fix


def test_huggingface_shards_and_ranks_name_the_knob_and_count_workers_times_ranks():
    [finding] = find_idle_workers(_run([5, 0], dataset_type="datasets.iterable_dataset.IterableDataset", shards=2,
                                       world_size=2))  # fmt: skip
    assert "it has 2 shard(s)" in finding.detail and "one of 2 ranks" in finding.detail
    assert "to_iterable_dataset(num_shards=4)" in finding.fix and finding.evidence["world_size"] == 2
    assert "num_workers=" not in finding.fix  # across ranks the shards must cover every (rank, worker)


def test_a_rank_whose_workers_all_got_nothing_is_told_to_add_shards_not_num_workers_0():
    [finding] = find_idle_workers(_run([0, 0], world_size=2))
    assert "No data reached any of this rank's 2 workers" in finding.detail and "uneven-ranks" in finding.detail
    assert finding.fix.startswith("Use at least 4 shards") and "num_workers=0" not in finding.fix


def test_every_worker_delivering_or_an_epoch_cut_short_is_not_idle():
    assert find_idle_workers(_run([8, 8, 1, 3])) == []
    assert find_idle_workers(_run([8, 8, 0, 0], ended=False)) == []  # they might still deliver
    assert find_idle_workers(_run(None)) == []  # counts not recorded: no claim


def test_a_map_style_epoch_with_fewer_batches_than_workers_is_not_idle_workers():
    assert find_idle_workers(_run([1, 1, 1, 0], iterable=False)) == []  # 3 batches for 4 workers: arithmetic
    [odd] = find_idle_workers(_run([2, 1, 1, 0], iterable=False))  # 4 batches went round 4 workers: one is missing
    assert odd.evidence["condition"] == "map-style, epoch ended with 4 >= 4 batches"


def test_idle_workers_sleep_is_not_counted_as_the_loaders_waiting():
    r = _run([30, 30, 0])
    r.loaders[0].epochs[0].waits = [0.05] * 60
    busy = [worker(1000 + k, k, cpu_series(100.0, 104.0, 0.9)) for k in range(2)]
    r.processes = [*busy, worker(1002, 2, cpu_series(100.0, 104.0, 0.0))]
    measured = loader_cpu(r, r.loaders[0], frozenset({2}))
    assert measured is not None and round(measured.cpu_share, 2) == 0.9 and len(measured.workers) == 2
    assert loader_cpu(r, r.loaders[0]).cpu_share < 0.7  # with the idle one, a CPU-bound loader would read mixed
