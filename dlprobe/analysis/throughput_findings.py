"""Advice on the loader's shape: starved for data, more workers than cores or memory allow, pin_memory."""

from __future__ import annotations

import math
from typing import Any

from dlprobe.analysis.loop_timing import LoopTiming, events_of, loop_timing, recorded_usable_cores
from dlprobe.analysis.model import Finding, LoaderRecord, RunData
from dlprobe.analysis.stats import growth, metric_summary
from dlprobe.rundir.schema import EV_ACCEL
from dlprobe.units import format_bytes

INPUT_BOUND_SHARE = 0.3  # the loop waits for data at least this share of its steady time
INPUT_BOUND_MIN_SPAN_S = 0.5
HEADROOM = 1.25  # workers to ask for beyond the bare estimate, so a slow batch does not stall the loop
BURSTY_P95 = 4.0  # p95 wait this many times the median: deeper prefetching smooths it
MEMORY_SHARE = 0.9  # workers may use this much of the memory left for them
NO_ACCELERATOR_WARNING = (
    "'pin_memory' argument is set as true but no accelerator is found, then device pinned memory won't be used."
)


def suggest_workers(current: int, per_batch_load_s: float, step_s: float, cores: int) -> int:
    """Workers needed so that batches are ready as fast as the loop consumes them, within the usable cores."""
    # A loop with no work of its own always waits: only the cores bound it.
    needed = cores if step_s <= 1e-4 else math.ceil(HEADROOM * per_batch_load_s / step_s)
    return max(current + 1, min(needed, cores)) if current < cores else current


def find_input_bound(run: RunData) -> list[Finding]:
    findings = []
    cores = recorded_usable_cores(run)
    for loader in run.loaders:
        timing = loop_timing(loader)
        if timing is None or timing.span_s < INPUT_BOUND_MIN_SPAN_S or timing.wait_share < INPUT_BOUND_SHARE:
            continue
        if not loader.settings_read:
            findings.append(_input_bound_settings_unknown(run, loader, timing))
            continue
        nw = loader.num_workers
        # With n workers each one needs n x (wait + step) per batch while the loop is starved; with none the
        # whole load happens inside next(), so the wait is the load time.
        load_s = timing.mean_wait_s if nw == 0 else nw * (timing.mean_wait_s + timing.step_s)
        suggested = suggest_workers(nw, load_s, timing.step_s, cores)
        changes = []
        if suggested > nw:
            changes.append(f"num_workers={suggested}")
        epochs_restarted = len(loader.epochs) > 1 and not loader.config.get("persistent_workers")
        if suggested > 0 and (epochs_restarted or nw == 0):
            changes.append("persistent_workers=True")
        bursty = timing.median_wait_s > 0 and timing.p95_wait_s > BURSTY_P95 * timing.median_wait_s
        if suggested > 0 and bursty:
            changes.append("prefetch_factor=4")
        title = (
            f"Loader {loader.loader_id} is input-bound: the loop waited for data {100 * timing.wait_share:.0f}% of "
            f"the time ({1000 * timing.mean_wait_s:.1f} ms per batch, {1000 * timing.step_s:.1f} ms of its own work)"
        )
        detail = (
            f"With num_workers={nw}, loading one batch takes about {1000 * load_s:.1f} ms of one worker's time while "
            f"the loop needs a batch every {1000 * timing.step_s:.1f} ms. {cores} usable core(s) "
            f"(affinity {run.meta.get('machine', {}).get('cpu_affinity')}, cgroup quota "
            f"{run.meta.get('machine', {}).get('cpu_quota') or 'none'})."
        )
        if suggested > nw:
            fix = (
                f"DataLoader(..., {', '.join(changes)}): about {suggested} worker(s) produce batches as fast as the "
                "loop uses them"
                + (f" ({cores} usable core(s) cap it)" if suggested == cores else "")
                + ". Measure the choice on this machine with `dlprobe tune`."
            )
        else:
            fix = (
                f"num_workers={nw} already uses every usable core, so more workers will not help CPU-bound loading: "
                "make each sample cheaper (see worker-hotspots: decode, transforms, file reads), cache decoded data, "
                "or run on more cores. Only I/O-bound loading (network storage) gains from workers beyond the cores."
                + (f" Also set {', '.join(changes)}." if changes else "")
            )
        findings.append(
            Finding(
                code="input-bound",
                severity="warning",
                title=title,
                detail=detail,
                fix=fix,
                evidence={
                    "wait_share": round(timing.wait_share, 3),
                    "steady_batches": timing.batches,
                    "mean_wait_s": round(timing.mean_wait_s, 5),
                    "median_wait_s": round(timing.median_wait_s, 5),
                    "p95_wait_s": round(timing.p95_wait_s, 5),
                    "step_s": round(timing.step_s, 5),
                    "load_per_batch_s": round(load_s, 5),
                    "num_workers": nw,
                    "usable_cores": cores,
                    "suggested_num_workers": suggested,
                    "suggested_changes": changes,
                },
                loader_id=loader.loader_id,
            )
        )
    return findings


