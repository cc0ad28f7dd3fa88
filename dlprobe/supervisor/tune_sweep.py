"""`dlprobe tune`: run the script up to its DataLoader, measure trials inside it, and recommend a configuration."""

from __future__ import annotations

import json
import os
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from dlprobe import __version__
from dlprobe.analysis.run.model import RunData, load_run
from dlprobe.errors import DlprobeError
from dlprobe.loader_model.limits import WORKER_CAP
from dlprobe.redact import redact_argv
from dlprobe.rundir.files import create_run_dir, write_json
from dlprobe.rundir.handle import RunDir
from dlprobe.rundir.schema import (
    EV_TUNE_CONFIRM,
    EV_TUNE_LOADER,
    EV_TUNE_LOOP,
    EV_TUNE_WORKERS_STOP,
    EXIT_NO_BATCHES,
    LAUNCH_SCRIPT,
    TAKEOVER_ENV,
    TAKEOVER_LOADER_ENV,
    TAKEOVER_STEPS_ENV,
    TUNE_CONFIG_ENV,
)
from dlprobe.supervisor.run_options import RunOptions
from dlprobe.supervisor.run_target import check_target, run_script
from dlprobe.system import cgroup, procmem
from dlprobe.system.cpus import cpu_facts
from dlprobe.system.proctree import kill_tree
from dlprobe.tune.loop import LOOP_STEPS, loop_seconds, loop_words
from dlprobe.tune.plan import SEARCH_FIELDS
from dlprobe.tune.predict import annotate
from dlprobe.tune.records import Recommended, TrialRow, TuneMemory, TuneResult
from dlprobe.tune.results import (
    batches_per_epoch,
    best_of_repeats,
    collect_trials,
    confirm_words,
    memory_available,
    recommend,
)

RUNNER = "dlprobe.in_training.tune_trials:run_trials"
MAX_ATTEMPTS = 4  # a trial that kills the process costs one restart of the script
SHUTDOWN_S = 3.0  # kept from the budget for the last trial's workers to stop and the process to exit
GRACE_S = 20.0  # beyond the budget before a stuck process is killed
MIN_ATTEMPT_S = 5.0


@dataclass
class TuneOptions:
    script: str
    args: list[str] = field(default_factory=list)
    out: str | None = None
    budget_s: float = 120.0
    batches: int = 40
    loader: int = 0
    max_workers: int | None = None
    tolerance: float = 0.05
    launch: str = LAUNCH_SCRIPT  # or LAUNCH_MODULE (-m)
    loop_steps: int = LOOP_STEPS  # steps of the script's own loop timed before the trials (0: none)


class _TimeLimit:
    """A supervisor tick hook: kills the script and its workers once an attempt runs past its time."""

    def __init__(self, limit_s: float) -> None:
        self.deadline = time.time() + limit_s
        self.hit = False

    def __call__(self, now: float, _events: list[dict[str, Any]], child: subprocess.Popen[bytes]) -> None:
        if self.hit or now < self.deadline or child.poll() is not None:
            return
        self.hit = True
        kill_tree(child.pid)


def _tune_dir(options: TuneOptions) -> Path:
    # No events of its own: each attempt is a run directory inside it.
    return create_run_dir(options.out, f"{Path(options.script).stem}-tune", claim=False)


def _validate(options: TuneOptions) -> None:
    if options.budget_s < MIN_ATTEMPT_S * 2:
        raise DlprobeError(f"--budget {options.budget_s:g}s is too short", hint="give at least 10s, e.g. --budget 60s")
    if options.batches < 4:
        raise DlprobeError("--batches must be at least 4", hint="the default, 40, gives steady numbers")
    if not 0 <= options.tolerance < 1:
        raise DlprobeError("--tolerance must be a share between 0 and 1", hint="e.g. --tolerance 0.05 for 5%")


