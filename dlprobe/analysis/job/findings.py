"""Findings of a job: every analyzer per rank, merged where ranks agree, and those that only exist across ranks
(`node-oversubscribed`, `uneven-ranks`, `rank-duplicates`, `straggler-rank`, a hang that stalls every rank,
`rank-failed`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

from dlprobe.analysis import analysis_failed, analyze, fold_script_errors
from dlprobe.analysis.evidence.finding import SEVERITIES, Finding
from dlprobe.analysis.evidence.rows import LauncherFailure
from dlprobe.analysis.findings.memory import cow_total, find_cow_growth
from dlprobe.analysis.findings.script import find_run_problems
from dlprobe.analysis.job.hang import job_hang
from dlprobe.analysis.job.merge import merge_rank_findings, ranks_text
from dlprobe.analysis.job.model import Job, RankView
from dlprobe.analysis.job.straggler import find_straggler_rank
from dlprobe.analysis.measures.loop_timing import recorded_usable_cores
from dlprobe.analysis.run.model import RunData
from dlprobe.rundir.schema import EV_DUPES, EV_SCRIPT_ERROR, STOP_REASON_HANG
from dlprobe.units import format_bytes

UNEVEN_SHARE = 0.5  # a rank with fewer than half the batches of the busiest rank idles or hangs the job
SHARED_SAMPLES_SHARE = 0.2  # of a rank's sampled digests also read by another rank
MIN_SHARED_SAMPLES = 4
DISTINCT_SAMPLES_SHARE = 0.9  # a rank's own samples must be this distinct for content hashes to identify samples


def find_node_oversubscribed(job: Job) -> list[Finding]:
    """ranks x num_workers against the node's usable cores and memory; PyTorch checks one loader only."""
    findings = []
    for memory in job.nodes:
        views = [v for v in job.ranks if v.node == memory.node]
        if len(views) < 2:
            continue
        run = job.runs[memory.node]
        cores = recorded_usable_cores(run)
        per_rank = {job.label(v): max((lo.num_workers for lo in v.run.loaders), default=0) for v in views}
        workers = sum(per_rank.values())
        if workers == 0:
            continue
        most = max(per_rank.values())
        fit_cores = max(1, cores // len(views) - 1) if cores > len(views) else 1
        over_cores = workers + len(views) > cores and most > fit_cores
        fit_memory = memory.workers_per_rank_fit
        over_memory = fit_memory is not None and fit_memory < most
        if not over_cores and not over_memory:
            continue
        fit = min([fit_cores] + ([fit_memory] if fit_memory is not None else []))
        shape = f"{len(views)} ranks x {most} workers = {workers} worker processes"
        reasons = []
        if over_cores:
            reasons.append(f"with the {len(views)} training processes they compete for {cores} usable core(s)")
        if over_memory:
            reasons.append(
                f"each worker is projected to reach {format_bytes(memory.worker_peak_bytes)} and the node's "
                f"{format_bytes(memory.limit_bytes)} ({memory.limit_kind}) holds {fit_memory} per rank"
            )
        node_name = memory.node_rank if memory.node_rank is not None else memory.node
        where = f" on node {node_name}" if job.several_nodes else ""
        findings.append(
            Finding(
                code="node-oversubscribed",
                severity="error" if over_memory else "warning",
                title=f"{shape}{where}: " + "; ".join(reasons) + f"; {fit} per rank fit",
                detail=(
                    "num_workers is per rank: every rank starts its own workers, so the node runs ranks x "
                    "num_workers worker processes next to the ranks themselves, and the OOM killer sees their sum. "
                    "PyTorch's own worker-count warning looks at one loader in one process and cannot see this."
                ),
                fix=f"DataLoader(..., num_workers={max(fit, 0)}) on each rank (or fewer ranks per node)"
                + ("; shrink per-worker memory first (see cow-growth)" if over_memory else "")
                + ".",
                evidence={
                    # "ranks" means the per-rank list in every other finding (_merged); this is a count
                    "rank_count": len(views),
                    "num_workers_per_rank": per_rank,
                    "worker_processes": workers,
                    "usable_cores": cores,
                    "workers_per_rank_fit_cores": fit_cores,
                    "workers_per_rank_fit_memory": fit_memory,
                    "worker_projected_bytes": memory.worker_peak_bytes,
                    "node_pss_peak_bytes": memory.pss_peak,
                    "memory_limit_bytes": memory.limit_bytes,
                    "memory_limit_kind": memory.limit_kind,
                },
            )
        )
    return findings


def _batches_per_epoch(view: RankView, loader_id: int) -> tuple[int, bool] | None:
    """(batches of the rank's first epoch of this loader, whether that epoch ended)."""
    loader = next((lo for lo in view.run.loaders if lo.loader_id == loader_id), None)
    if loader is None or not loader.epochs:
        return None
    epoch = loader.epochs[0]
    return epoch.batches, epoch.t_end is not None


def find_uneven_ranks(job: Job) -> list[Finding]:
    """A rank whose loader yields no or far fewer batches per epoch than the others."""
    findings = []
    loader_ids = sorted({lo.loader_id for v in job.ranks for lo in v.run.loaders})
    if len(job.ranks) < 2:
        return []
    for lid in loader_ids:
        counts = {}
        for view in job.ranks:
            got = _batches_per_epoch(view, lid)
            if got is not None:
                counts[job.label(view)] = got
        if len(counts) < 2:
            continue
        most = max(n for n, _ in counts.values())
        # A short epoch counts only once it ended: a rank cut off by another's crash is not a short rank.
        short = {label: n for label, (n, ended) in counts.items() if ended and n < UNEVEN_SHARE * most}
        if most < 2 or not short:
            continue
        empty = [label for label, n in short.items() if n == 0]
        names = ranks_text(list(short))
        numbers = ", ".join(f"{label}: {n}" for label, (n, _) in counts.items())
        findings.append(
            Finding(
                code="uneven-ranks",
                severity="error" if empty else "warning",
                title=(
                    f"Loader {lid} gives {names} "
                    + (
                        "no batches in an epoch while the others get theirs"
                        if len(empty) == len(short)
                        else "far fewer batches per epoch than the others"
                    )
                    + f" ({numbers})"
                ),  # fmt: skip
                detail=(
                    "Every rank must run the same number of steps: a rank whose loader runs dry idles while the "
                    "others train, and at the next collective (the gradient all_reduce, a barrier) the job hangs "
                    "until the process group times out. This is what happens when a sharded dataset (webdataset "
                    "shards, split_dataset_by_node, files[rank::world]) has fewer shards than ranks x workers, or a "
                    "number that does not divide."
                ),
                fix=(
                    "Give every rank the same number of batches: make the number of shards a multiple of "
                    "world_size x num_workers (or reshard), use DistributedSampler(drop_last=True) for map-style "
                    "data, or cap each rank at the smallest rank's batch count (webdataset's .with_epoch(n)); "
                    "torch.distributed.algorithms.Join handles uneven inputs in DDP."
                ),
                evidence={"batches_per_epoch": {label: n for label, (n, _) in counts.items()}, "short_ranks": short},
                loader_id=lid,
            )
        )
    return findings


def _digests(view: RankView, loader_id: int) -> set[str]:
    """The sampled sample digests of the rank's first epoch of this loader (the hooks' bottom-k sketch); empty when
    the rank's own samples repeat, since then equal contents cannot tell the same sample from a look-alike."""
    per_epoch: dict[int, dict[str, Any]] = {}
    for ev in view.run.events:
        if ev.get("ev") == EV_DUPES and ev.get("loader") == loader_id and ev.get("digests"):
            per_epoch[ev["epoch"]] = ev  # the last summary of an epoch holds its sketch
    if not per_epoch:
        return set()
    first = per_epoch[min(per_epoch)]
    if (first.get("unique") or 0) < DISTINCT_SAMPLES_SHARE * (first.get("samples") or 0):
        return set()
    return set(first["digests"])


def find_rank_duplicates(job: Job) -> list[Finding]:
    """The same samples read by several ranks: their sketches of sample digests overlap."""
    findings = []
    loader_ids = sorted({lo.loader_id for v in job.ranks for lo in v.run.loaders})
    for lid in loader_ids:
        sketches = {job.label(v): _digests(v, lid) for v in job.ranks}
        sketches = {label: s for label, s in sketches.items() if s}
        if len(sketches) < 2:
            continue
        labels = list(sketches)
        pairs: list[dict[str, Any]] = []
        for i, a in enumerate(labels):
            for b in labels[i + 1 :]:
                union = sorted(sketches[a] | sketches[b])[: max(len(sketches[a]), len(sketches[b]))]
                both = [d for d in union if d in sketches[a] and d in sketches[b]]
                share = len(both) / len(union) if union else 0.0
                if len(both) >= MIN_SHARED_SAMPLES and share >= SHARED_SAMPLES_SHARE:
                    pairs.append({"ranks": [a, b], "shared_share": round(share, 3), "shared_in_sketch": len(both)})
        if not pairs:
            continue
        involved = sorted({r for p in pairs for r in p["ranks"]}, key=labels.index)
        worst = max(p["shared_share"] for p in pairs)
        findings.append(
            Finding(
                code="rank-duplicates",
                severity="error",
                title=(
                    f"Loader {lid} feeds the same samples to {ranks_text(involved)}: up to {100 * worst:.0f}% of "
                    "what one rank reads is also read by another"
                ),
                detail=(
                    "Under DDP every rank must see its own part of the data; ranks that read the same samples train "
                    "on each of them several times per epoch and an epoch takes world_size times as long as it "
                    "should. dlprobe compares a sketch of each rank's sample hashes (the samples with the smallest "
                    "hashes), so the share is an estimate."
                ),
                fix=(
                    "Map-style data: DataLoader(ds, sampler=DistributedSampler(ds), ...) and call "
                    "sampler.set_epoch(epoch) each epoch. Streams: shard by rank and worker "
                    "(files[rank * num_workers + worker_id :: world_size * num_workers]), or "
                    "datasets.distributed.split_dataset_by_node(ds, rank, world_size)."
                ),
                evidence={"pairs": pairs},
                loader_id=lid,
            )
        )
    return findings


def find_rank_failed(job: Job, found: list[Finding]) -> list[Finding]:
    """The launcher's own report of a failed rank, kept where no finding of that rank explains the failure."""
    findings = []
    for node, run in enumerate(job.runs):
        if run.result.get("stop_reason") == STOP_REASON_HANG:
            continue  # dlprobe stopped the job (--on-hang stop): the failures torchrun lists are its doing
        failures = run.launcher_failures  # read from stderr.log at load time (model.load_failure_records)
        # The ranks torchrun stopped because of the root cause (SIGTERM) are its consequence, not more failures.
        roots = [f for f in failures if f["root_cause"]] or failures
        # The root cause last: a finding of several ranks (a merged cow-growth) keeps torchrun's record of it.
        for failure in [f for f in failures if f not in roots] + roots:
            view = next((v for v in job.ranks if v.node == node and v.rank == failure["rank"]), None)
            label = job.label(view) if view else f"rank {failure['rank']}"
            # A rank's own error, or its error read as a later rank's consequence (_later_rank_errors): torchrun
            # stamps a failure without an error file in whole seconds and names the smallest rank of a tie, so
            # its root cause may be the rank that raised second. What each rank raised, and when, says more.
            explained = [f for f in found if label in _rank_labels(f) and (f.severity == "error" or _consequence(f))]
            for f in explained:
                f.evidence["launcher"] = cast("LauncherFailure", failure)
            if explained or failure not in roots:
                continue
            how = f"signal {failure['signal']}" if failure["signal"] else f"exit code {failure['exit_code']}"
            findings.append(
                Finding(
                    code="rank-failed",
                    severity="error",
                    title=f"{label[0].upper()}{label[1:]} (pid {failure['pid']}) failed "
                    + ("first, " if failure["root_cause"] else "")
                    + f"with {how}"
                    + (" (torchrun's root cause)" if failure["root_cause"] else ""),
                    detail=(
                        "torchrun's error summary (ChildFailedError) names this rank; the rest of the job was "
                        "stopped because of it. Its traceback is in stderr.log above the summary"
                        + ("" if failure["error_file"].startswith("<") else f" and in {failure['error_file']}")
                        + "."
                        + ("" if view else " It never built a DataLoader, so dlprobe saw nothing else of it.")
                    ),
                    fix="Read that rank's traceback; decorate the entry point with "
                    "torch.distributed.elastic.multiprocessing.errors.record to get it in the summary.",
                    # "rank" is a rank label in every finding; torchrun's own record (its rank a number) is "launcher"
                    evidence={
                        "rank": label,
                        "launcher": cast("LauncherFailure", failure),
                        "other_failures": [cast("LauncherFailure", f) for f in failures if f is not failure],
                    },  # fmt: skip
                )
            )
    return findings


def _consequence(finding: Finding) -> bool:
    """A rank's script error read as the consequence of another rank's earlier one (_later_rank_errors)."""
    return finding.code == "script-error" and "after_rank" in finding.evidence


def _rank_labels(finding: Finding) -> set[str]:
    labels = {str(finding.evidence.get("rank") or "")}
    labels |= {str(r.get("rank")) for r in finding.evidence.get("ranks") or [] if isinstance(r, dict)}
    return labels


def _other_processes(job: Job) -> list[Finding]:
    """Script errors of processes that never became a rank view (a rank that died before building a loader)."""
    findings = []
    for pid, events in job.others.items():
        errors = [e for e in events if e.get("ev") == EV_SCRIPT_ERROR]
        if not errors:
            continue
        run = job.runs[0]
        lone = RunData(run.path, run.meta, run.result, [], [], run.system, errors)
        rank, node_rank = errors[0].get("rank"), errors[0].get("node_rank")
        label = None
        if rank is not None:  # a launcher's rank that failed before its first loader: named as the rank it was
            label = f"node {node_rank} rank {rank}" if job.several_nodes and node_rank is not None else f"rank {rank}"
        for finding in find_run_problems(lone):
            if finding.code == "script-error":
                who = f"{label[0].upper()}{label[1:]} (pid {pid})" if label else f"Process {pid}"
                finding.title = f"{who}: {finding.title}"
                finding.evidence["pid"] = pid
                if label:
                    finding.evidence["rank"] = label
                findings.append(finding)
    return findings


def _later_rank_errors(findings: list[Finding]) -> None:
    """Ranks that raised different errors: the first is the failure; a later one is most likely its consequence (a
    peer gone from a collective: gloo's "Connection closed by peer", NCCL's watchdog), so it reads as one."""
    errors = [
        f
        for f in findings
        if f.code == "script-error" and f.evidence.get("raised_at_s") is not None and "rank" in f.evidence
    ]
    if len({f.evidence["rank"] for f in errors}) < 2:
        return
    first = min(errors, key=lambda f: f.evidence.get("raised_at_s") or 0.0)
    culprit = str(first.evidence["rank"])
    for finding in errors:
        after = (finding.evidence.get("raised_at_s") or 0.0) - (first.evidence.get("raised_at_s") or 0.0)
        if finding is first or after <= 0:
            continue
        label, _, what = finding.title.partition(": ")
        finding.severity = "warning"
        finding.title = f"{label}, {after:.1f} s after {culprit} failed (most likely because of it): {what}"[:200]
        finding.detail = (
            f"{culprit[0].upper()}{culprit[1:]} raised first; an error a rank raises after a peer has failed "
            "usually comes from the collective that peer left. " + finding.detail
        )
        finding.fix = f"Fix {culprit}'s error first; this one most likely goes away with it."
        finding.evidence["after_rank"] = culprit


def _node_cow(job: Job, per_rank: list[tuple[RankView, list[Finding]]]) -> None:
    """cow-growth judged on each node's total: one rank's workers may copy little, all the node's ranks' not."""
    totals = {view.pid: cow_total(view.run) for view in job.ranks}
    for view, findings in per_rank:
        peers = sum(totals[v.pid] for v in job.ranks if v.node == view.node and v is not view)
        if not peers:
            continue
        findings[:] = [f for f in findings if f.code != "cow-growth"]
        for new in find_cow_growth(view.run, peer_bytes=peers):  # first among findings as severe: it is the cause
            at = next((i for i, f in enumerate(findings) if SEVERITIES.index(f.severity) >= SEVERITIES.index(
                new.severity)), len(findings))  # fmt: skip
            findings.insert(at, new)


def _guarded(failures: list[Finding], name: str, missing: tuple[str, ...], check: Callable[[], Any],
             fallback: Any = None) -> Any:  # fmt: skip
    """One cross-rank step; if it raises, a probe-degraded finding names it and what the report lacks."""
    try:
        return check()
    except Exception as exc:  # one cross-rank check's bug must not lose the per-rank findings
        failures.append(analysis_failed(name, exc, missing, "job analysis step"))
        return fallback


def analyze_job(job: Job) -> list[Finding]:
    """Every finding of a job, most severe first: per-rank findings merged across ranks, then the job's own."""
    per_rank = [(view, analyze(view.run, fold=False)) for view in job.ranks]
    failures: list[Finding] = []
    _guarded(failures, "_node_cow", ("cow-growth judged on the node's total",), lambda: _node_cow(job, per_rank))
    _guarded(failures, "job_hang", ("the other ranks waiting in a collective",), lambda: job_hang(job, per_rank))
    unmerged = [f for _, fs in per_rank for f in fs]
    findings: list[Finding] = _guarded(
        failures, "merge_rank_findings", ("findings merged across ranks",),
        lambda: merge_rank_findings(job, per_rank), unmerged,
    )  # fmt: skip
    findings += _guarded(failures, "find_node_oversubscribed", ("node-oversubscribed",),
                         lambda: find_node_oversubscribed(job), [])  # fmt: skip
    findings += _guarded(failures, "find_uneven_ranks", ("uneven-ranks",), lambda: find_uneven_ranks(job), [])
    findings += _guarded(failures, "find_rank_duplicates", ("rank-duplicates",), lambda: find_rank_duplicates(job), [])
    findings += _guarded(failures, "find_straggler_rank", ("straggler-rank",), lambda: find_straggler_rank(job), [])
    findings += _guarded(failures, "_other_processes", ("script-error of processes before their first loader",),
                         lambda: _other_processes(job), [])  # fmt: skip
    _guarded(failures, "_later_rank_errors", ("which rank's error came first",), lambda: _later_rank_errors(findings))
    findings += _guarded(failures, "find_rank_failed", ("rank-failed",), lambda: find_rank_failed(job, findings), [])
    findings = fold_script_errors(findings)  # once the ranks' errors are ordered and rank-failed explained
    findings += failures
    return sorted(findings, key=lambda f: SEVERITIES.index(f.severity))
