"""What the exposition says about a live run: the supervisor's latest readings of every process, loader and the
machine, as metric families. Built from scratch each time from what is live now, so a worker that has exited is
dropped from the next exposition, never accumulated (the series of a long job stay as many as its live processes).

Findings exist only once the run has ended (the analysis reads the whole run directory): live, the hang guard's
records (`dlprobe_hangs_total`) and the probe's own problems are what there is; docs/fleet.md says so."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from dlprobe.rundir.schema import SAMPLE_CPU, SAMPLE_FDS
from dlprobe.supervisor.prom.exposition import COUNTER, GAUGE, Family, Labels

if TYPE_CHECKING:  # run_watch owns both and imports this module: the types only, no cycle at run time
    from dlprobe.supervisor.run_watch import Progress
    from dlprobe.supervisor.sampler import Sampler

# A script that builds a new DataLoader every epoch (a validation loader, say) gives each a new id: only each
# process's most recent loaders are exported, so their series stay bounded too.
MAX_LOADERS_PER_PROCESS = 8

# smaps_rollup's page kinds as the sampler names them (system/procmem.KIND_FIELDS) -> the `kind` label
PSS_KINDS = {"pss_anon": "anon", "pss_file": "file", "pss_shmem": "shmem"}
PRIVATE_KINDS = {"private_clean": "clean", "private_dirty": "dirty"}


@dataclass(frozen=True)
class JobLabels:
    """The labels every series carries: which job, on which host (the supervisor's, unless a rank says its own)."""

    job: str
    host: str


@dataclass(frozen=True)
class LiveState:
    """What the families are built from: the watch's folded events and the sampler's latest readings."""

    progress: Progress
    sampler: Sampler
    target_pid: int
    started_at: float
    hangs: int  # hang records the guard has written so far
    problems: int  # places where the probe failed so far (supervisor/problems.py)


def _text(value: Any) -> str:
    return "" if value is None else str(value)


class _Families:
    """The run's families, in the order the exposition lists them."""

    def __init__(self) -> None:
        self.all: list[Family] = []

    def new(self, name: str, kind: str, help_text: str) -> Family:
        family = Family(name, kind, help_text)
        self.all.append(family)
        return family


def families(job: JobLabels, state: LiveState) -> list[Family]:
    out = _Families()
    _process_families(out, job, state)
    _loader_families(out, job, state)
    _system_families(out, job, state)
    return out.all


def _rank_labels(job: JobLabels, progress: Progress, main_pid: int) -> Labels:
    identity = progress.identity.get(main_pid, {})
    return {
        "job": job.job,
        "host": _text(identity.get("host")) or job.host,
        "rank": _text(progress.ranks.get(main_pid)),
        "local_rank": _text(identity.get("local_rank")),
    }


def _process_families(out: _Families, job: JobLabels, state: LiveState) -> None:
    progress, sampler = state.progress, state.sampler
    live = sampler.known - sampler.gone
    w_uss = out.new("dlprobe_worker_uss_bytes", GAUGE, "A DataLoader worker's USS: the memory only it holds "
                    "(copy-on-write copies of the parent's pages included), from /proc/PID/smaps_rollup.")  # fmt: skip
    w_pss = out.new("dlprobe_worker_pss_bytes", GAUGE, "A DataLoader worker's PSS: its private pages plus its share "
                    "of every shared page (what a memory limit and the OOM killer count).")  # fmt: skip
    w_pss_kind = out.new("dlprobe_worker_pss_kind_bytes", GAUGE,
                         "A worker's PSS by kind of page: anon (heap, copies), file, shmem (Linux 5.3+).")  # fmt: skip
    w_private = out.new("dlprobe_worker_private_bytes", GAUGE, "A worker's private pages, clean or dirty: dirty "
                        "rising while anonymous memory stays flat is copy-on-write.")  # fmt: skip
    w_anon = out.new("dlprobe_worker_anonymous_bytes", GAUGE, "A worker's anonymous memory (smaps_rollup Anonymous).")
    w_rss = out.new("dlprobe_worker_rss_bytes", GAUGE, "A worker's RSS (counts shared pages once per process).")
    w_swap = out.new("dlprobe_worker_swap_bytes", GAUGE, "A worker's memory swapped out.")
    w_fds = out.new("dlprobe_worker_open_fds", GAUGE, "A worker's open file descriptors.")
    w_cpu = out.new("dlprobe_worker_cpu_seconds_total", COUNTER, "A worker's CPU time, user and system.")
    m_uss = out.new("dlprobe_main_uss_bytes", GAUGE, "A training process's USS (the target, or each rank's).")
    m_pss = out.new("dlprobe_main_pss_bytes", GAUGE, "A training process's PSS.")
    m_rss = out.new("dlprobe_main_rss_bytes", GAUGE, "A training process's RSS.")
    m_fds = out.new("dlprobe_main_open_fds", GAUGE, "A training process's open file descriptors.")
    m_cpu = out.new("dlprobe_main_cpu_seconds_total", COUNTER, "A training process's CPU time, user and system.")
    tree = out.new("dlprobe_tree_pss_bytes", GAUGE, "The PSS of every process of the job's tree on this host, "
                   "summed: what the machine really holds for the job.")  # fmt: skip
    count = out.new("dlprobe_tree_processes", GAUGE, "Processes of the job's tree the probe is watching.")

    for pid, (main_pid, loader, worker_id) in sorted(progress.workers.items()):
        if pid not in live:
            continue
        reading = sampler.last.get(pid, {})
        labels = {**_rank_labels(job, progress, main_pid), "loader": str(loader), "worker": str(worker_id),
                  "pid": str(pid), "start_method": progress.start_methods.get((main_pid, loader), "")}  # fmt: skip
        w_uss.add(labels, reading.get("uss"))
        w_pss.add(labels, reading.get("pss"))
        for key, kind in PSS_KINDS.items():
            w_pss_kind.add({**labels, "kind": kind}, reading.get(key))
        for key, kind in PRIVATE_KINDS.items():
            w_private.add({**labels, "kind": kind}, reading.get(key))
        w_anon.add(labels, reading.get("anon"))
        w_rss.add(labels, reading.get("rss"))
        w_swap.add(labels, reading.get("swap"))
        w_fds.add(labels, reading.get(SAMPLE_FDS))
        w_cpu.add(labels, reading.get(SAMPLE_CPU))

    for pid in progress.mains(state.target_pid):
        if pid not in live:
            continue
        reading = sampler.last.get(pid, {})
        labels = {**_rank_labels(job, progress, pid), "pid": str(pid)}
        m_uss.add(labels, reading.get("uss"))
        m_pss.add(labels, reading.get("pss"))
        m_rss.add(labels, reading.get("rss"))
        m_fds.add(labels, reading.get(SAMPLE_FDS))
        m_cpu.add(labels, reading.get(SAMPLE_CPU))

    pss = [sampler.last.get(pid, {}).get("pss") for pid in live]
    known = [value for value in pss if value is not None]
    tree.add({"job": job.job, "host": job.host}, sum(known) if known else None)
    count.add({"job": job.job, "host": job.host}, len(live))


def _loader_families(out: _Families, job: JobLabels, state: LiveState) -> None:
    progress, sampler = state.progress, state.sampler
    batches = out.new("dlprobe_loader_batches_total", COUNTER, "Batches the training loop took from the loader.")
    wait = out.new("dlprobe_loader_data_wait_seconds_total", COUNTER,
                   "Seconds the training loop waited for the loader's next batch.")  # fmt: skip
    last = out.new("dlprobe_loader_last_batch_timestamp_seconds", GAUGE,
                   "When the loop last took batches from the loader (Unix time; time() minus it: how long it has "
                   "waited, or done something else).")  # fmt: skip
    workers = out.new("dlprobe_loader_workers", GAUGE, "The loader's worker processes running now.")
    live = sampler.known - sampler.gone
    by_process: dict[int, list[int]] = {}
    for main_pid, loader in progress.batches:
        if main_pid in live:  # a rank that has exited takes its loaders' series with it
            by_process.setdefault(main_pid, []).append(loader)
    running: dict[tuple[int, int], int] = {}
    for pid, (main_pid, loader, _worker_id) in progress.workers.items():
        if pid in live:
            running[(main_pid, loader)] = running.get((main_pid, loader), 0) + 1
    for main_pid, loaders in sorted(by_process.items()):
        for loader in sorted(loaders)[-MAX_LOADERS_PER_PROCESS:]:
            key = (main_pid, loader)
            labels = {**_rank_labels(job, progress, main_pid), "loader": str(loader), "pid": str(main_pid),
                      "start_method": progress.start_methods.get(key, "")}  # fmt: skip
            batches.add(labels, progress.batches[key])
            wait.add(labels, round(progress.wait_s.get(key, 0.0), 6))
            last.add(labels, progress.last_batch_at.get(key))
            workers.add(labels, running.get(key, 0))


def _system_families(out: _Families, job: JobLabels, state: LiveState) -> None:
    system = state.sampler.last_system
    labels = {"job": job.job, "host": job.host}
    shm = system.get("shm") or {}
    out.new("dlprobe_shm_used_bytes", GAUGE, "Bytes used in /dev/shm (the whole tmpfs: every process's).").add(
        labels, shm.get("used")
    )
    out.new("dlprobe_shm_size_bytes", GAUGE, "The size of the /dev/shm tmpfs.").add(labels, shm.get("total"))
    out.new("dlprobe_memory_available_bytes", GAUGE, "MemAvailable from /proc/meminfo.").add(
        labels, system.get("avail")
    )
    cg = system.get("cg") or {}
    out.new("dlprobe_cgroup_memory_usage_bytes", GAUGE,
            "Memory use of the cgroup whose limit binds the job (its own cgroup's without a limit).").add(
        labels, cg.get("usage")
    )  # fmt: skip
    out.new("dlprobe_cgroup_memory_limit_bytes", GAUGE, "The tightest memory limit over the job's cgroup.").add(
        labels, cg.get("limit")
    )
    out.new("dlprobe_hangs_total", COUNTER, "Hangs the probe has recorded (no batch for --hang-timeout while the loop "
            "waited for data): stacks and process states saved in the run directory.").add(
        labels, state.hangs
    )  # fmt: skip
    out.new("dlprobe_probe_problems", GAUGE, "Places where the probe itself failed so far (a write refused, the "
            "exporter's own errors): what the report will list as probe-degraded.").add(
        labels, state.problems
    )  # fmt: skip
    out.new("dlprobe_run_start_timestamp_seconds", GAUGE, "When the run started (Unix time).").add(
        labels, round(state.started_at, 3)
    )
