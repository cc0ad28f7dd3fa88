"""What more than one family says, written once: the fix texts (every finding that tells a user to make room in
/dev/shm or to make a batch picklable says it in the same words), and the words the families' verdict rules
(`explains(cause, symptom)`, gathered by report/verdict.py) name a worker with."""

from __future__ import annotations

from dlprobe.analysis.evidence.finding import Finding

# /dev/shm could not hold what the workers send: a worker killed by SIGBUS, torch's "unable to allocate shared
# memory", a queue that refused a batch, /dev/shm filling while `dlprobe attach` watched.
SHM_SPACE_FIX = (
    "Give the job more shared memory (docker run --shm-size=8g or --ipc=host; on Kubernetes mount an "
    "emptyDir with medium: Memory at /dev/shm), or need less of it: lower prefetch_factor, num_workers or "
    "the batch size."
)
# A batch the worker's queue could not send: what collate_fn returns must pickle, and a batch that never comes must
# raise rather than hang.
PICKLABLE_BATCH_FIX = (
    "Make what collate_fn returns plain and picklable (tensors, numbers, strings, lists and dicts of them: no open "
    "files, locks, generators or lambdas), keep each worker's open files under its limit (close what `__getitem__` "
    "opens), and give DataLoader(timeout=...) so a batch that never comes raises instead of hanging."
)


def same_loader(a: Finding, b: Finding) -> bool:
    return a.loader_id is None or b.loader_id is None or a.loader_id == b.loader_id


def worker_name(finding: Finding) -> str:
    ev = finding.evidence
    worker = ev.get("worker_id")
    loader = f"loader {finding.loader_id} " if finding.loader_id is not None else ""
    return f"{loader}worker {worker}" if worker is not None else f"{loader}a worker".strip()