def _projected_worker_bytes(run: RunData, loader: LoaderRecord) -> tuple[int, int, list[dict[str, Any]]] | None:
    """(largest per-worker USS projected to a full epoch, largest measured, rows) or None without readings."""
    rows: list[dict[str, Any]] = []
    for proc in run.workers(loader.loader_id):
        uss = metric_summary(proc.series, "uss")
        if uss["peak"] is None:
            continue
        rows.append({"worker_id": proc.worker_id, "pid": proc.pid, "uss_peak_bytes": uss["peak"],
                     "uss_growth_bytes": growth(proc.series, "uss")})  # fmt: skip
    if not rows:
        return None
    peak = int(max(r["uss_peak_bytes"] for r in rows))
    grown = int(max(r["uss_growth_bytes"] for r in rows))
    # If the run saw only part of an epoch, growth so far is extended to the whole epoch.
    fraction = 1.0
    length, batch = loader.dataset.get("len"), loader.config.get("batch_size")
    first = loader.epochs[0] if loader.epochs else None
    if first is not None and first.t_end is None and length and batch:
        fraction = min(1.0, max(first.batches, 1) / math.ceil(length / batch))
    projected = int(peak + grown * (1 / fraction - 1))
    return projected, peak, rows


def _memory_for_workers(run: RunData, measured_workers: int) -> int | None:
    """Memory the workers may take: the cgroup limit less the rest of the tree, or what the host had available."""
    main = next((p for p in run.processes if p.role == "main"), None)
    main_uss = metric_summary(main.series, "uss")["peak"] if main else None
    if run.system.cgroup_limit:
        return int(run.system.cgroup_limit - (main_uss or 0))
    available = [a for a in run.system.available if a is not None]
    if not available:
        return None
    # Available memory already excludes what the workers held, so add it back.
    return int(min(available) + measured_workers)


def _input_bound_settings_unknown(run: RunData, loader: LoaderRecord, timing: LoopTiming) -> Finding:
    """The loop starved, but the loader's settings could not be read: the wait is measured, the remedy is not known
    (advising num_workers=N from a num_workers that was never read would be advice from a gap)."""
    seen = loader.num_workers
    return Finding(
        code="input-bound",
        severity="warning",
        title=(
            f"Loader {loader.loader_id} is input-bound: the loop waited for data {100 * timing.wait_share:.0f}% of "
            f"the time ({1000 * timing.mean_wait_s:.1f} ms per batch); its settings could not be read"
        ),
        detail=(
            f"The loop waited {1000 * timing.mean_wait_s:.1f} ms per batch for {1000 * timing.step_s:.1f} ms of its "
            f"own work. dlprobe could not read this loader's settings (num_workers, persistent_workers, "
            f"prefetch_factor; see the probe-degraded finding), so it cannot say how many workers would keep up; "
            f"{seen} worker process(es) were seen starting."
        ),
        fix="Measure the worker count on this machine with `dlprobe tune`, or check the DataLoader's num_workers, "
        "persistent_workers and prefetch_factor in the script against the usable cores.",
        evidence={
            "wait_share": round(timing.wait_share, 3),
            "steady_batches": timing.batches,
            "mean_wait_s": round(timing.mean_wait_s, 5),
            "step_s": round(timing.step_s, 5),
            "num_workers": None,
            "workers_seen": seen,
            "usable_cores": recorded_usable_cores(run),
            "missing": ["num_workers", "persistent_workers", "prefetch_factor"],
        },
        loader_id=loader.loader_id,
    )


