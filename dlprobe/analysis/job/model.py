"""A job: run directories whose events come from several probed processes (ranks), split into one view per rank.

Each rank's view is an ordinary RunData (its own events, loaders, workers, in-flight slots and hang records) so
every analyzer runs on it unchanged; the node-wide readings (samples of the whole tree, cgroup, /dev/shm) stay
with the run they came from, one run directory per node.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, cast

from dlprobe.analysis.measures.stats import job_pss_summable, metric_summary, tree_total
from dlprobe.analysis.measures.worker_growth import epoch_fraction, loader_worker_end
from dlprobe.analysis.run.model import LoaderRecord, ProcessRecord, RunData, loaders_from_events
from dlprobe.rundir.schema import EV_EPOCH, EV_PROCESS, HangRecord, Meta, ProcessEvent


@dataclass
class RankView:
    """One probed process of a job (a rank, or any process that built a DataLoader) and what belongs to it."""

    pid: int
    identity: ProcessEvent
    run: RunData  # only this process, its workers and their events; the node's system readings
    node: int  # index of the run directory (node) it was recorded in
    node_rank: int | None = None

    @property
    def rank(self) -> int | None:
        return self.identity.get("rank")

    @property
    def host(self) -> str | None:
        return self.identity.get("host")

    def sort_key(self) -> tuple[int, int, int, int]:
        rank = self.rank
        return (self.node_rank if self.node_rank is not None else self.node, 0 if rank is not None else 1, rank or 0,
                self.pid)  # fmt: skip


@dataclass
class NodeMemory:
    """The node's memory over time: every process of the tree together (what the OOM killer sees)."""

    node: int
    node_rank: int | None
    host: str | None
    t: list[float] = field(default_factory=list)
    pss: list[int] = field(default_factory=list)  # sum over the processes read in each sampling round
    uss: list[int] = field(default_factory=list)
    limit_bytes: int | None = None
    limit_kind: str | None = None  # cgroup | MemTotal
    # The node total at the end of the epoch, from each rank's growth so far; None when every epoch seen ended (the
    # peak is then what an epoch takes).
    projected_bytes: int | None = None
    workers: int = 0  # worker processes across the node's ranks
    worker_peak_bytes: int | None = None  # the largest per-worker USS projected to the end of the epoch
    workers_per_rank_fit: int | None = None

    @property
    def pss_peak(self) -> int | None:
        return max(self.pss) if self.pss else None


@dataclass
class Job:
    runs: list[RunData]
    ranks: list[RankView]
    nodes: list[NodeMemory]
    # Processes with events that are neither a rank nor a rank's worker (a rank that died before its first
    # loader, a launcher that imported the probe): their events, by pid.
    others: dict[int, list[dict[str, Any]]] = field(default_factory=dict)

    @property
    def several_nodes(self) -> bool:
        return len(self.runs) > 1

    def label(self, view: RankView) -> str:
        return rank_label(view, self.several_nodes)


def rank_label(view: RankView, several_nodes: bool = False) -> str:
    """How a rank is named to people: "rank 3", "node 1 rank 3" across nodes, "pid N" outside a distributed job."""
    who = f"rank {view.rank}" if view.rank is not None else f"pid {view.pid}"
    if several_nodes:
        node = view.node_rank if view.node_rank is not None else view.node
        return f"node {node} {who}"
    return who


def identities(run: RunData) -> dict[int, ProcessEvent]:
    """Each probed process's last identity event, by pid (the last one wins: Lightning learns its rank late)."""
    found: dict[int, ProcessEvent] = {}
    for ev in run.events:
        if ev.get("ev") == EV_PROCESS and isinstance(ev.get("pid"), int):
            found[ev["pid"]] = cast(ProcessEvent, ev)
    return found


def is_job(runs: list[RunData]) -> bool:
    """Several run directories, or one whose events come from more than one probed process or from a rank of a
    distributed job (the other ranks may have died before building a loader)."""
    if len(runs) != 1:
        return len(runs) > 1
    found = identities(runs[0])
    return len(found) > 1 or any((ident.get("world_size") or 1) > 1 for ident in found.values())


