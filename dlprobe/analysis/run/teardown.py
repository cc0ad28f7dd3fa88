"""A worker's readings after its training process died are teardown, not growth: cut from its series as it loads.

Once the training process is gone (killed by the OOM killer, a signal, a crash), the last workers alive map its
formerly shared pages alone: the kernel counts them in their USS and Private_Dirty, which reads as copy-on-write of
hundreds of MiB, "140% of the parent", "0 workers fit". `load_run` cuts each worker's series at its parent's death
(`RunData.gone`: the sampler saw it end), so every memory finding, the projection and the report's summaries read the
same live readings; `ProcessRecord.teardown_from` records the cut and `teardown_readings` how many were left out.
"""

from __future__ import annotations

from dataclasses import fields
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from dlprobe.analysis.run.model import ProcessRecord, RunData


def parent_death(run: RunData, proc: ProcessRecord) -> tuple[int, float] | None:
    """(pid, time) of the first death among the processes a worker lives under: the training process that built its
    loader (the run's target where not recorded) and its own parent (a forkserver); None while they lived."""
    loader = run.loader(proc.loader_id) if proc.loader_id is not None else None
    main = loader.writer if loader is not None and loader.writer is not None else run.meta.get("target_pid")
    deaths = [(run.gone[pid], pid) for pid in {main, proc.ppid} if pid is not None and pid in run.gone]
    if not deaths:
        return None
    t, pid = min(deaths)
    return pid, t


def cut_teardown(run: RunData) -> None:
    """Leave out each worker's readings taken at or after its parent's death, recording where the cut is."""
    for proc in run.workers():
        death = parent_death(run, proc)
        if death is None:
            continue
        pid, at = death
        series = proc.series
        keep = [i for i, t in enumerate(series.t) if t < at]
        dropped = len(series.t) - len(keep)
        if not dropped:
            continue
        for f in fields(series):
            values = getattr(series, f.name)
            setattr(series, f.name, [values[i] for i in keep if i < len(values)])
        proc.teardown_from, proc.teardown_parent, proc.teardown_readings = at, pid, dropped


def first_cut(run: RunData, procs: list[ProcessRecord]) -> tuple[float, int, int, int] | None:
    """(seconds into the run of the first cut, the parent that died, readings left out, workers cut) among `procs`."""
    cut = [p for p in procs if p.teardown_from is not None and p.teardown_parent is not None]
    if not cut:
        return None
    first = min(cut, key=lambda p: p.teardown_from or 0.0)
    started = run.meta.get("started_at")
    at = float(first.teardown_from or 0.0) - (float(started) if started is not None else 0.0)
    return round(at, 2), int(first.teardown_parent or 0), sum(p.teardown_readings for p in cut), len(cut)


def teardown_evidence(run: RunData, procs: list[ProcessRecord]) -> dict[str, Any]:
    """The cut as a finding's evidence: teardown_from_s, teardown_pid, teardown_readings ({} where none was cut)."""
    cut = first_cut(run, procs)
    if cut is None:
        return {}
    return {"teardown_from_s": cut[0], "teardown_pid": cut[1], "teardown_readings": cut[2]}


def teardown_note(run: RunData, procs: list[ProcessRecord]) -> str:
    """The sentence a finding adds where the readings of `procs` were cut ("" where none was)."""
    cut = first_cut(run, procs)
    if cut is None:
        return ""
    at, parent, left, workers = cut
    return (
        f" Readings after the training process (pid {parent}) died {at:.1f} s into the run are teardown: left out "
        f"({left} reading{'s' if left != 1 else ''} of {workers} worker{'s' if workers != 1 else ''}; the last workers "
        "alive map its formerly shared pages alone, and the kernel counts them as their own)."
    )
