"""A candidate cause of a logged failure (a Finding and its score), and the texts the causes share."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, cast

from dlprobe.analysis.evidence.finding import Finding
from dlprobe.analysis.evidence.schema import Evidence
from dlprobe.triage.patterns import Match

# How close (seconds) a kernel OOM kill of a DataLoader worker must be to the log's last write to count as
# the same failure when the pids differ (a container's pid namespace hides the host pids from the log).
NEAR_S = 600.0
CONFIRMED, LIKELY, POSSIBLE = "confirmed", "likely", "possible"


FIX_OOM = (
    "find what grows: run it under `dlprobe run` (below), which measures each worker's private memory (USS) and "
    "names the dataset attributes that are copied into every worker. Usual fixes: keep per-sample metadata in "
    "numpy arrays or pyarrow instead of Python lists/dicts, fewer `num_workers`, a smaller `prefetch_factor` or "
    "batch, or more memory (container/cgroup limit, SLURM `--mem`)."
)
FIX_SHM = (
    "give /dev/shm room for num_workers x prefetch_factor x batch bytes: `docker run --shm-size=8g` (or "
    "`--ipc=host`), a memory-backed emptyDir at /dev/shm on Kubernetes; or lower `num_workers`, `prefetch_factor` "
    "or the batch size. `set_sharing_strategy('file_system')` does not help when the tmpfs is full."
)
FIX_NATIVE = (
    "get the crashing stack: set `PYTHONFAULTHANDLER=1` (workers inherit it and print every thread's Python stack "
    "on a crash), or rerun with `num_workers=0` so it happens in the main process. Usual culprits: fork-unsafe "
    "state made in the parent (OpenCV/OpenMP threads, CUDA, lmdb/h5py handles opened in `__init__`: open them "
    "lazily in the worker, or use `multiprocessing_context='spawn'`), a corrupt file decoded by C code, or "
    "mismatched library builds."
)
FIX_HANG = (
    "find the stuck worker: run it under `dlprobe run` with a hang timeout (below), which dumps every worker's "
    "stack and names the indices it holds. Usual causes: a lock another thread held at fork time, OpenMP/MKL, "
    "OpenCV or tokenizers thread pools used before fork (OMP_NUM_THREADS=1, `cv2.setNumThreads(0)`, "
    "TOKENIZERS_PARALLELISM=false, or `multiprocessing_context='spawn'`), a blocking file or network read; or "
    "samples that simply take longer than `timeout`."
)


@dataclass
class Candidate:
    score: int
    line: int
    finding: Finding


def make_finding(code: str, title: str, detail: str, fix: str, confidence: str, **evidence: Any) -> Finding:
    # The log's words under the names the run's findings use (triage/deaths.py, messages.py): checked where each is
    # read into kwargs, not here, so the mapping is taken as the evidence it is.
    found = {"confidence": confidence, **{k: v for k, v in evidence.items() if v not in (None, [], {})}}
    return Finding(code, "error", title, detail, fix, cast(Evidence, found))


def plural(items: list[Any], one: str, many: str) -> str:
    return one if len(items) == 1 else many


def pids_text(pids: list[int]) -> str:
    return ", ".join(str(p) for p in pids)


def first(matches: list[Match]) -> Match:
    return min(matches, key=lambda m: m.line)
