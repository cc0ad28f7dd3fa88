"""One question, one answer: `run`'s advice, `tune`'s trials and `attach`'s growth read the same evidence (two
workers that grew, their parent, the cgroup or the host's available memory) and give the same worker memory figure,
the same memory the workers may use, and the same count of workers that fit (loader_model/worker_memory.py), with and
without an epoch length to project the growth to (loader_model/memory_growth.py: growth bent toward its ceiling)."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import pytest

from dlprobe.analysis.findings.attach import find_attached_growth
from dlprobe.analysis.measures.memory_fit import workers_fit_memory
from dlprobe.analysis.measures.worker_growth import memory_limit
from dlprobe.analysis.run.model import Epoch, ProcessRecord, RunData, Series, SystemSeries
from dlprobe.in_training.trial_memory import TrialMemory
from dlprobe.loader_model.memory_growth import epoch_share, limit_ceiling
from dlprobe.loader_model.worker_memory import workers_that_fit
from dlprobe.tune.results import collect_trials, memory_available, recommend
from tests.unit.fakes import MiB, loader, run, worker

TICKS = [99.5, *(100.0 + i for i in range(11))]  # one reading before the workers start, then one a second
PARENT = 300 * MiB
LIMIT = 2000 * MiB
AVAILABLE = 5000 * MiB


BATCHES_PER_EPOCH = 625  # the trial (and the run's epoch) made 40 of them from t=99.7 to t=110


def _uss(t: float) -> int:
    return int(100 * MiB + 4 * MiB * (t - 100.0))  # a worker's table, then 4 MiB a second


def _uss_bending(t: float) -> int:
    """A worker that copies the parent's pages fast at first, then finds fewer it has not copied: 58 MiB in 10 s,
    tending to 60 MiB. A straight line from its later half says 1.8 MiB/s for the rest of the epoch."""
    return int(100 * MiB + 60 * MiB * -math.expm1(-(t - 100.0) / 3.0))


def _evidence(cgroup: bool, epoch: int | None = None, uss_at: Callable[[float], int] = _uss) -> RunData:
    """The one run every path reads: the parent flat at 300 MiB, two workers from t=100 growing 40 MiB over 10 s (or
    as `uss_at` says), the cgroup charging exactly what they hold (or no cgroup), the host's available memory falling
    as they grow; with `epoch`, the loader's epoch (and the trial) 40 batches into its `epoch` batches at t=110."""
    worker_t = TICKS[1:]
    workers = [worker(pid, pid - 11, Series(t=list(worker_t), rss=[uss_at(t) + 150 * MiB for t in worker_t],
                                            uss=[uss_at(t) for t in worker_t], pss=[uss_at(t) for t in worker_t],
                                            swap=[0] * len(worker_t)), 1)
               for pid in (11, 12)]  # fmt: skip
    n = len(TICKS)
    main = ProcessRecord(1, "main", comm="python",
                         series=Series(t=list(TICKS), rss=[PARENT + 200 * MiB] * n, uss=[PARENT] * n, pss=[PARENT] * n,
                                       swap=[0] * n))  # fmt: skip
    held = [PARENT + (2 * uss_at(t) if t >= 100.0 else 0) for t in TICKS]
    system = SystemSeries(t=list(TICKS), available=[AVAILABLE - (h - PARENT) for h in held],
                          cgroup_usage=list(held) if cgroup else [], cgroup_cache=[0] * n if cgroup else [],
                          cgroup_limit=LIMIT if cgroup else None)  # fmt: skip
    spec = {"key": "w2-p2-nopin", "num_workers": 2, "prefetch_factor": 2, "pin_memory": False, "stage": "workers"}
    end: dict[str, Any] = {"status": "ok", "error": None, "batches": 40, "samples": 320, "first_batch_s": 0.0,
                           "samples_per_s": 32.0, "loader_id": 1}  # fmt: skip
    if cgroup:
        end["uncounted_per_worker_bytes"] = 0  # measured inside the trial: the cgroup charged nothing beyond USS
    events = [{"ev": "trial_start", "t": 99.7, **spec}, {"ev": "trial_end", "t": 110.0, **spec, **end}]
    record = loader(1, num_workers=2)
    if epoch is not None:  # run's and attach's epoch clock: its start and its last batch, 40 of `epoch` done
        record.config["dataset"]["len"] = epoch * record.config["batch_size"]
        record.epochs.append(Epoch(0, 99.7, 0.0, batches=40, t_last_batch=110.0))
    return run([record], [main, *workers], system, events)


def _run_answer(data: RunData) -> tuple[int, int, int]:
    _, evidence = workers_fit_memory(data, data.loaders[0])
    return evidence["projected_worker_bytes"], evidence["memory_for_workers_bytes"], evidence["workers_that_fit_memory"]


def _attach_answer(data: RunData) -> tuple[int, int, int]:
    data.meta["attached"] = True
    data.attach = {"t_start": 100.0, "t_end": 110.0, "rerun": "dlprobe run train.py"}  # type: ignore[typeddict-item]
    [finding] = find_attached_growth(data)
    e = finding.evidence
    return e["projected_worker_bytes"], e["memory_for_workers_bytes"], e["workers_that_fit_memory"]


