"""Start-method readiness: what fork, forkserver and spawn cost a loader, and what would break under each.

Read from the `start_readiness` event (in_training/start_readiness.py: what forkserver and spawn would pickle for
each worker, its size, the script's guard and top-level time) and from what the run measured for the method in use:
copy-on-write growth of forked workers (their USS), or the start-up of forkserver and spawn workers (each worker's own
`worker_start` event against the start of the iterator that made it) and their private memory then.
"""

from __future__ import annotations

from typing import Any

from dlprobe.analysis.evidence.finding import Finding
from dlprobe.analysis.evidence.schema import Evidence
from dlprobe.analysis.measures.loop_timing import events_of
from dlprobe.analysis.measures.start_blockers import blocker_text, blockers, readiness_event
from dlprobe.analysis.measures.worker_growth import worker_growth_rows
from dlprobe.analysis.run.model import LoaderRecord, RunData
from dlprobe.rundir.schema import EV_START_READINESS_SKIPPED, EV_WORKER_START
from dlprobe.units import MiB, format_bytes

METHODS = ("fork", "forkserver", "spawn")
COW_WORTH_SWITCH = 256 * MiB  # a forked worker's copies from here make a pickled copy worth comparing
COPY_SHARE = 0.5  # ... when the pickled copy would be at most this share of what each forked worker copied
PIPE_BYTES = 64 * 1024  # Linux's pipe buffer: a bigger pickle makes the parent wait for each worker in turn
BUSY_SHARE = 0.95  # a parent that ran less of its runnable time than this was competing for the cores
INTERPRETER_START_S = 0.05  # CPU of a new python3 to its first line, site included (the fork server's own start)
UNPICKLE_PER_PICKLE = 0.8  # a worker's CPU to unpickle per CPU second the check pickled (300,000 dicts: 0.6-0.9)
# Arrays counted by length: the parent pickles each worker's copy in band and writes it into the pipe, the worker
# reads and rebuilds it (128 MiB of float32 on the development machine: 0.27 s and 0.12 s of CPU)
PARENT_COPY_S_PER_GIB = 2.1
WORKER_COPY_S_PER_GIB = 0.95
SLOW_START_TOTAL_S = 5.0  # forkserver/spawn start-ups summed over the run's worker starts: worth a finding ...
SLOW_START_RUN_SHARE = 0.1  # ... when they are this share of the run or more
_FIXES = {
    "lambda": "define it as a function at the module's top level (or `functools.partial` of one)",
    "local-function": "move the function to the module's top level (or `functools.partial` of one)",
    "local-class": "move the class to the module's top level",
    "handle": "keep the path and open it in each worker (on first use in `__getitem__`, or in `worker_init_fn`), "
    "or drop it in `__getstate__`",
    "lock": "create it in each worker, or drop it in `__getstate__` and make a new one in `__setstate__`",
    "thread": "start it in each worker, or drop it in `__getstate__`",
}


def worker_start_s(run: RunData, loader: LoaderRecord) -> list[float]:
    """Each worker's start-up, measured: its own `worker_start` event (after its copy is unpickled, before the user's
    worker_init_fn) against the start of the iterator that started it, for the first epoch's workers."""
    if not loader.epochs:
        return []
    first = loader.epochs[0]
    pids = set(first.worker_pids)
    return sorted(
        round(float(e["t"]) - first.t_start, 3)
        for e in events_of(run, EV_WORKER_START, loader.loader_id)
        if e.get("pid") in pids and float(e["t"]) >= first.t_start
    )


def _starts(loader: LoaderRecord) -> int:
    """How many times the loader's workers were started: once with persistent workers, else once per epoch."""
    if loader.config.get("persistent_workers"):
        return 1 if loader.epochs else 0
    return len(loader.epochs)


def predicted_start_s(event: dict[str, Any], method: str) -> float | None:
    """The first iterator's last worker started under `method`, predicted from what the parent measured.

    Each worker costs CPU (start_work_s), and the parent pickles each worker's copy in turn (parent_pickle_s).
    Under forkserver a server is started first, once per process (its interpreter, and `__main__`'s imports where it
    preloads them). Past the pipe's buffer the parent waits for each worker to read its copy, which a spawn worker (a
    forkserver one without the preload) does only after importing `__main__`: the workers start one after another,
    each alone on its share of a core; below it they start together and share the cores."""
    work = start_work_s(event, method)
    if work is None or method == "fork":
        return work
    workers = max(1, int(event.get("num_workers") or 1))
    alone = worker_share(event, starting=1)
    server = server_start_s(event) if method == "forkserver" else 0.0
    parent = parent_pickle_s(event)
    if starts_in_turn(event):
        return round((server + workers * (parent + work)) / alone, 3)
    return round((server + workers * parent) / alone + work / worker_share(event, starting=workers), 3)


