"""Which trials to run: num_workers from 0 to about twice the usable cores, doubling past it while more workers
still pay (next_worker_count), then prefetch and pinning at the best."""

from __future__ import annotations

from typing import Any

from dlprobe.rundir.schema import CPU_BOUND_SHARE, IO_BOUND_WAIT

PREFETCH_VARIANTS = (1, 4)  # tried at the best worker count; the default is 2
DENSE_UP_TO = 8  # every worker count up to here; above it a geometric-ish subset
# Past the first sweep, workers are doubled while the last step up still paid: at least this share of the linear
# gain (n -> 2n giving 2x is 100%), or any gain over MIN_GAIN with the workers asleep most of the time (I/O-bound:
# more of them overlap more waits). Workers idle for want of indices would sleep too, hence a gain is needed.
LINEAR_GAIN = 0.5
MIN_GAIN = 0.15


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


def next_worker_count(trials: list[dict[str, Any]], cap: int) -> tuple[int | None, str]:
    """After the worker-count trials: the next count to try (twice the highest measured, within `cap` and the
    workers that fit memory), or None and why the sweep of worker counts stops there."""
    killed = [int(t["num_workers"]) for t in trials if t.get("status") == "oom"]
    if killed:
        return None, f"stopped: num_workers={min(killed)} was killed by the kernel's OOM killer, so more would be too"
    ok = sorted(
        (t for t in trials if t.get("stage") == "workers" and t.get("status") == "ok" and t.get("samples_per_s")),
        key=lambda t: int(t["num_workers"]),
    )
    with_workers = [t for t in ok if t["num_workers"] > 0]
    if len(with_workers) < 2:
        return None, "fewer than two worker counts completed, so there is no trend to follow"
    prev, top = with_workers[-2], with_workers[-1]
    n = int(top["num_workers"])
    if n >= cap:
        return None, f"stopped at the cap of {cap} workers (--max-workers, or dlprobe's limit of workers to try)"
    gain = (top["samples_per_s"] / prev["samples_per_s"] - 1) / (n / prev["num_workers"] - 1)
    # A trial too short to read its workers' CPU leaves the last count that was read: workers asleep at 8 are not
    # shown CPU-bound by a 16-worker trial that ended before its window (a skewed loader stopped at 16 for that).
    read = [t["worker_busy_share"] for t in with_workers if isinstance(t.get("worker_busy_share"), (int, float))]
    busy = top.get("worker_busy_share") if isinstance(top.get("worker_busy_share"), (int, float)) else None
    busy = busy if busy is not None or not read else read[-1]
    asleep = f"asleep {100 * (1 - busy):.0f}% of their time" if isinstance(busy, (int, float)) else "CPU not measured"
    waiting = isinstance(busy, (int, float)) and 1 - busy >= IO_BOUND_WAIT
    going = f"from {prev['num_workers']} to {n} workers throughput rose {100 * gain:.0f}% of linear, workers {asleep}"
    if isinstance(busy, (int, float)) and busy >= CPU_BOUND_SHARE:
        # Workers that want a core all the time already fill the cores: a rise on the last step is noise or the
        # other work on the machine, not room for more.
        return None, f"stopped at num_workers={n}: {going}: CPU-bound, more workers would only queue for the cores"
    if not (gain >= LINEAR_GAIN or (waiting and gain >= MIN_GAIN)):
        return None, f"stopped at num_workers={n}: {going}, so more workers would not pay"
    fit = top.get("workers_that_fit_memory")
    nxt = min(2 * n, cap, fit if isinstance(fit, int) else cap)
    if nxt <= n:
        return None, f"stopped at num_workers={n}: {going}, but only {fit} workers fit the memory left"
    return nxt, f"{going}: trying {nxt}"


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
