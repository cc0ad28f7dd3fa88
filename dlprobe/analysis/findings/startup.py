"""Findings about how the loader starts: a slow path to the first batch, and threads or CUDA alive at fork."""

from __future__ import annotations

import os
import re
from typing import Any

from dlprobe.analysis.evidence.finding import Finding
from dlprobe.analysis.evidence.schema import Evidence, as_evidence
from dlprobe.analysis.findings.common import same_loader, worker_name
from dlprobe.analysis.measures.loop_timing import events_of, loop_timing
from dlprobe.analysis.measures.stack_causes import classify, main_thread, native_wait
from dlprobe.analysis.measures.start_blockers import OTHER_METHODS, other_methods
from dlprobe.analysis.measures.worker_cpu import BUSY_RUNQ_SHARE
from dlprobe.analysis.run.model import LoaderRecord, RunData
from dlprobe.frames import is_remedy_file, is_user_file
from dlprobe.rundir.schema import EV_FORK_HANDLES, EV_FORK_STATE, EV_START, EV_STARTUP_PROFILE

SLOW_CONSTRUCT_S = 2.0  # the script's work before the loader existed (imports timed apart)
SLOW_WORKER_START_S = 2.0  # iter() plus the first batch
SLOW_RESTART_S = 1.0  # extra first-batch time of every later epoch when workers are not persistent
# A slow start is a warning only when it is worth acting on whatever the machine's load: the script's own share of
# the time (the time the main process waited for a core taken out) is at least this long, and at least this share of
# the run (restarts of workers every epoch: their total). Below that it is a note: a few seconds once per job are
# no reason to change code, and a CI rule that fails on warnings must not fail a healthy script on a busy runner.
SLOW_START_WARN_S = 10.0
SLOW_START_WARN_SHARE = 0.1
HOT_SHARE = 0.5  # the hot path follows children holding at least this share of the phase
WALK_SHARE = 0.3  # file-system frames in this share of construction time make it a directory walk
_FS_FILES = re.compile(
    r"(^|/)(os|glob|pathlib|genericpath|posixpath|shutil|fnmatch)\.py$|^<frozen (os|genericpath|posixpath)>$"
    r"|torchvision/datasets/folder\.py$"
)
_IMAGE_FOLDER = re.compile(r"torchvision/datasets/folder\.py$")
# A directory walk is recognised by the file-system calls it makes, whatever the user's function is called: the
# standard library's Python frames around each stat (os.path.getsize shows as `getsize (<frozen genericpath>)`,
# Path.is_file as `Path.is_file (pathlib.py)`), never its path-string helpers (join, splitext), which are CPU work.
_FS_FUNCS = re.compile(
    r"walk|scandir|listdir|glob|find_classes|make_dataset|iterdir|stat|exists|is_?(file|dir|link|mount|symlink)"
    r"|get(size|mtime|atime|ctime)|samefile|realpath|_select_from|_iterate_directories"
)

REMEDY_NOTE_S = 1.0  # a remedy's one-time start-up cost worth naming (info), so the user knows it is not a new problem
# How not to pay a remedy's one-time cost again, by the remedy the start-up samples were in.
_REMEDY_ONCE = {
    "PackedRecords": "pass a cache key, `PackedRecords(rows, share='records-v1')`: the packed buffer then stays in "
    "/dev/shm and later runs and the other ranks on this machine attach to it instead of packing again (pass a "
    "function, `PackedRecords(load_rows, share=...)`, to skip building the rows as well)",
    "PackedMapping": "pass a cache key, `PackedMapping(mapping, share='annotations-v1')`: the packed buffer then "
    "stays in /dev/shm and later runs and the other ranks on this machine attach to it instead of packing again "
    "(pass a function, `PackedMapping(load_mapping, share=...)`, to skip building the mapping as well)",
    "shm_array": "nothing: the array stays in /dev/shm under its key, and later runs and the other ranks on this "
    "machine attach to it (`dlprobe cache list` shows it; build it with a function so they skip the load)",
    "FileIndexDataset": "nothing: the index is cached on disk and reused until a folder changes, so only this first "
    "run walks the tree (give every run the same `cache_dir`)",
}
_REMEDY_ONCE["build_file_index"] = _REMEDY_ONCE["FileIndexDataset"]