def _tune_answer(data: RunData, epoch: int | None = None) -> tuple[int, int, int]:
    [row], lost = collect_trials(data, epoch)
    assert lost is None and row["status"] == "ok"
    per_worker = row["projected_epoch_bytes"] // row["num_workers"]  # no /dev/shm in flight in this evidence
    assert per_worker == row["projected_worker_bytes"]
    budget = memory_available(data)["budget_bytes"]
    # tune keeps a configuration by whether it fits: ask it of every count, as a trial of that many workers
    counts = [row | {"key": f"w{k}", "num_workers": k, "projected_epoch_bytes": k * per_worker} for k in range(1, 40)]
    recommend(counts, budget, 0.05)
    fit = max((t["num_workers"] for t in counts if t["fits_memory"]), default=0)
    return per_worker, budget, fit


def _search_answer(data: RunData, epoch: int | None, cgroup: bool) -> tuple[int, int, int]:
    """tune's search, in the training process: the same readings as its trial reader takes them, projected on the
    trial's clock (from its start, 99.7, to its last batch, 110, 40 batches made) from the first batch's readings."""
    memory = TrialMemory()
    memory.limit = limit_ceiling(memory_limit(data))  # read live in the training process, as the run read it here
    for proc in data.workers(1):
        for t, uss in proc.series.values("uss"):
            memory.add(proc.pid, t, {"uss": uss})
    per_worker = memory.worker_bytes(99.7, 110.0, epoch_share(40, epoch), steady_from=100.0)
    assert per_worker is not None
    budget = memory_available(data)["budget_bytes"]
    assert budget is not None
    # what the cgroup charged beyond each worker's USS, measured in the trial (none without a cgroup)
    return per_worker, budget, workers_that_fit(budget, per_worker, 0 if cgroup else None) or 0


def test_run_and_tune_read_one_steady_growth() -> None:
    data = _evidence(True)
    _, evidence = workers_fit_memory(data, data.loaders[0])
    [row], _ = collect_trials(_evidence(True), 625)
    assert max(r["uss_growth_bytes"] for r in evidence["workers"]) == row["worker_uss_growth_bytes"] == 40 * MiB
    # tune's trial extends it over the 585 batches left, at its rate per batch made in the 10 s of the 10.3 s trial
    assert row["projected_epoch_bytes"] == 2 * int(_uss(110.0) + 40 * MiB * (625 - 40) / (40 * 10.0 / 10.3))


@pytest.mark.parametrize("cgroup", [True, False], ids=["cgroup-limit-reserve-measured", "host-memory-flat-share"])
def test_run_tune_and_attach_give_one_worker_memory_figure_and_budget(cgroup: bool) -> None:
    answers = {
        "run": _run_answer(_evidence(cgroup)),
        "tune": _tune_answer(_evidence(cgroup)),
        "attach": _attach_answer(_evidence(cgroup)),
        "search": _search_answer(_evidence(cgroup), None, cgroup),
    }
    assert answers["run"] == answers["tune"] == answers["attach"] == answers["search"], answers
    per_worker, budget, fit = answers["run"]
    assert per_worker == _uss(110.0)  # no epoch length to extend the growth to: the peak
    if cgroup:  # the limit less the parent; each worker's measured reserve is 0 (alike, nothing charged beyond USS)
        assert budget == LIMIT - PARENT and fit == budget // per_worker
    else:  # what the host had available with the workers' memory added back; nothing measured: a flat 90% of it
        assert budget == AVAILABLE and fit == int(0.9 * budget // per_worker)


@pytest.mark.parametrize("cgroup", [True, False], ids=["cgroup-limit-reserve-measured", "host-memory-flat-share"])
def test_with_an_epoch_length_run_tune_and_attach_bend_the_growth_alike(cgroup: bool) -> None:
    def evidence() -> RunData:
        return _evidence(cgroup, BATCHES_PER_EPOCH, _uss_bending)

    answers = {
        "run": _run_answer(evidence()),
        "tune": _tune_answer(evidence(), BATCHES_PER_EPOCH),
        "attach": _attach_answer(evidence()),
        "search": _search_answer(evidence(), BATCHES_PER_EPOCH, cgroup),
    }
    assert answers["run"] == answers["tune"] == answers["attach"] == answers["search"], answers
    per_worker, budget, fit = answers["run"]
    # Projected, not the peak: the growth goes on past 10 s, but bent toward the 60 MiB it tends to. tune's old
    # straight line (the later half's 1.8 MiB/s over the 585 batches left) said about 430 MiB.
    assert _uss_bending(110.0) < per_worker < 100 * MiB + 60 * MiB + 8 * MiB, per_worker / MiB
    assert fit == (budget // per_worker if cgroup else int(0.9 * budget // per_worker))
    [row], _ = collect_trials(evidence(), BATCHES_PER_EPOCH)
    projection = row["worker_projection"]  # where it was measured and what bounded it, as run's evidence says
    assert projection is not None and projection["allocations"]["measured_at_epoch_fraction"] == round(40 / 625, 3)
    assert projection["allocations"]["ceiling_bytes"] == (LIMIT if cgroup else AVAILABLE)
