"""How a process is named, once per place that shows it; the formats differ on purpose (a page's prose, a plot's
legend, a trace's tracks), each is written here once."""

from __future__ import annotations


def process_name(role: str, pid: int, loader_id: int | None, worker_id: int | None, comm: str | None) -> str:
    """The page's name: "loader 0 worker 1 (pid 123)", "main (pid 120)", "python (pid 99)"."""
    if role == "worker":
        return f"loader {loader_id} worker {worker_id} (pid {pid})"
    if role == "main":
        return f"main (pid {pid})"
    return f"{comm or 'other'} (pid {pid})"


def legend_name(role: str, pid: object, loader_id: object, worker_id: object, comm: str | None = None) -> str:
    """The plot's and a job page's short name: "L0 worker 1 (123)", "main (120)" (a rank's are "rank 1 " these)."""
    if role == "worker":
        return f"L{loader_id} worker {worker_id} ({pid})"
    if role == "main":
        return f"main ({pid})"
    return f"{comm or 'other'} ({pid})"


def worker_track(loader_id: int | None, worker_id: int | None, pid: int) -> str:
    """A worker's track in trace.json and its profile in stacks.speedscope.json: "loader 0 / worker 1 (pid 123)"."""
    return f"loader {loader_id} / worker {worker_id} (pid {pid})"


def thread_worker_track(loader_id: int | None, worker_id: int | None, tid: int) -> str:
    """A worker that is a thread of the training process (worker_method="thread"): "loader 0 / worker 1 (thread
    124)"."""
    return f"loader {loader_id} / worker {worker_id} (thread {tid})"