def starts_in_turn(event: dict[str, Any]) -> bool:
    """The parent writes each worker's pickle into a pipe the worker reads only when it gets to it: past the pipe's
    buffer, the parent waits, and the next worker starts only then."""
    return pickled_lower_bound(event) > PIPE_BYTES


def pickled_lower_bound(event: dict[str, Any]) -> int:
    """The pickled bytes, or where the check stopped at its bound, those counted until then."""
    if isinstance(event.get("pickled_bytes"), int):
        return int(event["pickled_bytes"])
    return sum(int(o.get("pickled_bytes") or o.get("pickled_at_least") or 0) for o in event.get("objects") or [])


def _parent_share(event: dict[str, Any]) -> float:
    share = event.get("cpu_share")
    return float(share) if isinstance(share, (int, float)) and 0 < share <= 1 else 1.0


def _share_now(event: dict[str, Any]) -> float:
    """The share of a core a CPU-bound process got just before the workers started (the parent's last seconds and the
    check's copy), else the parent's over its whole life."""
    share = event.get("share_now")
    return float(share) if isinstance(share, (int, float)) and 0 < share <= 1 else _parent_share(event)


def _gib(n: Any) -> float:
    return float(n) / (1024 * MiB) if isinstance(n, (int, float)) else 0.0


def _pickle_cpu_s(event: dict[str, Any]) -> float:
    """The check's CPU to pickle the in-band part (a run recorded before pickle_cpu_s: its wall time's share)."""
    cpu = event.get("pickle_cpu_s")
    if isinstance(cpu, (int, float)):
        return float(cpu)
    return float(event.get("pickle_s") or 0.0) * _parent_share(event)


def parent_pickle_s(event: dict[str, Any]) -> float:
    """The parent's CPU to pickle one worker's copy: what the check took for the in-band part, and the arrays it
    counted by length copied into the pickle and the pipe."""
    return _pickle_cpu_s(event) + _gib(event.get("buffer_bytes")) * PARENT_COPY_S_PER_GIB


def server_start_s(event: dict[str, Any]) -> float:
    """The fork server's start before the first forkserver worker, once per process: none where it already runs;
    a new interpreter, and where it preloads `__main__` (CPython 3.14, 3.13.8) the script's imports and top level."""
    server = event.get("forkserver") or {}
    if server.get("running"):
        return 0.0
    preloaded = (_redo_s(event) or 0.0) if server.get("preloads_main") else 0.0
    return INTERPRETER_START_S + preloaded


def _redo_s(event: dict[str, Any]) -> float | None:
    """The CPU a worker spends redoing the parent's start: the main thread's CPU until the loop less the work inside
    the guard; for a run recorded without it, the imports' and top level's wall time times the parent's share."""
    main = event.get("main") or {}
    redo = main.get("redo_cpu_s")
    if isinstance(redo, (int, float)):
        return float(redo)
    imports = main.get("imports_s")
    if imports is None:
        return None
    return INTERPRETER_START_S + (float(imports) + float(main.get("top_level_work_s") or 0.0)) * _parent_share(event)


def start_work_s(event: dict[str, Any], method: str) -> float | None:
    """The CPU seconds one worker spends starting (0 for fork; None: no start-up profile): the parent's start again
    (spawn; forkserver without the server's preload of `__main__`, less the interpreter's start it forks past), and
    the unpickling of its copy."""
    if method == "fork":
        return 0.0
    redo = _redo_s(event)
    if redo is None:
        return None
    if method == "forkserver":
        preloaded = (event.get("forkserver") or {}).get("preloads_main")
        redo = 0.0 if preloaded else max(0.0, redo - INTERPRETER_START_S)
    unpickle = _pickle_cpu_s(event) * UNPICKLE_PER_PICKLE + _gib(event.get("buffer_bytes")) * WORKER_COPY_S_PER_GIB
    return round(redo + unpickle, 4)


def worker_share(event: dict[str, Any], starting: int | None = None) -> float:
    """The share of a core each starting worker gets: the parent's competitors (as many as its waiting just before
    the loop says), less the parent, which waits for the workers, plus the workers starting together (all of them by
    default)."""
    cpus = max(1, int(event.get("cpus") or 1))
    share = _share_now(event)
    runnable = cpus / share if share < BUSY_SHARE else 1.0
    workers = starting if starting is not None else max(1, int(event.get("num_workers") or 1))
    return min(1.0, cpus / max(1.0, runnable - 1 + workers))


