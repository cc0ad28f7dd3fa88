"""Hang watch: notices when the training loop has waited too long for a batch and records the evidence.

The training process's in-flight slot says whether the loop is waiting for a batch (or for the workers to
start) and since when. After --hang-timeout seconds of that, the supervisor reads every process's state
twice (CPU time moving or not), dumps the stacks of the main process and every worker, and saves it all
in a hang record under hangs/ for the analyzers. Diagnosing is left to them, so `dlprobe report` can redo it.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from dlprobe import atomic
from dlprobe.rundir.handle import RunDir
from dlprobe.rundir.inflight_format import read_all, read_slot, slot_path
from dlprobe.rundir.schema import HangRecord
from dlprobe.supervisor.hang import procstate, stacks
from dlprobe.system.pyspy import find_py_spy

# The longest a loop's wait past --hang-timeout is put down to its workers still starting: under spawn or forkserver
# each worker is a new Python importing torch and unpickling the dataset, which on a busy machine takes longer than
# a short timeout. A worker counts as started once it has its in-flight record (made before the user's
# worker_init_fn, so a worker_init_fn that hangs is still reported at --hang-timeout). A wait that outlasted the
# timeout while its workers were starting gets the timeout again from the tick that first saw one started: a
# forkserver worker that started at 7.7 s into the wait was otherwise a main-hang at once, before its first batch.
STARTUP_GRACE_S = 60.0
CPU_WINDOW_S = 0.5  # two readings this far apart tell a blocked process from a busy one
PARALLEL_DUMPS = 4


class HangWatch:
    """Checked on every supervisor tick; dumps once per stalled wait."""

    def __init__(self, run_dir: Path, main_pid: int, timeout_s: float, on_hang: str) -> None:
        self.run_dir = run_dir
        self.main_pid = main_pid
        self.timeout_s = timeout_s
        self.on_hang = on_hang
        # (pid, since) of every wait dumped already: in a job each rank's loop waits on its own
        self.reported: set[tuple[int, float]] = set()
        # waits seen past the timeout with every worker starting, and the tick that then saw one started
        self.seen_starting: set[tuple[int, float]] = set()
        self.started_at: dict[tuple[int, float], float] = {}
        self.count = 0
        self.stopped = False
        self.last_record: HangRecord | None = None  # the hang just recorded (a torchrun rank's stop reads it)

    def stalled_wait(
        self, now: float, mains: list[int] | None = None, workers: dict[int, tuple[int, int, int]] | None = None
    ) -> tuple[int, dict[str, Any]] | None:
        """(pid, loop state) of a training process whose loop has waited past the timeout and was not dumped yet.

        `mains` are the processes that build DataLoaders (every rank of a job); the target itself by default.
        The longest wait wins: the rank whose loader is stuck waits longer than those stuck behind it.
        """
        if self.timeout_s <= 0:
            return None
        found: tuple[int, dict[str, Any]] | None = None
        for pid in mains or [self.main_pid]:
            slot = read_slot(slot_path(self.run_dir, pid))
            loop = (slot or {}).get("loop") or {}
            since = loop.get("since")
            if loop.get("state") not in ("waiting-for-batch", "creating-iterator") or not since:
                continue
            if now - since < self.timeout_s or (pid, since) in self.reported:
                continue
            if now - since < max(self.timeout_s, STARTUP_GRACE_S):
                live = self._live_workers(pid, workers or {})
                started = [w for w in live if slot_path(self.run_dir, w).exists()]
                if live and not started:
                    self.seen_starting.add((pid, since))
                    continue
                just_started = started and (pid, since) in self.seen_starting
                if just_started and now - self.started_at.setdefault((pid, since), now) < self.timeout_s:
                    continue  # its workers have just started: the timeout counts from then
            if found is None or since < found[1]["since"]:
                found = (pid, loop)
        return found

    def _live_workers(self, main_pid: int, workers: dict[int, tuple[int, int, int]]) -> list[int]:
        """This training process's workers still alive; one without its in-flight record is still starting."""
        return [pid for pid, (writer, _, _) in workers.items() if writer == main_pid and Path(f"/proc/{pid}").exists()]

    def check(
        self,
        now: float,
        pids: list[int],
        workers: dict[int, tuple[int, int, int]],
        mains: list[int] | None = None,
    ) -> bool:
        """Record a hang if there is one; True when the run should now be stopped (--on-hang stop)."""
        stalled = self.stalled_wait(now, mains, workers)
        if stalled is None:
            return False
        main_pid, loop = stalled
        self.reported.add((main_pid, loop["since"]))
        self.count += 1
        record = collect(self.run_dir, main_pid, pids, workers, loop, now, self.count, mains)
        record["on_hang"] = self.on_hang
        record["timeout_s"] = self.timeout_s
        files = RunDir(self.run_dir)
        files.hangs_dir.mkdir(exist_ok=True)
        atomic.write_text_atomic(files.hang_record(self.count), json.dumps(record, indent=1, default=str) + "\n")
        self.last_record = record
        self.stopped = self.on_hang == "stop"
        return self.stopped


