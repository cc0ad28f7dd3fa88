"""What would stop forkserver and spawn workers from starting, as the start-readiness check read it before the fork
(in_training/start_readiness.py): an object of the dataset or worker_init_fn that does not pickle, a loop at
`__main__`'s top level. A measure every finding that suggests another start method asks first (start-method,
fork-hazard, a worker hung on a lock held at fork), so none advises a method this run showed would fail."""

from __future__ import annotations

from typing import Any

from dlprobe.analysis.measures.loop_timing import events_of
from dlprobe.analysis.run.model import LoaderRecord, RunData
from dlprobe.rundir.schema import EV_START_READINESS

OTHER_METHODS = "multiprocessing_context='forkserver'/'spawn', which start workers without the parent's threads"


def readiness_event(run: RunData, loader: LoaderRecord) -> dict[str, Any] | None:
    found = [e for e in events_of(run, EV_START_READINESS, loader.loader_id)
             if loader.writer is None or e.get("pid") == loader.writer]  # fmt: skip
    return found[0] if found else None


def blockers(event: dict[str, Any]) -> list[dict[str, Any]]:
    """What stops forkserver and spawn workers from starting: an object that does not pickle, and the loader
    iterated at `__main__`'s top level without a guard (each worker would run it again)."""
    out = [
        {"what": o["name"], "attribute": o.get("attribute"), "kind": o.get("kind"), "reason": o.get("reason")}
        for o in event.get("objects") or []
        if o.get("picklable") is False
    ]
    main = event.get("main") or {}
    if main.get("guarded") is False:
        out.append({"what": "__main__", "attribute": f"{main.get('file')}:{main.get('iter_line')}",
                    "kind": "no-main-guard", "reason": "the loader is iterated at the script's top level, outside "
                    "`if __name__ == \"__main__\":`"})  # fmt: skip
    return out


def blocker_text(b: dict[str, Any]) -> str:
    if b["kind"] == "no-main-guard":
        return f'no `if __name__ == "__main__":` guard around the loop ({b["attribute"]})'
    return f"`{b['attribute']}` of the {b['what']} is {b['reason']}"


def other_methods(run: RunData, loader: LoaderRecord) -> str:
    """forkserver/spawn as a fix in words: as they are where nothing this run read stops them, else with what must
    change first (a lock on the dataset: forkserver would fail with "cannot pickle '_thread.lock' object")."""
    event = readiness_event(run, loader)
    blocked = blockers(event) if event is not None else []
    if not blocked:
        return OTHER_METHODS
    why = "; ".join(blocker_text(b) for b in blocked[:2])
    return (f"multiprocessing_context='forkserver'/'spawn' once the dataset pickles (as it is they would fail to "
            f"start its workers: {why})")  # fmt: skip
