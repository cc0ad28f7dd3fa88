"""Hang watch: notices when the training loop has waited too long for a batch and records the evidence.

The training process's in-flight slot says whether the loop is waiting for a batch (or for the workers to
start) and since when. After --hang-timeout seconds of that, the supervisor reads every process's state
twice (CPU time moving or not), dumps the stacks of the main process and every worker, and saves it all
in a hang record under hangs/ for the analyzers. Diagnosing is left to them, so `dlprobe report` can redo it.
"""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from dlprobe.rundir.inflight_format import read_all, read_slot, slot_path
from dlprobe.rundir.schema import (
    FAULTHANDLER_FILE,
    HANGS_DIR,
    STACKS_DIR,
    HangRecord,
    hang_record_name,
    hang_stack_name,
)
from dlprobe.supervisor.hang import procstate, stacks
from dlprobe.system.pyspy import find_py_spy

DEFAULT_HANG_TIMEOUT_S = 60.0
ON_HANG_CHOICES = ("wait", "stop")
CPU_WINDOW_S = 0.5  # two readings this far apart tell a blocked process from a busy one
PARALLEL_DUMPS = 4


class HangWatch:
    """Checked on every supervisor tick; dumps once per stalled wait."""

    def __init__(self, run_dir: Path, main_pid: int, timeout_s: float, on_hang: str) -> None:
        self.run_dir = run_dir
        self.main_pid = main_pid
        self.timeout_s = timeout_s
        self.on_hang = on_hang
        self.main_slot = slot_path(run_dir, main_pid)
        self.reported: set[float] = set()
        self.count = 0
        self.stopped = False

    def stalled_wait(self, now: float) -> dict[str, Any] | None:
        """The main slot's loop state when the loop has waited past the timeout and was not dumped yet."""
        if self.timeout_s <= 0:
            return None
        slot = read_slot(self.main_slot)
        loop = (slot or {}).get("loop") or {}
        since = loop.get("since")
        if loop.get("state") not in ("waiting-for-batch", "creating-iterator") or not since:
            return None
        if now - since < self.timeout_s or since in self.reported:
            return None
        return loop

    def check(self, now: float, pids: list[int], workers: dict[int, tuple[int, int]]) -> bool:
        """Record a hang if there is one; True when the run should now be stopped (--on-hang stop)."""
        loop = self.stalled_wait(now)
        if loop is None:
            return False
        self.reported.add(loop["since"])
        self.count += 1
        record = collect(self.run_dir, self.main_pid, pids, workers, loop, now, self.count)
        record["on_hang"] = self.on_hang
        record["timeout_s"] = self.timeout_s
        folder = self.run_dir / HANGS_DIR
        folder.mkdir(exist_ok=True)
        (folder / hang_record_name(self.count)).write_text(json.dumps(record, indent=1, default=str) + "\n")
        self.stopped = self.on_hang == "stop"
        return self.stopped


def _role(pid: int, main_pid: int, slot: dict[str, Any] | None, workers: dict[int, tuple[int, int]]) -> dict[str, Any]:
    if pid == main_pid:
        return {"role": "main", "loader_id": None, "worker_id": None}
    if slot is not None and slot.get("role") == "worker":
        return {"role": "worker", "loader_id": slot.get("loader_id"), "worker_id": slot.get("worker_id")}
    if pid in workers:
        return {"role": "worker", "loader_id": workers[pid][0], "worker_id": workers[pid][1]}
    return {"role": "other", "loader_id": None, "worker_id": None}


def collect(
    run_dir: Path,
    main_pid: int,
    pids: list[int],
    workers: dict[int, tuple[int, int]],
    loop: dict[str, Any],
    now: float,
    number: int,
) -> HangRecord:
    """Everything known about a stalled run right now: per process state, CPU use, in-flight slot, stacks."""
    slots = read_all(run_dir)
    pids = [main_pid, *[p for p in pids if p != main_pid]]
    first = {pid: procstate.read_state(pid) for pid in pids}
    t0 = time.monotonic()
    time.sleep(CPU_WINDOW_S)
    elapsed = time.monotonic() - t0
    hz = procstate.clock_ticks_per_s()
    processes = []
    for pid in pids:
        state = procstate.read_state(pid)
        entry: dict[str, Any] = {"pid": pid, **_role(pid, main_pid, slots.get(pid), workers)}
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
    return {
        "number": number,
        "t": now,
        "waited_s": round(now - loop["since"], 3),
        "loop": loop,
        "main_pid": main_pid,
        "processes": processes,
        "stack_problem": tool_problem,
    }


def _dump_stacks(run_dir: Path, processes: list[dict[str, Any]], number: int) -> dict[str, Any] | None:
    """Adds 'stack' to the main process and the workers; returns what kept py-spy from working, if anything."""
    exe = find_py_spy()
    problem: dict[str, Any] | None = None
    if exe is None:
        problem = {"kind": "missing", "advice": stacks.MISSING_ADVICE}
    folder = run_dir / STACKS_DIR
    folder.mkdir(exist_ok=True)
    targets = [e for e in processes if e["role"] in ("main", "worker") and not e.get("gone")]
    results: dict[int, stacks.DumpResult] = {}
    if exe is not None and targets:
        # the first dump tells whether py-spy may attach at all; the others then run side by side
        first = stacks.py_spy_dump(exe, targets[0]["pid"])
        results[targets[0]["pid"]] = first
        if first.permission_denied:
            problem = {"kind": "permission", "error": first.error, "advice": stacks.PERMISSION_ADVICE}
        else:
            with ThreadPoolExecutor(max_workers=PARALLEL_DUMPS) as pool:
                pids = [e["pid"] for e in targets[1:]]
                results.update(zip(pids, pool.map(lambda pid: stacks.py_spy_dump(exe, pid), pids), strict=True))
    for entry in targets:
        pid = entry["pid"]
        result = results.get(pid)
        if result is None or not result.threads:
            signum = (entry.get("inflight") or {}).get("faulthandler_signal")
            if signum:  # only processes whose hooks registered the signal: for any other it would be fatal
                fallback = stacks.faulthandler_dump(pid, signum, folder / FAULTHANDLER_FILE)
                if fallback.threads or result is None:
                    result = fallback
        if result is None:
            continue
        entry["stack_tool"] = result.tool
        entry["stack"] = result.threads
        if result.error:
            entry["stack_error"] = result.error
        if result.raw and result.tool and result.tool.startswith("py-spy"):
            (folder / hang_stack_name(number, pid)).write_text(result.raw)
    return problem
