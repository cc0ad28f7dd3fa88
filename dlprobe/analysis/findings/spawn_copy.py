"""spawn-copy: with the spawn or forkserver start method each worker unpickles its own copy of the dataset, so a
large dataset is paid once per worker (and again every epoch without persistent_workers)."""

from __future__ import annotations

from typing import Any, cast

from dlprobe.analysis.evidence.finding import Finding
from dlprobe.analysis.evidence.rows import WorkerRow
from dlprobe.analysis.findings.remedies import imports_text, remedy_code
from dlprobe.analysis.measures.worker_growth import worker_growth_rows
from dlprobe.analysis.run.model import RunData
from dlprobe.units import MiB, format_bytes

SPAWN_COPY_MIN = 64 * MiB


def _spawn_fix(suspects: list[dict[str, Any]]) -> str:
    """Name the shared-memory remedy for the largest record list, with code for the user's own attribute."""
    top = next((s for s in suspects if remedy_code(s)), None)
    if top is None:
        return (
            "Put large arrays in /dev/shm once and let every worker map them: "
            "`arr = shm_array('features-v1', lambda: np.load(path))` (from dlprobe.fixes import shm_array). "
        )
    code, name = remedy_code(top, share=True) or ("", "")
    return (
        f"Share `{top['attribute']}` ({top['type']}, ~{format_bytes(top['est_bytes'])}) through /dev/shm instead of "
        f"pickling it into every worker: `{code}` ({imports_text([name], 'np.' in code)}): workers and the other ranks "
        "on this machine map one copy; large numpy arrays the same way with `shm_array(key, build_fn)`. "
    )


def find_spawn_copy(run: RunData) -> list[Finding]:
    findings = []
    for loader in run.loaders:
        if loader.num_workers == 0 or loader.start_method not in ("spawn", "forkserver"):
            continue
        dataset_bytes = int(loader.dataset.get("est_bytes") or 0)
        if dataset_bytes < SPAWN_COPY_MIN:
            continue
        rows = worker_growth_rows(run, loader)
        total = dataset_bytes * loader.num_workers
        findings.append(
            Finding(
                code="spawn-copy",
                severity="warning",
                title=(
                    f"Each of the {loader.num_workers} {loader.start_method} workers of loader {loader.loader_id} "
                    f"starts with its own pickled copy of a ~{format_bytes(dataset_bytes)} dataset"
                ),
                detail=(
                    f"With the '{loader.start_method}' start method the dataset object is pickled and rebuilt in "
                    f"every worker, so ~{format_bytes(total)} is spent on copies (and start-up waits for the "
                    "pickling) every time workers start."
                ),
                fix=_spawn_fix(loader.dataset.get("suspects") or [])
                + (
                    "Otherwise keep the dataset object small (file paths or offsets; open files in worker_init_fn "
                    "or on first __getitem__), memory-map large arrays (np.load(path, mmap_mode='r')), and use "
                    "persistent_workers=True so the copy is made once, not every epoch. On Linux, "
                    "multiprocessing_context='fork' shares the parent's memory instead of copying it."
                ),
                evidence={
                    "start_method": loader.start_method,
                    "num_workers": loader.num_workers,
                    "dataset_est_bytes": dataset_bytes,
                    "total_copied_bytes": total,
                    "workers": cast("list[WorkerRow]", rows),
                    "largest_attributes": loader.dataset.get("suspects") or [],
                },
                loader_id=loader.loader_id,
            )
        )
    return findings
