"""`straggler-rank`: the rank whose loader holds the others back, from the ranks' per-batch data waits.

In a synchronous job (DDP's gradient all_reduce every step) every rank runs at the pace of the slowest: the ranks
whose data is ready wait in the collective, the slow one waits in `next()` for its batch. So the straggler is the
rank whose own data wait stands above the others': its median wait over its steady batches (each epoch's first, the
workers' start, left out) above the median of the other ranks' waits by more than `MAD_SPREADS` robust spreads, an
absolute floor and a share of theirs, once every rank has `MIN_STEADY_BATCHES`; and, the same test, whose loader
takes longer to supply a batch (its workers' own build time per batch over their number). The waits alone are not
enough: with equal loaders one rank settles behind the others by its workers' start-up and waits for every batch
(measured: 40 ms a batch against 1.4 ms, identical datasets, on a busy machine). Whether it follows the data or the
rank is read from the epochs: the slowest rank in each epoch, and whether the slow rank's samples changed between
them (its sampler's order digest)."""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from dlprobe.analysis.evidence.attach_job import RankWait
from dlprobe.analysis.evidence.finding import Finding
from dlprobe.analysis.evidence.schema import Evidence
from dlprobe.analysis.job.model import Job, RankView
from dlprobe.analysis.measures.timed_batches import timed_batches
from dlprobe.analysis.measures.worker_cpu import loader_cpu
from dlprobe.analysis.run.model import LoaderRecord
from dlprobe.rundir.schema import EV_SAMPLE_ORDER

MIN_STEADY_BATCHES = 20  # per rank: fewer and a few slow batches (a cold cache, a GC pause) would decide it
MIN_EPOCH_BATCHES = 10  # per rank and epoch, to name the slowest rank of that epoch
MAD_SPREADS = 4.0  # robust spreads (scaled MAD) above the others' median wait
FLOOR_S = 0.005  # and at least 5 ms per batch more than theirs: under it no rank holds a step back measurably
SHARE = 0.25  # and at least a quarter more than theirs: ranks equally slow are not stragglers
MAD_SCALE = 1.4826  # MAD x this estimates a normal spread's standard deviation


def _mad(values: list[float]) -> float:
    if len(values) < 2:
        return 0.0
    center = statistics.median(values)
    return MAD_SCALE * statistics.median(abs(v - center) for v in values)


def _steady(epoch_waits: list[float]) -> list[float]:
    return epoch_waits[1:]  # the epoch's first batch waits for its workers to start: no steady cost


def _node_rank_label(view: RankView) -> str:
    """'node K rank R' whatever the number of run directories: a straggler is a place as much as a rank."""
    node = view.node_rank if view.node_rank is not None else view.identity.get("node_rank")
    node = node if node is not None else view.node
    who = f"rank {view.rank}" if view.rank is not None else f"pid {view.pid}"
    return f"node {node} {who}"


def _loader(view: RankView, loader_id: int) -> LoaderRecord | None:
    return next((lo for lo in view.run.loaders if lo.loader_id == loader_id), None)


def _order_changed(view: RankView, loader_id: int) -> bool | None:
    """Whether the rank's sampler gave other samples in other epochs (None: fewer than two epochs hashed)."""
    digests = {
        int(ev["epoch"]): ev.get("digest")
        for ev in view.run.events
        if ev.get("ev") == EV_SAMPLE_ORDER and ev.get("loader") == loader_id and isinstance(ev.get("epoch"), int)
    }
    if len(digests) < 2:
        return None
    return len(set(digests.values())) > 1


def _slowest_by_epoch(views: list[tuple[RankView, LoaderRecord]], labels: dict[int, str]) -> list[str]:
    """The rank with the largest median steady wait in each epoch every rank ran far enough."""
    epochs = min(len(lo.epochs) for _, lo in views)
    slowest = []
    for e in range(epochs):
        medians = {}
        for view, lo in views:
            waits = _steady(lo.epochs[e].waits)
            if len(waits) < MIN_EPOCH_BATCHES:
                break
            medians[view.pid] = statistics.median(waits)
        else:
            slowest.append(labels[max(medians, key=lambda pid: medians[pid])])
    return slowest


def _where(label: str, slowest: list[str], changed: bool | None) -> tuple[str, str]:
    """(what the epochs say: stays, moves or unknown; the sentence that says it)."""
    if len(slowest) < 2:
        return "unknown", "One epoch seen: whether the slowness follows the data or stays with the rank takes two."
    if any(s != label for s in slowest):
        return "moves", (
            f"The slowest rank changes from epoch to epoch ({', '.join(slowest)}): it follows the data as the "
            "sampler reshuffles it (a shard of heavier or larger samples), not a node."
        )
    if changed:
        return "stays", (
            f"It is the slowest in all {len(slowest)} epochs while its samples change between them (its sampler's "
            "order differs): the rank or its node is slow (a slower disk or mount, fewer or busier cores), not its "
            "share of the data."
        )
    return "stays", (
        f"It is the slowest in all {len(slowest)} epochs, and it read the same samples in each (or their order was "
        "not recorded), so its data (a shard of heavier samples) and its node cannot be told apart here."
    )


_FIX = {
    "stays": (
        "Look at {label}'s node: its disk or mount (iostat -x, a network filesystem's latency), its cores (other "
        "jobs, a CPU limit), and its loader's workers; give that rank more workers, cache its data locally, or move "
        "it to another node."
    ),
    "moves": (
        "Balance the samples' cost across ranks: shard by size (sort or bucket samples by length before "
        "DistributedSampler splits them), or hide slow batches behind more workers or prefetch_factor."
    ),
    "unknown": (
        "Run two epochs to tell data from node; meanwhile give {label}'s loader more workers or prefetch_factor, and "
        "check its node's disk and cores."
    ),
}


