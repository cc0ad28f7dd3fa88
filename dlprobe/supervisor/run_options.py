"""What `dlprobe run` is asked to do and what it records of its own machine and cost: the options every command that
runs a script under the probe fills in (run, check, tune, demo), and the facts read as a run starts. Its own module so
the supervisor's watch (run_watch.py) and its start (run_target.py) share them without importing each other."""

from __future__ import annotations

import os
import platform
import resource
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, cast

from dlprobe.rundir.schema import LAUNCH_SCRIPT, Machine, SupervisorCost
from dlprobe.supervisor.hang import DEFAULT_HANG_TIMEOUT_S
from dlprobe.system import procmem
from dlprobe.system.cpus import cpu_facts

# Called every tick with the time, the new events and the target, e.g. by `dlprobe check` to end a bounded run.
TickHook = Callable[[float, list[dict[str, Any]], subprocess.Popen[bytes]], None]


@dataclass
class RunOptions:
    script: str  # the script, the module (-m) or the command's program (--)
    args: list[str] = field(default_factory=list)
    out: str | None = None
    live: bool = True
    env: dict[str, str] = field(default_factory=dict)  # extra environment for the target
    on_tick: TickHook | None = None
    hang_timeout: float = DEFAULT_HANG_TIMEOUT_S
    on_hang: str = "wait"
    launch: str = LAUNCH_SCRIPT  # LAUNCH_SCRIPT | LAUNCH_MODULE | LAUNCH_COMMAND
    # Modules the caller needs once the target has exited (the report's), imported while the target starts up:
    # on a short script the two overlap instead of adding up.
    preload: tuple[str, ...] = ()
    stack_rate: int | None = None  # py-spy's samples/s; None: $DLPROBE_STACK_RATE or the default; 0: off
    # Stop the workers still running after the target (tune's trials: processes of dlprobe's own making). Otherwise
    # they are left running as python leaves them, unless dlprobe itself ended the run (--on-hang stop).
    stop_leftovers: bool = False
    # --start-method: every DataLoader's workers start with it (in_training/start_method_choice.py); None: the script's
    start_method: str | None = None
    # --no-isolated-checks: the training forks no copy for dlprobe's checks (in_training/quiet_fork.py)
    no_isolated_checks: bool = False
    own_options_after_script: list[str] = field(default_factory=list)  # `dlprobe run s.py --verbose`: the script's
    # --prom-textfile DIR, --prom-listen [HOST:]PORT: the live Prometheus exposition (supervisor/prom/)
    prom_textfile: str | None = None
    prom_listen: str | None = None
    # --log-to wandb,mlflow: the live summary the training process logs into the script's own runs (checked names)
    log_to: tuple[str, ...] = ()


def machine_facts() -> Machine:
    shm = procmem.shm_usage()
    mem = procmem.system_memory()
    facts: dict[str, Any] = {
        "host": platform.node(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        # cpu_count, cpu_affinity, cpu_quota (cgroup, in cores) and usable_cores (the smallest of them)
        **cpu_facts(),
        "mem_total": mem["total"],
        "mem_available": mem["available"],
        "shm_total": shm["total"] if shm else None,
        # how busy the machine was as the run started: time-based findings say so rather than blame the script
        "load_avg_1m": _load_average(),
    }
    return cast(Machine, facts)


def _load_average() -> float | None:
    try:
        return round(os.getloadavg()[0], 2)
    except OSError:  # no load average on this system
        return None


def own_cost() -> SupervisorCost:
    """What probing cost: the supervisor's own CPU seconds and peak RSS (the target is not counted)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return {"cpu_s": round(usage.ru_utime + usage.ru_stime, 3), "max_rss_bytes": usage.ru_maxrss * 1024}