Frame = tuple[str, str]


def _is_import(frames: list[list[Any]]) -> bool:
    return any(f[0].startswith("<frozen importlib") for f in frames)


def _is_fs(frame: list[Any]) -> bool:
    return bool(_FS_FILES.search(frame[0])) and bool(_FS_FUNCS.search(frame[1]))


def frame_label(frame: list[Any] | tuple[Any, ...]) -> str:
    return f"{frame[1]} ({os.path.basename(frame[0])}:{frame[2]})" if len(frame) > 2 else f"{frame[1]} ({frame[0]})"


def hot_path(stacks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """From the outermost frame down, the chain of calls that holds at least HOT_SHARE of the time."""
    total = sum(s["seconds"] for s in stacks)
    path: list[dict[str, Any]] = []
    current = stacks
    depth = 0
    while current and total > 0:
        by_frame: dict[Frame, list[dict[str, Any]]] = {}
        for s in current:
            if len(s["frames"]) > depth:
                f = s["frames"][depth]
                by_frame.setdefault((f[0], f[1]), []).append(s)
        if not by_frame:
            break
        (file, func), group = max(by_frame.items(), key=lambda kv: sum(s["seconds"] for s in kv[1]))
        seconds = sum(s["seconds"] for s in group)
        if seconds < HOT_SHARE * total:
            break
        line = max(group, key=lambda s: s["seconds"])["frames"][depth][2]
        path.append({"frame": frame_label((file, func, line)), "file": file, "function": func,
                     "seconds": round(seconds, 3), "share": round(seconds / total, 3)})  # fmt: skip
        current = group
        depth += 1
    return path


def _startup_phases(run: RunData, loader: LoaderRecord) -> dict[str, Any] | None:
    start = next(iter(events_of(run, EV_START)), None)
    if start is None or not loader.epochs or not loader.epochs[0].waits:
        return None
    epoch = loader.epochs[0]
    created = loader.config.get("created_t") or epoch.t_start
    profile = next(iter(events_of(run, EV_STARTUP_PROFILE)), None)
    stacks = (profile or {}).get("stacks") or []
    before = [s for s in stacks if s["phase"] == "before_loader"]
    imports_s = sum(s["seconds"] for s in before if _is_import(s["frames"]))
    construct = [s for s in before if not _is_import(s["frames"])]
    return {
        "script_to_first_batch_s": round(epoch.t_start + epoch.iter_s + epoch.waits[0] - start["t"], 3),
        "script_to_loader_s": round(created - start["t"], 3),
        "imports_s": round(imports_s, 3),
        # Whatever the script did before creating the DataLoader, imports left out: a dataset's constructor, but
        # under Lightning also the Trainer's own set-up. What ran in it is in the sampled stacks, not in this name.
        "before_loader_s": round(max(0.0, created - start["t"] - imports_s), 3),
        "before_loader_sampled_s": round(sum(s["seconds"] for s in construct), 3),
        "loader_to_iter_s": round(epoch.t_start - created, 3),
        "worker_start_s": round(epoch.iter_s, 3),
        "first_batch_wait_s": round(epoch.waits[0], 3),
        "_construct_stacks": construct,
    }


def _where_time_went(path: list[dict[str, Any]], phase_s: float) -> dict[str, Any] | None:
    """The user's deepest frame on the hot path (the line to change) and the library call it went into, if any.

    Seconds are the sampled seconds under that frame, and the share is of the measured phase, so a constructor
    sampled for 0.1 s of a 2.3 s phase reads as 4%, never as "100% of it".
    """
    first_fs = next((i for i, p in enumerate(path) if _is_fs([p["file"], p["function"]])), len(path))
    user = [i for i, p in enumerate(path[:first_fs]) if is_user_file(p["file"])]
    at = user[-1] if user else (len(path) - 1 if path else None)
    if at is None or phase_s <= 0:
        return None
    hot = path[at]
    into = path[at + 1] if user and at + 1 < first_fs else None  # e.g. main -> Trainer.fit: the Trainer's set-up
    seconds = (into or hot)["seconds"]
    return {
        "frame": hot["frame"],
        "function": hot["function"],
        "into": into["frame"] if into else None,
        "seconds": round(seconds, 3),
        "share": round(min(1.0, seconds / phase_s), 3),
    }


def _remedy(stack: dict[str, Any]) -> str | None:
    """The dlprobe.fixes remedy a start-up sample was in (its outermost frame there: PackedRecords, shm_array)."""
    frame = next((f for f in stack["frames"] if is_remedy_file(f[0])), None)
    return frame[1].split(".")[0] if frame else None


def _remedy_cost(loader: LoaderRecord, remedies: dict[str, float], before_s: float) -> Finding:
    """The one-time cost of dlprobe's own remedy, said as such: never a warning against the fix."""
    name, seconds = max(remedies.items(), key=lambda kv: kv[1])
    once = _REMEDY_ONCE.get(name, "keep what it builds (a /dev/shm key, a cache directory) from one run to the next")
    return Finding(
        code="remedy-cost",
        severity="info",
        title=f"Loader {loader.loader_id}'s start-up included {seconds:.1f} s in {name} from dlprobe.fixes "
        f"(of {before_s:.1f} s before the DataLoader existed): the remedy's one-time cost, not a slow start",
        detail=(
            "A remedy from dlprobe.fixes does its work once, before the DataLoader starts (packing records into one "
            "buffer, building a file index, filling /dev/shm), so that every worker and every epoch reads it "
            "without copies or a walk; the seconds are from the start-up sampler's share of that phase."
        ),
        fix=f"To not pay it again: {once}.",
        evidence={
            "remedy": name,
            "remedy_s": round(seconds, 3),
            "remedies_s": {k: round(v, 3) for k, v in remedies.items()},
            "before_loader_s": round(before_s, 3),
        },  # fmt: skip
        loader_id=loader.loader_id,
    )


def _file_index_fix(stacks: list[dict[str, Any]], function: str | None) -> str:
    """Remedy 3 of dlprobe.fixes, as code to paste in place of ImageFolder or the script's own walk."""
    image_folder = any(_IMAGE_FOLDER.search(f[0]) for s in stacks for f in s["frames"])
    instead = "ImageFolder(root, ...)" if image_folder else f"the walk in {function or 'the constructor'}"
    return (
        "Build the file index once and reload it: `from dlprobe.fixes import FileIndexDataset`, "
        f"`dataset = FileIndexDataset(root, transform=...)` in place of {instead} (ImageFolder's samples, targets "
        "and classes from one os.scandir per folder, no per-file stat, cached on disk until a folder changes; "
        "`build_file_index(root)` for the (path, class) list alone)"
    )


def _restart_cost(loader: LoaderRecord) -> float:
    """Mean extra time to the first batch of epochs after the first (workers started again each epoch)."""
    # persistent_workers unread (the settings could not be read) is no evidence that workers restart each epoch
    if not loader.settings_read or loader.num_workers == 0 or loader.config.get("persistent_workers"):
        return 0.0
    if len(loader.epochs) < 2:
        return 0.0
    timing = loop_timing(loader)
    steady = timing.median_wait_s if timing else 0.0
    later = [e.iter_s + e.waits[0] - steady for e in loader.epochs[1:] if e.waits]
    return sum(later) / len(later) if later else 0.0


def _unplaced_in_a_crash(run: RunData, construct_stacks: list[dict[str, Any]], before_s: float) -> bool:
    """Set-up time the sampler saw too little of to place, in a run that ended in an error: the error is the news,
    and a cause that is not known is no finding (a run that ends well still gets it, as a note)."""
    return run.ended_in_error and sum(s["seconds"] for s in construct_stacks) < HOT_SHARE * before_s


def find_slow_start(run: RunData) -> list[Finding]:
    findings: list[Finding] = []
    notes: list[Finding] = []  # remedy-cost, after the warnings
    first_loader = min((lo for lo in run.loaders if lo.epochs), key=lambda lo: lo.epochs[0].t_start, default=None)
    for loader in run.loaders:
        phases = _startup_phases(run, loader) if loader is first_loader else None
        restart = _restart_cost(loader)
        causes: list[str] = []
        fixes: list[str] = []
        evidence: Evidence = {}
        slow_workers = False
        unplaced = False  # the time before the loader was measured but the sampler could not place it
        once_s = 0.0  # what the causes cost once per start: the script's own set-up, starting the workers
        start_t = _script_start(run)
        busy = _machine_busy(
            run, start_t, loader.config.get("created_t") or (loader.epochs[0].t_start if loader.epochs else None)
        )
        own = 1.0 - busy["waited_share"] if busy else 1.0  # the script's own share of its start-up's wall time
        if phases is not None:
            construct_stacks = phases.pop("_construct_stacks")
            evidence["phases"] = phases
            # A remedy's work (packing records, a file index) is its one-time cost: said apart, and taken out of the
            # phase by its share of the samples before the rest is judged.
            remedies: dict[str, float] = {}
            for stack in construct_stacks:
                name = _remedy(stack)
                if name:
                    remedies[name] = remedies.get(name, 0.0) + stack["seconds"]
            # Sampled seconds, scaled to the phase by their share of the samples when the sampler saw most of it
            # (the rest of the phase is spread like what it saw); otherwise only what it saw.
            sampled_all = phases["before_loader_sampled_s"]
            if sampled_all >= HOT_SHARE * phases["before_loader_s"]:
                remedies = {k: v * phases["before_loader_s"] / sampled_all for k, v in remedies.items()}
            remedy_s = sum(remedies.values())
            if remedy_s >= REMEDY_NOTE_S and phases["before_loader_s"] >= SLOW_CONSTRUCT_S:
                notes.append(_remedy_cost(loader, remedies, phases["before_loader_s"]))
            construct_stacks = [s for s in construct_stacks if not _remedy(s)]
            # Imports are timed (phases) but never a cause on their own: torch alone takes seconds, and no loader
            # setting changes that.
            # judged on the script's own part of it: time it waited for a core on a busy machine is the machine's
            # (a 2.2 s start-up, 73% of it run-queue wait, was a finding on one repeat of the demo and not the next)
            # The set-up's own share is read over the set-up itself (the seconds before the loader, after the imports):
            # the imports' run-queue wait is not the set-up's (a 2.5 s sleep building an index, after 1.9 s of
            # imports that waited for a core, read as 1.97 s of the script's own time with the whole start-up's share).
            created = loader.config.get("created_t")
            setup_busy = (
                _machine_busy(run, created - phases["before_loader_s"], created) if created is not None else busy
            )
            own_setup = 1.0 - setup_busy["waited_share"] if setup_busy else 1.0
            if own_setup * (phases["before_loader_s"] - remedy_s) >= SLOW_CONSTRUCT_S and not _unplaced_in_a_crash(
                run, construct_stacks, phases["before_loader_s"] - remedy_s
            ):
                before_s = phases["before_loader_s"] - remedy_s
                once_s += before_s
                sampled_s = sum(s["seconds"] for s in construct_stacks)
                path = hot_path(construct_stacks)
                hot = _where_time_went(path, before_s)
                fs_s = sum(s["seconds"] for s in construct_stacks if any(_is_fs(f) for f in s["frames"]))
                # A walk is named only on file-system calls that were sampled, never on an empty sample.
                walk = fs_s > 0 and fs_s >= WALK_SHARE * sampled_s
                where = ""
                if hot:
                    into = f", inside {hot['into']}" if hot["into"] else ""
                    where = f"; {hot['seconds']:.1f} s of it ({100 * hot['share']:.0f}%) in {hot['frame']}{into}"
                if sampled_s < HOT_SHARE * before_s:  # the sampler saw too little of it to say where it went
                    where += f"; the start-up sampler saw only {sampled_s:.1f} s of it, so where it went is not known"
                    unplaced = True
                causes.append(
                    f"the script ran {before_s:.1f} s (imports excluded"
                    + (f"; {remedy_s:.1f} s in dlprobe.fixes apart, see remedy-cost" if notes else "")
                    + f") before it created the DataLoader{where}"
                    + (f" (a directory walk: {fs_s:.1f} s in file-system calls)" if walk else "")
                )
                evidence.update({"hot_path": [p["frame"] for p in path],
                                 "hot_function": hot["frame"] if hot else None,
                                 "hot_calls_into": hot["into"] if hot else None,
                                 "hot_seconds": hot["seconds"] if hot else None,
                                 "hot_share": hot["share"] if hot else None,
                                 "file_system_s": round(fs_s, 3), "directory_walk": walk})  # fmt: skip
                if walk:
                    fixes.append(_file_index_fix(construct_stacks, hot["function"] if hot else None))
                elif hot and hot["share"] >= HOT_SHARE:
                    # the user's own line, as the title names it: the library call it goes into is what it spends
                    # the time on, never the line to change (the standard library is not the user's to edit)
                    into = f" (its time goes into {hot['into']})" if hot["into"] else ""
                    fixes.append(f"Make {hot['frame']} cheaper{into} or cache its result on disk")
                else:  # the samples do not show where the time went: say how to find out, not a guess
                    fixes.append(
                        "profile the start-up to see where it goes (`py-spy record -o start.svg -- python train.py`)"
                    )
            if phases["worker_start_s"] + phases["first_batch_wait_s"] >= SLOW_WORKER_START_S:
                slow_workers = True
                once_s += phases["worker_start_s"] + phases["first_batch_wait_s"]
                method = loader.start_method or "fork"
                causes.append(
                    f"starting {loader.num_workers} {method} worker(s) and getting the first batch took "
                    f"{phases['worker_start_s'] + phases['first_batch_wait_s']:.1f} s"
                )
                if method in ("spawn", "forkserver"):
                    fixes.append("keep the dataset object small (it is pickled into every spawn/forkserver worker)")
        if restart >= SLOW_RESTART_S:
            causes.append(f"every later epoch waited {restart:.1f} s more for its first batch while workers restarted")
            evidence["restart_per_epoch_s"] = round(restart, 3)
        # persistent_workers only saves worker start-ups: never the advice for imports or the script's own set-up.
        persistent = loader.config.get("persistent_workers")
        if restart >= SLOW_RESTART_S or (slow_workers and loader.num_workers and not persistent):
            fixes.append("DataLoader(..., persistent_workers=True) so workers start once, not every epoch")
        if not causes:
            continue
        total = (phases or {}).get("script_to_first_batch_s")
        # Time that only the clock saw (a busy machine starves the sampler) points at nothing to change: a note
        # of what was measured, not a warning, unless another cause stands beside it.
        note_only = unplaced and len(causes) == 1
        restarts_s = restart * max(0, len(loader.epochs) - 1)
        run_s = _run_length(run, start_t)
        worth = (own * once_s >= SLOW_START_WARN_S and own * once_s >= SLOW_START_WARN_SHARE * (run_s or 0.0)) or (
            restart >= SLOW_RESTART_S and own * restarts_s >= SLOW_START_WARN_SHARE * (run_s or float("inf"))
        )
        evidence.update({"start_cost_s": round(once_s, 3), "restarts_s": round(restarts_s, 3),
                         "run_s": None if run_s is None else round(run_s, 3), "busy": busy})  # fmt: skip
        if busy:
            causes.append(_busy_text(busy, (run.meta.get("machine") or {}).get("usable_cores")))
        findings.append(
            Finding(
                code="slow-start",
                severity="warning" if worth and not note_only else "info",
                title=f"Loader {loader.loader_id} is slow to start"
                + (f" (first batch {total:.1f} s after the script started)" if total is not None else "")
                + ": "
                + "; ".join(causes),
                detail=(
                    "Start-up time is paid before any training happens (and on every restart or job retry). The "
                    "phases below come from timestamps in the training process; the hot path from sampling its "
                    "main thread's stack until the first DataLoader was iterated (imports are timed apart); a share "
                    "is of the measured phase, not of the samples. It is a warning only when the script's own part "
                    f"of it (the time it waited for a core taken out) is {SLOW_START_WARN_S:.0f} s or more and "
                    f"{SLOW_START_WARN_SHARE:.0%} of the run or more (restarts: their total over the epochs); a "
                    "shorter start-up is a note."
                ),
                fix="; ".join(dict.fromkeys(fixes)) + ".",
                evidence=evidence,
                loader_id=loader.loader_id,
            )
        )
    return findings + notes


def _script_start(run: RunData) -> float | None:
    start = next(iter(events_of(run, EV_START)), None)
    return float(start["t"]) if start else run.meta.get("started_at")


def _run_length(run: RunData, start_t: float | None) -> float | None:
    """From the script's start to the run's end (or its last epoch's end where the end was not recorded)."""
    ends = [float(e) for e in [run.result.get("ended_at"), *(ep.t_end for lo in run.loaders for ep in lo.epochs)] if e]
    if start_t is None or not ends:
        return None
    return max(ends) - start_t


def _machine_busy(run: RunData, t0: float | None, t1: float | None) -> dict[str, Any] | None:
    """Whether the machine was busy while the script started: the main process's run-queue wait over the start-up
    (schedstat, read by the sampler), else the load average at the start against the usable cores. None: not busy,
    or not known. "waited_share" is the share of the time that was the machine's, not the script's."""
    main = next((p for p in run.processes if p.role == "main"), None)
    if main is not None and t0 is not None and t1 is not None and t1 > t0:
        readings = [
            (t, q) for t, q in zip(main.series.t, main.series.runq, strict=False) if q is not None and t0 - 1 <= t <= t1
        ]
        if len(readings) >= 2 and readings[-1][0] - readings[0][0] >= 0.5 * (t1 - t0):
            (ta, qa), (tb, qb) = readings[0], readings[-1]
            share = min(1.0, max(0.0, (qb - qa) / (tb - ta)))
            if share < BUSY_RUNQ_SHARE:
                return None
            return {"waited_share": round(share, 3), "runq_share": round(share, 3), "load_avg_1m": None}
    machine = run.meta.get("machine") or {}
    load, cores = machine.get("load_avg_1m"), machine.get("usable_cores")
    if load is None or not cores or load <= cores:
        return None
    share = round(1.0 - cores / load, 3)  # with `load` runnable tasks on `cores` cores, each gets cores/load of one
    return {"waited_share": share, "runq_share": None, "load_avg_1m": load}


def _busy_text(busy: dict[str, Any], cores: Any) -> str:
    if busy["runq_share"] is not None:
        seen = f"the script waited for a core {busy['runq_share']:.0%} of its start-up (run-queue wait)"
    else:
        seen = f"its load average was {busy['load_avg_1m']:.1f} on {cores} usable core(s) as the run started"
    return f"the machine was busy: {seen}, so that part of the time is the machine's load, not the script's"


_PROCESS_GROUP_THREAD = re.compile(r"^(gloo_|pt_gloo|pt_nccl|nccl|c10d|pt_c10d|ProcessGroup)", re.IGNORECASE)


def find_fork_hazard(run: RunData) -> list[Finding]:
    findings = []
    for loader in run.loaders:
        if (loader.start_method or "fork") != "fork":
            continue
        seen = hung_libraries(run, loader.loader_id)
        handed = events_of(run, EV_FORK_HANDLES, loader.loader_id)
        pools = [p for p in (handed[0].get("pools") or []) if isinstance(p, dict)] if handed else []
        alternative = other_methods(run, loader)
        held = _lock_hang(run, loader.loader_id)
        for state in events_of(run, EV_FORK_STATE, loader.loader_id):
            finding = _fork_finding(loader, state, seen, pools, alternative, held)
            if finding is not None:
                findings.append(finding)
                break  # the first risky fork is enough evidence
    return findings


def _lock_hang(run: RunData, loader_id: int) -> bool:
    """Whether a hung worker of this loader waits for a lock held at fork (stack_causes' fork-lock): a thread idle
    in a sleep at fork may hold one, and then the thread is the hang's cause, not a harmless bystander."""
    states = events_of(run, EV_FORK_STATE, loader_id)
    threads = [str(t.get("name")) for st in states[-1:] for t in st.get("python_threads") or [] if isinstance(t, dict)]
    return any(
        classify(proc, threads, "fork").cause == "fork-lock"
        for record in run.hangs
        for proc in record.get("processes") or []
        if proc.get("role") == "worker" and proc.get("loader_id") in (loader_id, None)
    )


def hung_libraries(run: RunData, loader_id: int) -> list[str]:
    """The libraries whose native code this loader's hung workers wait in (stack_causes.native_wait), from the hang
    records: what the native threads at fork belonged to, where a hang showed it."""
    found: list[str] = []
    for record in run.hangs:
        for proc in record.get("processes") or []:
            if proc.get("role") != "worker" or proc.get("loader_id") not in (loader_id, None):
                continue
            native = native_wait(main_thread(proc.get("stack") or []))
            if native is not None and native.library not in found:
                found.append(native.library)
    return found


def _native_names(state: dict[str, Any]) -> str:
    """The kernel's names of the threads at fork other than the interpreter's own name, which every thread a native
    library starts without naming it inherits."""
    names = {n: c for n, c in (state.get("os_thread_names") or {}).items() if not n.startswith("python")}
    return ", ".join(f"{n} x{c}" if c > 1 else n for n, c in list(names.items())[:6])


def _fork_finding(
    loader: LoaderRecord,
    state: dict[str, Any],
    seen: list[str] | None = None,
    pools: list[dict[str, Any]] | None = None,
    alternative: str = OTHER_METHODS,
    lock_hang: bool = False,
) -> Finding | None:
    # Threads a dataset's object holds (a ThreadPoolExecutor in self.pool) are that object's: named by it below.
    pooled = {name for p in pools or [] for name in p.get("threads") or []}
    every_thread = state.get("python_threads") or []
    threads = [t for t in every_thread if t.get("name") not in pooled]
    baseline = state.get("baseline") or {}
    native = state.get("os_threads", 1) - 1 - len(every_thread)
    native_before = baseline.get("os_threads", 1) - 1 - baseline.get("python_threads", 0) if baseline else 0
    # torch.distributed's own communication threads (gloo's loops, NCCL's watchdog) run in every rank of a job and
    # the workers never touch the process group: PyTorch's own DDP recipe forks workers next to them.
    comm = sum(
        int(count) for name, count in (state.get("os_thread_names") or {}).items() if _PROCESS_GROUP_THREAD.match(name)
    )
    native_extra = max(0, native - native_before - comm)
    cuda = bool(state.get("cuda_initialized"))
    openmp_pool = native_extra > 0 and state.get("openmp") and (state.get("torch_threads") or 1) > 1
    if not threads and not cuda and not native_extra and not pools:
        return None
    # Only a thread caught running its own code, or one whose code takes a lock, is a risk; one parked in a wait or
    # a sleep is not.
    # Runs recorded before thread states existed count every thread as running.
    running = [t for t in threads if t.get("state", "running") != "waiting"]
    waiting = [t for t in threads if t.get("state") == "waiting"]
    causes, fixes = [], []
    for pool in (pools or [])[:3]:
        attr, count = pool.get("attribute"), pool.get("count") or len(pool.get("threads") or [])
        causes.append(
            f"the dataset's `{attr}` ({pool.get('owner')}) holding {count} live thread(s) "
            f"({', '.join(pool.get('threads') or [])}): each worker inherits `{attr}` without its threads, so work it "
            "hands to them never runs"
        )
        fixes.append(
            f"create `{attr}` in each worker, not in `__init__`: set `{attr} = None` there and create it on first use "
            f"in `__getitem__` (`if {attr} is None:`) or in a worker_init_fn; or do the work without it in the workers"
        )
    if running:
        names = ", ".join(
            t["name"]
            + (" taking a lock" if t.get("state") == "uses-lock" else "")
            + (f" in {t['frame']}" if t.get("frame") else "")
            for t in running[:6]
        )
        causes.append(f"{len(running)} Python thread(s) running ({names})")
        fixes.append(
            "start background threads after the DataLoader's workers exist (or in worker_init_fn), and never share "
            "their locks with __getitem__"
        )
    if waiting:
        names = ", ".join(t["name"] for t in waiting[:6])
        causes.append(f"{len(waiting)} Python thread(s) idle in a wait or sleep ({names})")
        if lock_hang and not running:
            # A thread asleep inside `with lock:` reads as idle; a worker hung on a lock inherited locked says it
            # held one
            fixes.append(
                "a thread asleep at the fork may still hold a lock (a worker of this run hangs waiting for one): start "
                "such threads in worker_init_fn, or after iter(loader) with persistent_workers=True (without it "
                "each epoch forks again while they run), or create the lock in each worker"
            )
    if native_extra:
        # The parent's pool is not copied into workers (fork copies one thread); it only matters when the workers
        # themselves run parallel ops, which this snapshot cannot see: info, not a warning. Whose threads they are
        # is said only where something showed it: a hung worker waiting in a library's native code, or the names
        # the threads were given; never a list of guesses.
        if seen:
            libraries = ", ".join(seen)
            what = f"{libraries}: a hung worker waits in {'its' if len(seen) == 1 else 'their'} native code"
        elif openmp_pool:
            what = "OpenMP/MKL intra-op pool after a parallel torch op"
        else:
            named = _native_names(state)
            what = f"named {named}" if named else "unnamed: the kernel gives them the interpreter's name"
        causes.append(f"{native_extra} native thread(s) started since import ({what})")
        fixes.append(
            f"keep {', '.join(seen)} out of the parent before the workers fork, or turn off its parallelism"
            if seen
            else "keep workers at one intra-op thread (no torch.set_num_threads(>1) in workers; a library's own "
            "thread-count setting, e.g. cv2.setNumThreads(0), TOKENIZERS_PARALLELISM=false)"
        )
    if cuda:
        causes.append("CUDA initialised in the parent")
        fixes.append(
            "keep samples on the CPU in the Dataset and move batches to the GPU in the loop; if workers must use "
            "CUDA, multiprocessing_context='spawn' (forked workers fail with 'Cannot re-initialize CUDA in forked "
            "subprocess.')"
        )
    # Idle threads alone need no change: say so rather than open the fix with a dangling "or".
    fixes.append(
        f"or {alternative}" if fixes else f"nothing for threads idle in a wait; if workers hang at start, {alternative}"
    )
    severity = "warning" if running or cuda or seen or pools or lock_hang else "info"
    return Finding(
        code="fork-hazard",
        severity=severity,
        title=f"Loader {loader.loader_id} forked its workers (epoch {state.get('epoch')}) with " + " and ".join(causes),
        detail=(
            "fork() copies only the calling thread: a lock another thread held at that instant stays locked forever "
            "in every worker (a hang with no error), and GNU OpenMP's pool state is not fork-safe. Python 3.12+ warns "
            "'This process ... is multi-threaded, use of fork() may lead to deadlocks in the child.'"
        ),
        fix="; ".join(fixes) + ".",
        evidence=as_evidence(
            {
                k: state.get(k)
                for k in (
                    "epoch",
                    "os_threads",
                    "os_thread_names",
                    "python_threads",
                    "torch_threads",
                    "openmp",
                    "cuda_initialized",
                )
            }
            | {"native_threads_since_import": native_extra}
        ),  # fmt: skip
        loader_id=loader.loader_id,
    )


# Hangs whose stack shows a lock or a thread pool the worker inherited at fork (analysis/measures/stack_causes.py).
FORK_HANG_CAUSES = ("fork-lock", "openmp-fork", "opencv-threads")


def explains(cause: Finding, symptom: Finding) -> str | None:
    """A lock or thread pool held at fork explains a worker hung on that very lock or pool."""
    if cause.code != "fork-hazard" or symptom.code != "worker-hang" or not same_loader(cause, symptom):
        return None
    if symptom.evidence.get("cause") in FORK_HANG_CAUSES:
        return f"the hang of {worker_name(symptom)} (worker-hang)"
    return None