def _worker_pids(events: list[dict[str, Any]], writer: int) -> set[int]:
    return {
        int(w["pid"])
        for ev in events
        if ev.get("ev") == EV_EPOCH and ev.get("pid") == writer
        for w in ev.get("workers") or []
        if isinstance(w, dict) and "pid" in w
    }


def _descendants(processes: list[ProcessRecord], root: int, stop: set[int]) -> set[int]:
    """root and every process below it in the sampled tree, not entering another rank's subtree."""
    children: dict[int, list[int]] = {}
    for proc in processes:
        if proc.ppid is not None:
            children.setdefault(proc.ppid, []).append(proc.pid)
    found, todo = {root}, [root]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found and child not in stop:
                found.add(child)
                todo.append(child)
    return found


def _rank_hang(record: HangRecord, pids: set[int]) -> HangRecord:
    """A hang record as this rank would have it alone: its own processes only."""
    mine = dict(record)
    # a worker thread's entry is keyed by its thread id: it belongs to the rank whose process it runs in
    mine["processes"] = [
        p for p in record.get("processes") or [] if p.get("pid") in pids or p.get("process_pid") in pids
    ]
    return cast(HangRecord, mine)


def _view(run: RunData, pid: int, identity: ProcessEvent, node: int, others: set[int]) -> RankView:
    workers = _worker_pids(run.events, pid)
    pids = _descendants(run.processes, pid, others) | workers | {pid}
    events = [e for e in run.events if e.get("pid") in pids]
    if len(events) == len(run.events) and run.worker_starts is not None:
        # the rank is the whole run (one probed process): its loaders are the run's, folded once by load_run
        loaders, worker_of = run.loaders, run.worker_starts
    else:
        loaders, worker_of = loaders_from_events(events)
    processes = []
    for proc in run.processes:
        if proc.pid not in pids:
            continue
        if proc.pid in worker_of:
            loader_id, worker_id = worker_of[proc.pid][:2]
            processes.append(replace(proc, role="worker", loader_id=loader_id, worker_id=worker_id))
        else:
            processes.append(replace(proc, role="main" if proc.pid == pid else "other"))
    meta = cast(Meta, {**run.meta, "target_pid": pid})
    hangs = [_rank_hang(h, pids) for h in run.hangs if h.get("main_pid") == pid]
    view_run = RunData(
        run.path,
        meta,
        run.result,
        loaders,
        processes,
        run.system,
        events,
        # worker threads' slots are keyed by thread id and name the process they run in
        inflight={p: slot for p, slot in run.inflight.items() if p in pids or slot.get("tid") and slot["pid"] in pids},
        hangs=hangs,
        gone={p: t for p, t in run.gone.items() if p in pids},
        kernel=run.kernel,
        faults={p: record for p, record in run.faults.items() if p in pids},
        stacks=run.stacks,
        attach=run.attach,
        read_problems=run.read_problems,  # one finding per node: equal on every rank, so merged into one
    )
    view_run.threads = [t for t in run.threads if t.pid in pids]
    node_rank = identity.get("node_rank")
    if node_rank is None:
        node_rank = run.meta.get("node_rank")
    return RankView(pid, identity, view_run, node, node_rank)


def _epoch_fraction(view: RankView, loader: LoaderRecord) -> float:
    return epoch_fraction(loader, view.identity.get("world_size") or 1)


def _worker_ends(view: RankView) -> list[tuple[int, int]]:
    """(private memory at the end of its epoch, USS peak so far) of each of the rank's workers that was read: the
    per-worker figure of `run`'s advice, `tune` and `attach` (worker_growth.loader_worker_end), or its peak once the
    epoch ended. Computed once per rank for both the node's total and the workers that fit."""
    ends = []
    for loader in view.run.loaders:
        running = _epoch_fraction(view, loader) < 1.0
        for proc in view.run.workers(loader.loader_id):
            peak = metric_summary(proc.series, "uss")["peak"]
            if peak is None:
                continue
            end = loader_worker_end(view.run, loader, proc) if running else None
            ends.append((end[0] if end else int(peak), int(peak)))
    return ends


