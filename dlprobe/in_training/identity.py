"""Who this probed process is in its job (pid, rank, local rank, world size, node, host): the `process` event."""

from __future__ import annotations

import os
import sys
from typing import Any

from dlprobe.in_training import probe_errors
from dlprobe.in_training.event_log import get_log
from dlprobe.redact import redact_argv
from dlprobe.rundir.schema import EV_PROCESS

# The process that imported the probe: one with another pid is a fork of it (os.fork, a fork-started rank), whose
# heap is its parent's until written; the probe is imported as torch's DataLoader is, in the program's own process.
_PROGRAM_PID = os.getpid()
_last: tuple[Any, ...] | None = None
_last_pid: int | None = None


def _env_int(*names: str) -> int | None:
    for name in names:
        value = os.environ.get(name)
        if value is not None and value.strip().lstrip("-").isdigit():
            return int(value)
    return None


def _distributed() -> tuple[int | None, int | None]:
    """torch.distributed's rank and world size once the process group is up (Lightning's rank 0 sets $RANK late)."""
    dist = sys.modules.get("torch.distributed")
    if dist is None:  # never imported: nothing to ask, and importing it here would cost the script
        return None, None
    try:
        if dist.is_available() and dist.is_initialized():
            return int(dist.get_rank()), int(dist.get_world_size())
    except Exception as exc:  # a half-torn-down group: fall back to the environment
        probe_errors.record("identity.distributed", exc, "ranks are taken from $RANK/$WORLD_SIZE only")
    return None, None


def current() -> dict[str, Any]:
    """This process's identity now; rank fields are None outside a distributed job."""
    rank, world_size = _distributed()
    return {
        "ppid": os.getppid(),
        "rank": rank if rank is not None else _env_int("RANK"),
        "local_rank": _env_int("LOCAL_RANK"),
        "world_size": world_size if world_size is not None else _env_int("WORLD_SIZE"),
        "node_rank": _env_int("GROUP_RANK", "NODE_RANK"),
        "host": os.uname().nodename,  # what socket.gethostname() says, without importing socket at start-up
        "argv": redact_argv(sys.argv),  # a rank's command line: credentials never reach events.jsonl
        "forked": os.getpid() != _PROGRAM_PID,
    }


def emit_if_changed() -> None:
    """Write a `process` event the first time, and again when rank, world size or node change (cheap otherwise)."""
    global _last, _last_pid
    log = get_log()
    if log is None:
        return
    try:
        fields = current()
    except Exception as exc:  # identity must never break training
        probe_errors.record("identity", exc, "this process's rank and host are not known to the report")
        return
    key = (fields["rank"], fields["local_rank"], fields["world_size"], fields["node_rank"])
    pid = os.getpid()
    if key == _last and pid == _last_pid:
        return
    _last, _last_pid = key, pid
    log.emit(EV_PROCESS, **fields)