def run_tune(options: TuneOptions) -> TuneResult:
    """Measure the trials (restarting the script if a trial kills it) and return the tune result."""
    check_target(options.script, options.launch, options.args)
    _validate(options)
    root = _tune_dir(options)
    cpus = cpu_facts()
    # The search goes past twice the cores while more workers still pay, up to --max-workers if given.
    cap = options.max_workers if options.max_workers is not None else WORKER_CAP
    workers_stop: dict[str, Any] | None = None
    confirmed: dict[str, Any] | None = None
    started = time.time()
    deadline = started + options.budget_s
    trials: list[dict[str, Any]] = []
    info: dict[str, Any] | None = None
    memory: TuneMemory | None = None
    attempts: list[dict[str, Any]] = []
    first_run: RunData | None = None
    loop: dict[str, Any] | None = None  # the script's loop, as the first attempt timed it
    for attempt in range(1, MAX_ATTEMPTS + 1):
        remaining = deadline - time.time()
        if attempt > 1 and remaining < MIN_ATTEMPT_S:
            break
        config = {"deadline": deadline - SHUTDOWN_S, "batches": options.batches, "cores": cpus["usable_cores"],
                  "cap": cap, "tolerance": options.tolerance,
                  "done": [{k: t.get(k) for k in SEARCH_FIELDS} for t in trials], "loop": loop}  # fmt: skip
        env = {TAKEOVER_ENV: RUNNER, TAKEOVER_LOADER_ENV: str(options.loader), TUNE_CONFIG_ENV: json.dumps(config)}
        if loop is None and options.loop_steps > 0:  # a restarted attempt goes straight to its trials
            env[TAKEOVER_STEPS_ENV] = str(options.loop_steps)
        limit = _TimeLimit(max(1.0, remaining) + GRACE_S)
        attempt_dir = str(RunDir(root).attempt(attempt))
        outcome = run_script(
            # No py-spy: tune reports no hotspots, and sampling 32 workers would slow the very trials it times.
            RunOptions(
                options.script,
                options.args,
                attempt_dir,
                live=False,
                env=env,
                on_tick=limit,
                launch=options.launch,
                stack_rate=0,
                stop_leftovers=True,  # the trials' workers are tune's own, not the user's training
            )  # fmt: skip
        )
        run = load_run(outcome.run_dir)
        first_run = first_run or run
        loader_info = next((e for e in run.events if e.get("ev") == EV_TUNE_LOADER), None)
        stopped = next((e for e in run.events if e.get("ev") == EV_TUNE_LOOP), None)
        # A script that stopped with a non-zero status (sys.exit(1) reaches no hook before the loop is recorded at
        # exit) did not stop its loop early: it failed, and _no_takeover says so.
        if loader_info is None and stopped is not None and loop is None and outcome.exit_code == 0:
            # The loop stopped asking for batches before the take-over (it breaks after a few steps): what it timed
            # is kept, and the next attempt takes the loader over at its first iteration.
            loop = {k: stopped.get(k) for k in ("loop_steps", "loop_step_s", "loop_cpu_share")}
            attempts.append({"run_dir": str(outcome.run_dir), "exit_code": outcome.exit_code, "trials": 0})
            continue
        if loader_info is None:
            _no_takeover(run, options, outcome.exit_code, timing_loop=TAKEOVER_STEPS_ENV in env)
        info = info or loader_info
        loop = loop if loop is not None else ((loader_info or {}).get("loop") or None)
        memory = memory or memory_available(run, _own_memory())
        rows, lost = collect_trials(run, batches_per_epoch(info), timed_out=limit.hit)
        workers_stop = next((e for e in reversed(run.events) if e.get("ev") == EV_TUNE_WORKERS_STOP), workers_stop)
        confirmed = next((e for e in reversed(run.events) if e.get("ev") == EV_TUNE_CONFIRM), confirmed)
        # A configuration an earlier attempt measured and this one measured again (its confirmation) is one row.
        trials = best_of_repeats(trials + rows)
        attempts.append({"run_dir": str(outcome.run_dir), "exit_code": outcome.exit_code, "trials": len(rows)})
        if outcome.exit_code == EXIT_NO_BATCHES:
            break
        if lost is None and outcome.exit_code == 0:
            break
    budget = (memory or {}).get("budget_bytes")
    loop_s = loop_seconds(loop, (info or {}).get("batch_size"), trials)
    recommended, reason = recommend(trials, budget, options.tolerance, loop_s)
    prediction = annotate(trials, cpus["usable_cores"])
    if info and info.get("batches_per_epoch") == 0:
        reason = "the loader yields no batches (the dataset is empty or smaller than one batch with drop_last=True)"
    notes = list((info or {}).get("notes") or [])
    small = batches_per_epoch(info)
    if small is not None and small < options.batches:
        notes.append(f"the loader has only {small} batch(es) per epoch, so trials cycle over it (workers persist)")
    said = loop_words(loop, loop_s)
    if said:
        notes.append(said)
    if workers_stop is not None:
        notes.append(f"worker counts: {workers_stop.get('reason')}")
    again = confirm_words(trials, list((confirmed or {}).get("keys") or []), options.tolerance)
    if again:
        notes.append(again)
    if cpus["usable_cores"] == 1:
        notes.append("1 usable core: workers share it with the training loop, so extra workers rarely pay off")
    result: TuneResult = {
        "schema_version": 1,
        "dlprobe_version": __version__,
        "script": options.script,
        "argv": redact_argv(options.args),
        "loader": options.loader,
        "dir": str(root),
        "budget_s": options.budget_s,
        "elapsed_s": round(time.time() - started, 2),
        "batches_per_trial": options.batches,
        "tolerance": options.tolerance,
        "cpu": cpus,
        "memory": memory,
        "accelerator": (info or {}).get("accelerator"),
        "loader_config": {
            k: v for k, v in (info or {}).items() if k not in ("ev", "t", "pid", "notes", "accelerator", "loop")
        },  # fmt: skip
        # loop_steps None: not asked to time the loop (--loop-steps 0); 0: asked, and the loop gave no steady step
        "loop": dict.fromkeys(("loop_steps", "loop_step_s", "loop_cpu_share"))
        | (loop or {})
        | {"samples_per_s": round(1 / loop_s, 2) if loop_s else None},
        "notes": notes,
        "attempts": attempts,
        "trials": cast(list[TrialRow], trials),  # collect_trials' rows, each a TrialRow
        "workers_cap": cap,
        "workers_stop": {k: workers_stop.get(k) for k in ("reason", "top")} if workers_stop else None,
        "prediction": prediction,
        "recommended": _public(recommended),
        "reason": reason,
    }
    write_json(RunDir(root).tune_result, result)
    return result