def _node_memory(run: RunData, node: int, views: list[RankView]) -> NodeMemory:
    times, pss = job_pss_summable(run.processes)  # no sum holding a parent's reading from before its fork
    uss_times, uss = tree_total(run.processes, "uss")
    uss_at = dict(zip(uss_times, uss, strict=True))
    host = next((v.host for v in views if v.host), None) or (run.meta.get("machine") or {}).get("host")
    node_rank = run.meta.get("node_rank")
    if node_rank is None:
        node_rank = next((v.node_rank for v in views if v.node_rank is not None), None)
    memory = NodeMemory(node, node_rank, host, times, pss, [uss_at.get(t, 0) for t in times])
    if run.system.cgroup_limit:
        memory.limit_bytes, memory.limit_kind = int(run.system.cgroup_limit), "cgroup"
    elif (run.meta.get("machine") or {}).get("mem_total"):
        memory.limit_bytes, memory.limit_kind = int(run.meta["machine"]["mem_total"]), "MemTotal"
    ends = [_worker_ends(v) for v in views]
    # what the workers would still add by the end of the epoch (private growth adds to the node's PSS one for one)
    growth = sum(end - peak for rank in ends for end, peak in rank)
    if memory.pss and growth:  # an epoch still running: its growth so far, extended to the epoch's end
        memory.projected_bytes = max(memory.pss) + growth
    memory.workers = sum(max((lo.num_workers for lo in v.run.loaders), default=0) for v in views)
    _fit_workers(memory, views, ends)
    return memory


def _fit_workers(memory: NodeMemory, views: list[RankView], ends: list[list[tuple[int, int]]]) -> None:
    """How many workers per rank the node's memory holds, at each worker's memory projected to the epoch's end
    (`ends`: _worker_ends of each view)."""
    peaks = [end for rank in ends for end, _peak in rank]
    ranks_own = 0
    for view in views:
        main = next((p for p in view.run.processes if p.role == "main"), None)
        own = [v for _, v in main.series.values("uss")] if main else []
        ranks_own += max(own) if own else 0
    if not peaks or not memory.limit_bytes or not views:
        return
    memory.worker_peak_bytes = max(peaks)
    # Keep a fifth of the limit for the page cache, the model and everything the sampler does not see.
    budget = 0.8 * memory.limit_bytes - ranks_own
    memory.workers_per_rank_fit = max(0, int(budget // (memory.worker_peak_bytes * len(views))))


def split_job(runs: list[RunData]) -> Job:
    """One view per probed process of every run directory, plus each node's memory."""
    views: list[RankView] = []
    nodes: list[NodeMemory] = []
    others: dict[int, list[dict[str, Any]]] = {}
    for node, run in enumerate(runs):
        found = identities(run)
        if not found and run.meta.get("target_pid"):
            # A run from before identity events (or a probe that never said who it is): the target is the rank.
            found = {int(run.meta["target_pid"]): cast(ProcessEvent, {"pid": run.meta["target_pid"]})}
        node_views = [_view(run, pid, ident, node, set(found) - {pid}) for pid, ident in found.items()]
        views.extend(node_views)
        nodes.append(_node_memory(run, node, node_views))
        known = set().union(*(_pids_of(v) for v in node_views)) if node_views else set()
        for ev in run.events:
            pid = ev.get("pid")
            if isinstance(pid, int) and pid not in known:
                others.setdefault(pid, []).append(ev)
    views.sort(key=RankView.sort_key)
    return Job(runs, views, nodes, others)


def _pids_of(view: RankView) -> set[int]:
    return {p.pid for p in view.run.processes} | {view.pid} | _worker_pids(view.run.events, view.pid)


def node_of(job: Job, view: RankView) -> NodeMemory:
    return job.nodes[view.node]