def predicted(event: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Per method, the copy each worker gets up front and its start-up (forkserver, spawn: from the event)."""
    out: dict[str, dict[str, Any]] = {"fork": {"copy_bytes": 0, "start_s": 0.0}}
    picklable = event.get("picklable")
    for method in ("forkserver", "spawn"):
        out[method] = {
            "copy_bytes": event.get("copy_bytes") if picklable else None,
            "start_s": predicted_start_s(event, method) if picklable else None,
        }
    return out


def measured(run: RunData, loader: LoaderRecord, method: str) -> dict[str, Any]:
    starts = worker_start_s(run, loader)
    out: dict[str, Any] = {"start_s": max(starts) if starts else None, "worker_starts": _starts(loader)}
    rows = worker_growth_rows(run, loader)
    if method == "fork":
        grown = [r["uss_growth_bytes"] for r in rows if r.get("uss_growth_bytes") is not None]
        out["cow_bytes"] = max(grown) if grown else None
    else:
        at_start = [r["uss_start_bytes"] for r in rows if r.get("uss_start_bytes") is not None]
        out["uss_start_bytes"] = max(at_start) if at_start else None
    return out


def readiness_line(run: RunData, loader: LoaderRecord) -> str | None:
    """One line for the loader's entry: the method in use and what the others would change."""
    event = readiness_event(run, loader)
    if event is None:
        refused = events_of(run, EV_START_READINESS_SKIPPED, loader.loader_id)
        if refused:  # a copy the script would have seen, or one that could have got it killed
            return f"not checked: {refused[0].get('reason') or 'no reason recorded'}"
        return None
    method = loader.start_method or str(event.get("start_method"))
    how = "chosen by the script" if event.get("chosen") else "the interpreter's default"
    head = f"{method} ({how})"
    blocked = blockers(event)
    if blocked:
        return f"{head}; forkserver and spawn would fail to start its workers: " + "; ".join(
            blocker_text(b) for b in blocked[:3]
        )
    if event.get("picklable") is None:
        skipped = next((o.get("skipped") for o in event.get("objects") or [] if o.get("skipped")), "bounded")
        return f"{head}; whether forkserver and spawn could pickle its dataset is not known (check stopped: {skipped})"
    guess = predicted(event)
    others = [m for m in ("forkserver", "spawn") if m != method]
    not_run = sorted({c for o in event.get("objects") or [] for c in o.get("not_run") or []})
    unchecked = (
        f" (not checked inside {', '.join(c.rsplit('.', 1)[-1] for c in not_run[:3])}: its own pickling was not called)"
        if not_run
        else ""
    )
    start = guess[others[0]]["start_s"]
    parts = [
        f"{'/'.join(others)}: the dataset pickles ({format_bytes(event.get('pickled_bytes'))}){unchecked}, each "
        "worker would "
        f"hold a ~{format_bytes(event.get('copy_bytes'))} copy"
        + ("" if start is None else f"; its workers would all be started in ~{start:.1f} s")
    ]
    if method != "fork":
        parts.append("fork: no copy up front, no start-up")
    return f"{head}{_measured_text(run, loader, method)}; " + "; ".join(parts)


def _measured_text(run: RunData, loader: LoaderRecord, method: str) -> str:
    """What the method in use cost on this run: its workers' start-up, and their copy-on-write copies (fork) or
    private memory as they started (forkserver, spawn)."""
    seen = measured(run, loader, method)
    said = []
    if seen.get("start_s") is not None:
        said.append(f"workers started in {seen['start_s']:.2f} s")
    if seen.get("cow_bytes") is not None:
        said.append(f"each copied up to {format_bytes(seen['cow_bytes'])} of the parent")
    if seen.get("uss_start_bytes") is not None:
        said.append(f"each held {format_bytes(seen['uss_start_bytes'])} of its own as it started")
    return f" ({', '.join(said)})" if said else ""


def find_start_method(run: RunData) -> list[Finding]:
    findings = []
    for loader in run.loaders:
        if not loader.num_workers or loader.thread_workers:
            continue
        event = readiness_event(run, loader)
        if event is None:
            continue
        method = loader.start_method or str(event.get("start_method"))
        finding = _breaks_on_upgrade(loader, event, method) or _costs(run, loader, event, method)
        if finding is not None:
            findings.append(finding)
    return findings


def _evidence(loader: LoaderRecord, event: dict[str, Any], method: str) -> Evidence:
    return {
        "start_method": method,
        "method_chosen": bool(event.get("chosen")),
        "num_workers": loader.num_workers,
        "blockers": blockers(event),
        "pickled_bytes": event.get("pickled_bytes"),
        "predicted": predicted(event),
        "main_script": event.get("main") or {},
    }


# The start-method fix's last sentence; analysis/advice_agreement.py takes it back where this run shows fork unsafe
KEEP_FORK = " Until then, `multiprocessing_context='fork'` on the DataLoader keeps today's behaviour on Python 3.14."


def _breaks_on_upgrade(loader: LoaderRecord, event: dict[str, Any], method: str) -> Finding | None:
    """The loader starts under fork only because fork is this Python's default: on Python 3.14 (forkserver by default
    on Linux) or under spawn, its workers would not start."""
    blocked = blockers(event)
    if method != "fork" or event.get("chosen") or not blocked:
        return None
    first = blocked[0]
    fixes = [
        'add `if __name__ == "__main__":` and move the script\'s work under it (a `main()` function)'
        if b["kind"] == "no-main-guard"
        else f"`{b['attribute']}`: {_FIXES.get(str(b['kind']), 'make it picklable, or drop it in __getstate__')}"
        for b in blocked[:4]
    ]
    return Finding(
        code="start-method",
        severity="warning",
        title=(
            f"Loader {loader.loader_id}'s workers start only under fork: under forkserver (Python 3.14's default on "
            f"Linux) or spawn they would fail, {blocker_text(first)}"
        ),
        detail=(
            "This run used fork because it is this Python's default, and fork copies the parent's memory as it is. "
            "Python 3.14 starts workers with forkserver on Linux, and forkserver and spawn pickle the dataset, "
            "collate_fn and worker_init_fn for each worker and import `__main__` again in it. What stops them: "
            + "; ".join(blocker_text(b) for b in blocked[:4])
            + '. The error then comes at the first `iter(loader)` ("Can\'t pickle local object", on Python 3.13 '
            '"Can\'t get local object", "cannot pickle", or "An attempt has been made to start a new process '
            'before the current process has finished its bootstrapping phase").'
        ),
        fix="; ".join(fixes) + "." + KEEP_FORK,
        evidence=_evidence(loader, event, method),
        loader_id=loader.loader_id,
    )


def _costs(run: RunData, loader: LoaderRecord, event: dict[str, Any], method: str) -> Finding | None:
    """The method in use costs memory or start-up that another, which would start here, does not."""
    seen = measured(run, loader, method)
    evidence: Evidence = {**_evidence(loader, event, method), "measured": seen}
    guess = predicted(event)
    if method == "fork":
        cow, copy = seen.get("cow_bytes"), guess["forkserver"]["copy_bytes"]
        if cow is None or copy is None or cow < COW_WORTH_SWITCH or copy > cow * COPY_SHARE or blockers(event):
            return None
        return Finding(
            code="start-method",
            severity="info",
            title=(
                f"Each forked worker of loader {loader.loader_id} copied up to {format_bytes(cow)} of the parent; a "
                f"forkserver worker would start with a ~{format_bytes(copy)} copy of what it is handed"
            ),
            detail=(
                "Forked workers share the parent's whole memory and copy each page they touch (cow-growth); forkserver "
                "and spawn workers receive only the pickled dataset, collate_fn and worker_init_fn, measured here "
                f"at {format_bytes(event.get('pickled_bytes'))} pickled (~{format_bytes(copy)} in memory), and "
                f"would all be started in ~{guess['forkserver']['start_s'] or 0:.1f} s."
            ),
            fix="`DataLoader(..., multiprocessing_context='forkserver', persistent_workers=True)`, or pack the "
            "records so forked workers stop copying them (cow-growth's fix).",
            evidence=evidence,
            loader_id=loader.loader_id,
        )
    start = seen.get("start_s")
    starts = int(seen.get("worker_starts") or 0)
    run_s = _run_seconds(run)
    if start is None or not starts:
        return None
    total = start * starts
    if total < SLOW_START_TOTAL_S or (run_s and total < SLOW_START_RUN_SHARE * run_s):
        return None
    persistent = bool(loader.config.get("persistent_workers"))
    return Finding(
        code="start-method",
        severity="warning",
        title=(
            f"Loader {loader.loader_id}'s {method} workers took {start:.1f} s to start, {starts} time"
            f"{'s' if starts > 1 else ''}: {total:.1f} s of the run; forked workers start at once"
        ),
        detail=(
            f"A {method} worker imports what `__main__` imports and unpickles its copy of the dataset before its first "
            f"batch (its own start event came {start:.1f} s after the iterator was made)"
            + ("" if persistent else ", and without persistent_workers every epoch starts new workers")
            + "."
        ),
        fix=("`persistent_workers=True` starts them once. " if not persistent else "")
        + "`torch.multiprocessing.set_forkserver_preload(['torch', ...])` imports them once in the forkserver; or "
        "`multiprocessing_context='fork'` where nothing fork-unsafe (threads, CUDA) runs before the loader.",
        evidence=evidence,
        loader_id=loader.loader_id,
    )


def _run_seconds(run: RunData) -> float | None:
    started, ended = run.meta.get("started_at"), run.result.get("ended_at")
    return (
        float(ended) - float(started) if isinstance(started, (int, float)) and isinstance(ended, (int, float)) else None
    )
