"""Which trials to run: num_workers from 0 to about twice the usable cores, then prefetch and pinning at the best."""

from __future__ import annotations

from typing import Any

PREFETCH_VARIANTS = (1, 4)  # tried at the best worker count; the default is 2
DENSE_UP_TO = 8  # every worker count up to here; above it a geometric-ish subset


def worker_counts(usable_cores: int, max_workers: int | None = None) -> list[int]:
    """0, 1, 2, ... up to 2 x usable cores (or max_workers), thinned out above DENSE_UP_TO."""
    top = max_workers if max_workers is not None else max(2, 2 * usable_cores)
    counts = [n for n in range(top + 1) if n <= DENSE_UP_TO]
    n = DENSE_UP_TO
    while n < top:
        n = int(n * 1.5)
        counts.append(min(n, top))
    for must in (usable_cores - 1, usable_cores, top):
        if 0 <= must <= top:
            counts.append(must)
    return sorted(set(counts))


def trial_key(num_workers: int, prefetch_factor: int | None, pin_memory: bool) -> str:
    return f"w{num_workers}-p{prefetch_factor or 0}-{'pin' if pin_memory else 'nopin'}"


def trial(num_workers: int, prefetch_factor: int | None, pin_memory: bool, stage: str) -> dict[str, Any]:
    pf = prefetch_factor if num_workers > 0 else None
    return {"key": trial_key(num_workers, pf, pin_memory), "num_workers": num_workers, "prefetch_factor": pf,
            "pin_memory": pin_memory, "stage": stage}  # fmt: skip


def first_stage(counts: list[int]) -> list[dict[str, Any]]:
    return [trial(n, 2, False, "workers") for n in counts]


def later_stages(best: dict[str, Any], accelerator: bool) -> list[dict[str, Any]]:
    """Prefetch variants at the best worker count, then pinning where an accelerator exists."""
    out = []
    if best["num_workers"] > 0:
        out += [trial(best["num_workers"], pf, False, "prefetch") for pf in PREFETCH_VARIANTS]
    if accelerator:
        out.append(trial(best["num_workers"], best["prefetch_factor"], True, "pin_memory"))
    return out