def _role(
    pid: int, mains: set[int], slot: dict[str, Any] | None, workers: dict[int, tuple[int, int, int]]
) -> dict[str, Any]:
    """main (a process that builds loaders: each rank), worker (with its main's pid where known), or other."""
    if pid in mains or (slot is not None and slot.get("role") == "main"):
        return {"role": "main", "loader_id": None, "worker_id": None}
    writer = workers.get(pid)
    if slot is not None and slot.get("role") == "worker":
        role = {"role": "worker", "loader_id": slot.get("loader_id"), "worker_id": slot.get("worker_id")}
    elif writer is not None:
        role = {"role": "worker", "loader_id": writer[1], "worker_id": writer[2]}
    else:
        return {"role": "other", "loader_id": None, "worker_id": None}
    if writer is not None:
        role["main_pid"] = writer[0]
    return role


def collect(
    run_dir: Path,
    main_pid: int,
    pids: list[int],
    workers: dict[int, tuple[int, int, int]],
    loop: dict[str, Any],
    now: float,
    number: int,
    mains: list[int] | None = None,
) -> HangRecord:
    """Everything known about a stalled run right now: per process state, CPU use, in-flight slot, stacks.

    The stalled main process comes first; in a job the other ranks follow as mains too, with their stacks (they
    are typically waiting in a collective for the stalled one).
    """
    slots = read_all(run_dir)
    main_set = {main_pid, *(mains or [])}
    pids = [main_pid, *[p for p in pids if p != main_pid]]
    threads = _live_thread_workers(slots, main_set)
    first = {pid: procstate.read_state(pid) for pid in pids}
    first_threads = {tid: procstate.read_state(slot["pid"], tid) for tid, slot in threads.items()}
    t0 = time.monotonic()
    time.sleep(CPU_WINDOW_S)
    elapsed = time.monotonic() - t0
    hz = procstate.clock_ticks_per_s()
    processes = []
    for pid in pids:
        state = procstate.read_state(pid)
        entry: dict[str, Any] = {"pid": pid, **_role(pid, main_set, slots.get(pid), workers)}
        if state is None:
            entry["gone"] = True
        else:
            entry.update(state)
            before = first.get(pid)
            if before is not None:
                entry["cpu_share"] = round((state["cpu_ticks"] - before["cpu_ticks"]) / hz / elapsed, 3)
        entry["inflight"] = slots.get(pid)
        processes.append(entry)
    tool_problem = _dump_stacks(run_dir, processes, number)
    for tid, slot in threads.items():
        processes.append(_thread_entry(tid, slot, first_threads.get(tid), processes, hz, elapsed))
    return {
        "number": number,
        "t": now,
        "waited_s": round(now - loop["since"], 3),
        "loop": loop,
        "main_pid": main_pid,
        "processes": processes,
        "stack_problem": tool_problem,
    }


def _live_thread_workers(slots: dict[int, dict[str, Any]], mains: set[int]) -> dict[int, dict[str, Any]]:
    """The slots of worker threads (worker_method="thread") still running in a training process, by thread id;
    the slots of an earlier epoch's threads stay on disk after they end."""
    return {
        tid: slot
        for tid, slot in slots.items()
        if slot.get("role") == "thread-worker"
        and slot.get("pid") in mains
        and procstate.cpu_ticks(slot["pid"], tid) is not None
    }


