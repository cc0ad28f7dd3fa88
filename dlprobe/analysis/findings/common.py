"""Fix texts more than one family gives, written once: every finding that tells a user to make room in /dev/shm
or to make a batch picklable says it in the same words."""

from __future__ import annotations

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
