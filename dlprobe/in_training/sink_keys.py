"""What `--log-to` logs: one training process's part of the supervisor's live summary (live_summary.json) as flat
metric keys, `dlprobe/loader0/worker1/uss_mib` and so on. Pure: no file, no clock, no library. The keys are as many
as the summary's live workers and recent loaders (a worker that has exited is not in it, so it is dropped here)."""

from __future__ import annotations

from typing import Any

PREFIX = "dlprobe"
MIB = 1024 * 1024
# A worker's readings in the summary -> the key's last part (bytes, logged in MiB)
WORKER_MIB = {"uss": "uss_mib", "pss": "pss_mib", "pss_anon": "pss_anon_mib", "pss_file": "pss_file_mib",
              "pss_shmem": "pss_shmem_mib", "rss": "rss_mib"}  # fmt: skip
MAIN_MIB = {"uss": "uss_mib", "pss": "pss_mib", "rss": "rss_mib"}


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def _mib(value: Any) -> float | None:
    number = _number(value)
    return None if number is None else round(number / MIB, 3)


def _put(out: dict[str, float], key: str, value: float | None) -> None:
    if value is not None:
        out[key] = value


def own_process(summary: Any, pid: int) -> dict[str, Any] | None:
    """The summary's entry for the process `pid`, or None (not running as a training process, or a summary
    of another shape)."""
    processes = summary.get("processes") if isinstance(summary, dict) else None
    for entry in processes if isinstance(processes, list) else []:
        if isinstance(entry, dict) and entry.get("pid") == pid:
            return entry
    return None


def keys_for(summary: Any, pid: int) -> dict[str, float]:
    """The metrics of the process `pid` (its loaders, their live workers, itself) and the machine's /dev/shm, as
    {key: value}; what the summary lacks or holds of the wrong type is left out, never raised."""
    out: dict[str, float] = {}
    if not isinstance(summary, dict):
        return out
    _put(out, f"{PREFIX}/shm_mib", _mib(summary.get("shm_used")))
    entry = own_process(summary, pid)
    if entry is None:
        return out
    for field, name in MAIN_MIB.items():
        _put(out, f"{PREFIX}/main/{name}", _mib(entry.get(field)))
    loaders = entry.get("loaders")
    for loader in loaders if isinstance(loaders, list) else []:
        if not isinstance(loader, dict) or not isinstance(loader.get("loader"), int):
            continue
        base = f"{PREFIX}/loader{loader['loader']}"
        _put(out, f"{base}/data_wait_share", _number(loader.get("data_wait_share")))
        workers = loader.get("workers")
        workers = [w for w in workers if isinstance(w, dict)] if isinstance(workers, list) else []
        out[f"{base}/workers"] = float(len(workers))
        for worker in workers:
            if not isinstance(worker.get("worker"), int):
                continue
            where = f"{base}/worker{worker['worker']}"
            for field, name in WORKER_MIB.items():
                _put(out, f"{where}/{name}", _mib(worker.get(field)))
            _put(out, f"{where}/open_fds", _number(worker.get("fds")))
    return out