def _own_memory() -> dict[str, Any]:
    """This process's private memory and its memory cgroup's limit directory: in the job's cgroup while tune runs,
    not when the user trains."""
    rollup = procmem.read_smaps_rollup(os.getpid()) or {}
    state = cgroup.memory_state(cgroup.memory_dir()) or {}
    return {"private_bytes": rollup.get("uss"), "limit_dir": state.get("limit_dir")}


def _public(trial: dict[str, Any] | None) -> Recommended | None:
    if trial is None:
        return None
    return {"num_workers": trial.get("num_workers"), "prefetch_factor": trial.get("prefetch_factor"),
            "pin_memory": trial.get("pin_memory"), "samples_per_s": trial.get("samples_per_s"),
            "vs_best": trial.get("vs_best"), "projected_epoch_bytes": trial.get("projected_epoch_bytes")}  # fmt: skip


def _output_at(run: RunData) -> str:
    """Where the failed script's output is: stderr.log where its stderr was a file, else where it was printed."""
    stderr = RunDir(run.path).stderr
    if stderr.is_file():
        return f"its output is in {stderr}"
    return "its traceback is above"


def _no_takeover(run: RunData, options: TuneOptions, exit_code: int, timing_loop: bool) -> None:
    """The script ended before iterating the loader to tune, or in the loop steps timed over it (`timing_loop`: this
    attempt was asked to time them): explain why, with the run kept for a look."""
    loaders = len(run.loaders)
    error = run.script_error
    if error is not None and timing_loop and loaders > options.loader:  # the loader to tune was iterated: its loop
        message = (f"the script raised {error['type']}: {error.get('message', '')} in the steps of its loop that tune "
                   "times before its trials")  # fmt: skip
        hint = f"fix the script ({_output_at(run)}), or time the loader alone: --loop-steps 0"
    elif error is not None:
        message = f"the script raised {error['type']}: {error.get('message', '')} before iterating a DataLoader"
        hint = f"fix the script first ({_output_at(run)})"
    elif loaders and options.loader >= loaders:
        message = f"the script iterated {loaders} DataLoader(s), so there is no loader {options.loader}"
        hint = f"pass --loader between 0 and {loaders - 1}"
    else:
        message = f"the script ended (exit code {exit_code}) without iterating a DataLoader"
        hint = "point dlprobe tune at the script that builds and iterates the DataLoader, with its usual arguments"
    raise DlprobeError(message, hint=hint, exit_code=1)