def _thread_entry(
    tid: int,
    slot: dict[str, Any],
    before: dict[str, Any] | None,
    processes: list[dict[str, Any]],
    hz: int,
    elapsed: float,
) -> dict[str, Any]:
    """A worker thread as the hang record lists a worker: role worker, its own state, CPU share and in-flight slot,
    keyed by its thread id, with its stack taken from its process's dump (py-spy names each thread's native id)."""
    pid = slot["pid"]
    entry: dict[str, Any] = {
        "pid": tid,
        "tid": tid,
        "process_pid": pid,
        "worker_method": "thread",
        "role": "worker",
        "loader_id": slot.get("loader_id"),
        "worker_id": slot.get("worker_id"),
        "main_pid": pid,
    }
    state = procstate.read_state(pid, tid)
    if state is None:
        entry["gone"] = True
    else:
        entry.update(state)
        if before is not None:
            entry["cpu_share"] = round((state["cpu_ticks"] - before["cpu_ticks"]) / hz / elapsed, 3)
    entry["inflight"] = slot
    owner = next((e for e in processes if e["pid"] == pid), None)
    if owner is not None and owner.get("stack"):
        mine = [t for t in owner["stack"] if t.get("os_tid") == tid]
        entry["stack_tool"] = owner.get("stack_tool")
        entry["stack"] = mine
        if not mine:
            entry["stack_error"] = f"the dump of process {pid} has no thread {tid}"
    return entry


def _dump_stacks(run_dir: Path, processes: list[dict[str, Any]], number: int) -> dict[str, Any] | None:
    """Adds 'stack' to the main process and the workers; returns what kept py-spy from working, if anything."""
    exe = find_py_spy()
    problem: dict[str, Any] | None = None
    if exe is None:
        problem = {"kind": "missing", "advice": stacks.MISSING_ADVICE}
    files = RunDir(run_dir)
    files.stacks_dir.mkdir(exist_ok=True)
    targets = [e for e in processes if e["role"] in ("main", "worker") and not e.get("gone")]
    results: dict[int, stacks.DumpResult] = {}
    if exe is not None and targets:
        first = _first_dump(exe, [e["pid"] for e in targets], results)
        if first is not None and first.permission_denied:
            problem = {"kind": "permission", "error": first.error, "advice": stacks.PERMISSION_ADVICE}
        else:
            # Imported at a hang only: concurrent.futures brings logging, 18 ms of every run's start-up otherwise
            from concurrent.futures import ThreadPoolExecutor

            with ThreadPoolExecutor(max_workers=PARALLEL_DUMPS) as pool:
                pids = [e["pid"] for e in targets if e["pid"] not in results]
                results.update(zip(pids, pool.map(lambda pid: stacks.py_spy_dump(exe, pid), pids), strict=True))
    main = results.get(targets[0]["pid"]) if targets else None
    if problem is None and main is not None and main.stopped:
        problem = {"kind": "stopped", "error": main.error, "advice": ""}
    for entry in targets:
        pid = entry["pid"]
        result = results.get(pid)
        if result is not None and result.stopped:
            pass  # its faulthandler signal would wait until it continues: say it is stopped, and nothing more
        elif result is None or not result.threads:
            signum = (entry.get("inflight") or {}).get("faulthandler_signal")
            if signum:  # only processes whose hooks registered the signal: for any other it would be fatal
                fallback = stacks.faulthandler_dump(pid, signum, files.faulthandler)
                if fallback.threads or result is None:
                    result = fallback
        if result is None:
            continue
        entry["stack_tool"] = result.tool
        entry["stack"] = result.threads
        if result.error:
            entry["stack_error"] = result.error
        if result.raw and result.tool and result.tool.startswith("py-spy"):
            atomic.write_text_atomic(files.hang_stack(number, pid), result.raw)
    return problem


def _first_dump(exe: str, pids: list[int], results: dict[int, stacks.DumpResult]) -> stacks.DumpResult | None:
    """Dump in turn until one process is not stopped: that first real attempt tells whether py-spy may attach at all
    (a stopped process is never tried, so it says nothing about permission); its result, None when all are stopped."""
    for pid in pids:
        results[pid] = stacks.py_spy_dump(exe, pid)
        if not results[pid].stopped:
            return results[pid]
    return None
