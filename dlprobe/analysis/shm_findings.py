"""Shared-memory findings: /dev/shm close to full, with the batches-in-flight estimate."""

from __future__ import annotations

from dlprobe.analysis.model import Finding, RunData
from dlprobe.units import format_bytes

SHM_PRESSURE_SHARE = 0.8  # peak use above this share of /dev/shm is one burst away from a bus error
IN_FLIGHT_SHARE = 0.5  # or when the loaders' own in-flight estimate takes half of it


def in_flight_bytes(num_workers: int, prefetch_factor: int | None, batch_bytes: int | None) -> int:
    """Bytes of batches waiting in shared memory: num_workers x prefetch_factor x batch bytes."""
    if not num_workers or not batch_bytes:
        return 0
    return num_workers * (prefetch_factor or 2) * batch_bytes


def find_shm_pressure(run: RunData) -> list[Finding]:
    total = run.system.shm_total
    used = [u for u in run.system.shm_used if u is not None]
    if not total or not used:
        return []
    start, peak = used[0], max(used)
    loaders = []
    for lo in run.loaders:
        if lo.thread_workers:
            continue  # thread workers hand batches over through an in-process queue: none waits in /dev/shm
        batch_bytes = (lo.batch_info or {}).get("bytes")
        estimate = in_flight_bytes(lo.num_workers, lo.config.get("prefetch_factor"), batch_bytes)
        loaders.append(
            {
                "loader_id": lo.loader_id,
                "num_workers": lo.num_workers,
                "prefetch_factor": lo.config.get("prefetch_factor"),
                "batch_bytes": batch_bytes,
                "in_flight_bytes": estimate,
            }
        )
    in_flight = sum(int(lo["in_flight_bytes"] or 0) for lo in loaders)
    if peak < SHM_PRESSURE_SHARE * total and in_flight < IN_FLIGHT_SHARE * total:
        return []
    return [
        Finding(
            code="shm-pressure",
            severity="warning",
            title=(
                f"/dev/shm is close to full: peak {format_bytes(peak)} of {format_bytes(total)}, "
                f"batches in flight need ~{format_bytes(in_flight)}"
            ),
            detail=(
                "Worker processes hand batches to the training process through shared memory in /dev/shm. "
                "In-flight batches take num_workers x prefetch_factor x batch bytes; when /dev/shm fills, a worker "
                "dies with 'DataLoader worker (pid N) is killed by signal: Bus error.' or 'unable to allocate "
                "shared memory(shm)'. Containers often give /dev/shm only 64 MB."
            ),
            fix=(
                "Give the job more shared memory (docker run --shm-size=8g or --ipc=host; a bigger emptyDir "
                "medium: Memory volume on Kubernetes), or lower prefetch_factor, num_workers or the batch size."
            ),
            evidence={
                "shm_total_bytes": total,
                "shm_start_bytes": start,
                "shm_peak_bytes": peak,
                "in_flight_estimate_bytes": in_flight,
                "loaders": loaders,
            },
        )
    ]
