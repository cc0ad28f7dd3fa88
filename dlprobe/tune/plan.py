"""What a trial is (its key and settings), the fields the search reads back from earlier attempts, and the prefetch and
pinning trials at the best worker count."""

from __future__ import annotations

from typing import Any

from dlprobe.loader_model.limits import IO_BOUND_WAIT

DUPLICATE_SHARE = 0.2  # a trial whose samples repeat this often is an IterableDataset every worker yields whole
# What a restarted attempt is told of the trials before it: the search (tune/search.py) re-fits its model on them.
SEARCH_FIELDS = ("key", "stage", "num_workers", "prefetch_factor", "pin_memory", "status", "samples_per_s",
                 "worker_busy_share", "worker_cpu_share", "worker_runq_share", "main_cpu_share", "main_handover_share",
                 "workers_that_fit_memory", "predicted_samples_per_s", "repeats", "repeated_statuses", "trial_s",
                 "samples", "batches")  # fmt: skip


def trial_key(num_workers: int, prefetch_factor: int | None, pin_memory: bool) -> str:
    return f"w{num_workers}-p{prefetch_factor or 0}-{'pin' if pin_memory else 'nopin'}"


def trial(num_workers: int, prefetch_factor: int | None, pin_memory: bool, stage: str) -> dict[str, Any]:
    pf = prefetch_factor if num_workers > 0 else None
    return {"key": trial_key(num_workers, pf, pin_memory), "num_workers": num_workers, "prefetch_factor": pf,
            "pin_memory": pin_memory, "stage": stage}  # fmt: skip


def completed(trial: dict[str, Any]) -> bool:
    """Whether a trial ran to a rate: status ok, with samples/s."""
    return trial.get("status") == "ok" and bool(trial.get("samples_per_s"))


def merge_repeat(first: dict[str, Any], again: dict[str, Any]) -> dict[str, Any]:
    """One record of a trial measured twice: the faster completed reading (other work on the machine only ever slows
    a trial; one that did not complete never replaces one that did), with every reading's rate and status kept."""
    rates = [*(first.get("repeated_rates") or [first.get("samples_per_s")]), again.get("samples_per_s")]
    statuses = [*(first.get("repeated_statuses") or [first.get("status")]), again.get("status")]
    faster = completed(again) and (not completed(first) or again["samples_per_s"] > first["samples_per_s"])
    return (again if faster else first) | {"repeated_rates": rates, "repeated_statuses": statuses,
                                           "repeats": len(rates) - 1}  # fmt: skip


def oom_killed(trial: dict[str, Any]) -> bool:
    """Whether the kernel's OOM killer ended this trial, in any of its readings."""
    return trial.get("status") == "oom" or "oom" in (trial.get("repeated_statuses") or [])


def preference(trial: dict[str, Any]) -> tuple[int, bool, int, bool]:
    """The order in which configurations as fast are preferred: fewer workers, then the default prefetch_factor=2
    (prefetch_factor=1 saves only n batches of /dev/shm, and on a trial's few dozen batches "within tolerance" is
    noise: a skewed loader timed 36% slower with 1 by a plain loop after tune had it within 5%), then no pinning."""
    pf = trial.get("prefetch_factor")
    return int(trial.get("num_workers") or 0), pf not in (None, 2), pf or 0, bool(trial.get("pin_memory"))


def later_stages(best: dict[str, Any], accelerator: bool, memory_bound: bool) -> list[dict[str, Any]]:
    """At the best worker count: prefetch_factor=4 where the workers wait (more batches in flight hide the slow
    reads; workers that compute already fill the cores), prefetch_factor=1 where memory bounds the workers (it
    saves n batches of /dev/shm, and no throughput), then pinning where an accelerator exists."""
    out = []
    busy = best.get("worker_busy_share")
    if best["num_workers"] > 0 and (not isinstance(busy, (int, float)) or 1 - busy >= IO_BOUND_WAIT):
        out.append(trial(best["num_workers"], 4, False, "prefetch"))
    if best["num_workers"] > 0 and memory_bound:
        out.append(trial(best["num_workers"], 1, False, "prefetch"))
    if accelerator:
        out.append(trial(best["num_workers"], best["prefetch_factor"], True, "pin_memory"))
    return out