@dataclass
class _Outlier:
    """The rank whose median stands above the others' pooled median by more than the threshold."""

    pid: int
    medians: dict[int, float]
    center: float
    spread: float
    threshold: float

    @property
    def gap(self) -> float:
        return self.medians[self.pid] - self.center


def _outlier(values: dict[int, list[float]]) -> _Outlier | None:
    medians = {pid: statistics.median(v) for pid, v in values.items()}
    slow = max(medians, key=lambda pid: medians[pid])
    others = [x for pid, v in values.items() if pid != slow for x in v]
    center = statistics.median(others)
    # Within-rank noise (the others' per-batch values) and, with three ranks or more, rank-to-rank spread.
    spread = max(_mad(others), _mad([m for pid, m in medians.items() if pid != slow]))
    threshold = max(MAD_SPREADS * spread, FLOOR_S, SHARE * center)
    found = _Outlier(slow, medians, center, spread, threshold)
    return found if found.gap > threshold else None


def _supply(loader: LoaderRecord, view: RankView, waits: list[float]) -> list[float]:
    """Seconds per batch the rank's loader takes to supply one: each batch its workers built (their own clocks)
    over the workers building side by side; without workers the loop loads it itself, and its wait is that time."""
    if loader.num_workers == 0:
        return waits
    return [row.build_s / loader.num_workers for row in timed_batches(view.run, loader.loader_id)]


def _finding(job: Job, loader_id: int, views: list[tuple[RankView, LoaderRecord]]) -> Finding | None:
    waits = {view.pid: [w for e in lo.epochs for w in _steady(e.waits)] for view, lo in views}
    supply = {view.pid: _supply(lo, view, waits[view.pid]) for view, lo in views}
    if min(len(w) for w in [*waits.values(), *supply.values()]) < MIN_STEADY_BATCHES:
        return None
    # The symptom and its cause, on the same rank: it waits for data more than the others, and its loader takes
    # longer per batch. The waits alone mislead: ranks with equal loaders settle with one of them behind by the
    # workers' start-up, waiting for every batch, while the others' workers fill their queues during the collective.
    waited, slower = _outlier(waits), _outlier(supply)
    if waited is None or slower is None or waited.pid != slower.pid:
        return None
    slow_pid = waited.pid
    medians, center = waited.medians, waited.center
    labels = {view.pid: _node_rank_label(view) for view, _ in views}
    view, loader = next((v, lo) for v, lo in views if v.pid == slow_pid)
    label = labels[slow_pid]
    slowest = _slowest_by_epoch(views, labels)
    moves, where = _where(label, slowest, _order_changed(view, loader_id))
    cpu = loader_cpu(view.run, loader) if loader.num_workers else None
    bound = f" ({cpu.bound}: its workers {cpu.describe()})" if cpu is not None else ""
    per_rank: list[RankWait] = [
        {"rank": labels[v.pid], "steady_batches": len(waits[v.pid]), "median_wait_s": round(medians[v.pid], 6),
         "mean_wait_s": round(statistics.fmean(waits[v.pid]), 6), "num_workers": lo.num_workers,
         "supply_s_per_batch": round(slower.medians[v.pid], 6)}
        for v, lo in views
    ]  # fmt: skip
    evidence: Evidence = {
        "rank": job.label(view),
        "straggler": label,
        "rank_waits": per_rank,
        "others_median_wait_s": round(center, 6),
        "wait_spread_s": round(waited.spread, 6),
        "threshold_s": round(waited.threshold, 6),
        "others_supply_s_per_batch": round(slower.center, 6),
        "supply_threshold_s": round(slower.threshold, 6),
        "slowest_by_epoch": slowest,
        "slowness_follows": moves,
        "worker_bound": cpu.bound if cpu is not None else None,
    }
    title = (
        f"{label[0].upper()}{label[1:]}'s loader {loader_id} holds the other ranks back{bound}: it waited "
        f"{1000 * medians[slow_pid]:.1f} ms per batch for data, the others {1000 * center:.1f} ms; it takes "
        f"{1000 * slower.medians[slow_pid]:.1f} ms to supply a batch, theirs {1000 * slower.center:.1f} ms"
    )
    detail = (
        "Every step of a synchronous job waits for its slowest rank: the others, their batches ready, wait in the "
        f"collective while {label} waits in next() for its batch. Over {min(len(w) for w in waits.values())}+ "
        f"steady batches per rank its median wait is {1000 * waited.gap:.1f} ms above the others' and its loader's "
        f"time per batch (the workers' own build time over their number) {1000 * slower.gap:.1f} ms above theirs "
        f"(each threshold the larger of {MAD_SPREADS:g} robust spreads, {1000 * FLOOR_S:.0f} ms and "
        f"{100 * SHARE:.0f}% of theirs). {where}"
    )
    return Finding("straggler-rank", "warning", title, detail, _FIX[moves].format(label=label), evidence, loader_id)


def find_straggler_rank(job: Job) -> list[Finding]:
    """One finding per loader whose ranks' steady data waits single one rank out."""
    findings = []
    loader_ids = sorted({lo.loader_id for v in job.ranks for lo in v.run.loaders})
    for loader_id in loader_ids:
        views = [(v, lo) for v in job.ranks if not v.run.ended_in_error and (lo := _loader(v, loader_id)) is not None]
        if len(views) < 2:
            continue
        found = _finding(job, loader_id, views)
        if found is not None:
            findings.append(found)
    return findings