def find_too_many_workers(run: RunData) -> list[Finding]:
    findings = []
    cores = recorded_usable_cores(run)
    for loader in run.loaders:
        nw = loader.num_workers
        if nw == 0 or not loader.settings_read:  # "fewer workers" needs the number that was set
            continue
        memory = _projected_worker_bytes(run, loader)
        fit_memory = None
        evidence: dict[str, Any] = {"num_workers": nw, "usable_cores": cores}
        if memory is not None:
            projected, peak, rows = memory
            budget = _memory_for_workers(run, sum(r["uss_peak_bytes"] for r in rows))
            if budget and projected > 0:
                fit_memory = max(0, int(MEMORY_SHARE * budget // projected))
            evidence.update(
                {
                    "worker_uss_peak_bytes": peak,
                    "projected_worker_bytes": projected,
                    "memory_for_workers_bytes": budget,
                    "workers_that_fit_memory": fit_memory,
                    "workers": rows,
                }  # fmt: skip
            )
        over_cores = nw > cores
        over_memory = fit_memory is not None and fit_memory < nw
        if not over_cores and not over_memory:
            continue
        limits = [cores] + ([fit_memory] if fit_memory is not None else [])
        fit = max(0 if over_memory and fit_memory == 0 else 1, min(limits))
        reasons = []
        if over_cores:
            reasons.append(f"{nw} workers compete for {cores} usable core(s)")
        if over_memory:
            reasons.append(
                f"each worker is projected to reach {format_bytes(evidence['projected_worker_bytes'])} private memory "
                f"over an epoch and only {format_bytes(evidence['memory_for_workers_bytes'])} is left for workers"
            )
        evidence["workers_that_fit"] = fit
        findings.append(
            Finding(
                code="too-many-workers",
                severity="error" if over_memory else "warning",
                title=f"Loader {loader.loader_id} has num_workers={nw} but only {fit} fit: " + "; ".join(reasons),
                detail=(
                    "Workers beyond the usable cores (affinity mask and cgroup CPU quota) only add context switches, "
                    "memory and in-flight batches in /dev/shm; PyTorch's own check looks at the affinity mask only. "
                    "Workers beyond the memory left for them end in 'DataLoader worker (pid N) is killed by signal: "
                    "Killed.'"
                ),
                fix=f"DataLoader(..., num_workers={fit})"
                + (" and shrink per-worker memory (see cow-growth)" if over_memory else "")
                + "; `dlprobe tune` measures the throughput of each choice.",
                evidence=evidence,
                loader_id=loader.loader_id,
            )
        )
    return findings


def find_pin_memory(run: RunData) -> list[Finding]:
    findings = []
    for loader in run.loaders:
        accel = next(iter(events_of(run, EV_ACCEL, loader.loader_id)), None)
        if accel is None:
            continue
        pin = bool(loader.config.get("pin_memory"))
        evidence = {"pin_memory": pin, "pin_effective": accel.get("pin_effective"),
                    "cuda_initialized": accel.get("cuda_initialized"),
                    "batch_bytes": (loader.batch_info or {}).get("bytes")}  # fmt: skip
        if pin and accel.get("pin_effective") is False:
            findings.append(
                Finding(
                    code="pin-memory",
                    severity="info",
                    title=f"Loader {loader.loader_id} sets pin_memory=True but there is no accelerator to pin for",
                    detail=f"PyTorch warns '{NO_ACCELERATOR_WARNING}' and loads batches unpinned.",
                    fix="Drop pin_memory=True on machines without a GPU (e.g. pin_memory=torch.cuda.is_available()).",
                    evidence=evidence,
                    loader_id=loader.loader_id,
                )
            )
        elif not pin and accel.get("cuda_initialized"):
            findings.append(
                Finding(
                    code="pin-memory",
                    severity="warning",
                    title=f"Loader {loader.loader_id} has pin_memory=False while the script uses the GPU",
                    detail=(
                        "Batches copied from pageable memory to the GPU go through a staging buffer and cannot "
                        "overlap with compute; pinned batches can be copied asynchronously."
                    ),
                    fix="DataLoader(..., pin_memory=True) and move batches with x.to(device, non_blocking=True).",
                    evidence=evidence,
                    loader_id=loader.loader_id,
                )
            )
    return findings
