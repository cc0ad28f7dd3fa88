"""`dlprobe run`: start the unmodified script as python would (the hooks come in through the injected
sitecustomize), with dlprobe's own stdin, stdout and stderr; sample it from outside, outlive it."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from dlprobe import __version__
from dlprobe.errors import DlprobeError
from dlprobe.redact import redact_argv
from dlprobe.rundir.files import create_run_dir
from dlprobe.rundir.schema import (
    LAUNCH_COMMAND,
    LAUNCH_MODULE,
    LOG_TO_CHOICES,
    LOG_TO_ENV,
    NO_ISOLATED_CHECKS_ENV,
    RUN_DIR_ENV,
    RUN_SCHEMA_VERSION,
    START_METHOD_CHOICES,
    START_METHOD_ENV,
    Meta,
)
from dlprobe.supervisor import launch
from dlprobe.supervisor.hang import DEFAULT_HANG_TIMEOUT_S, ON_HANG_CHOICES
from dlprobe.supervisor.prom.setup import PromSetup, prepare
from dlprobe.supervisor.run_options import RunOptions
from dlprobe.supervisor.stderr_copy import stderr_origin

FORWARDED_SIGNALS = (signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2)


@dataclass
class RunOutcome:
    run_dir: Path
    exit_code: int  # a signal's death as a shell writes it, 128 + N, for the commands that keep their own codes
    signal: int | None = None  # the signal that killed the target: `dlprobe run` dies of it too, as python would


def check_script(script: str) -> None:
    path = Path(script)
    if script.startswith("-") and not path.exists():
        # Unknown options reach here as the script (everything from the script on is the script's own).
        raise DlprobeError(
            f"no such option: {script}", hint="dlprobe's own options go before the script; see the command's --help"
        )
    if not path.exists():
        raise DlprobeError(f"script not found: {script}", hint="give the path of your training script, e.g. train.py")
    if path.is_dir():
        raise DlprobeError(f"{script} is a directory, not a script", hint="give the path of a .py file")
    try:
        with path.open("rb"):
            pass
    except OSError as exc:
        raise DlprobeError(f"cannot read {script}: {exc.strerror}", hint="check the file's permissions") from None


def check_target(script: str, launch_kind: str, args: list[str] | None = None) -> None:
    """The script exists, the module name is one, the command's program is on PATH; else one error line, exit 2."""
    if launch_kind == LAUNCH_MODULE:
        launch.check_module(script)
    elif launch_kind == LAUNCH_COMMAND:
        launch.check_command([script, *(args or [])])
    else:
        check_script(script)


def check_hang_options(options: RunOptions) -> None:
    if options.hang_timeout < 0:
        raise DlprobeError(
            f"--hang-timeout must be 0 (off) or a number of seconds, not {options.hang_timeout:g}",
            hint=f"e.g. --hang-timeout {DEFAULT_HANG_TIMEOUT_S:g}",
        )
    if options.on_hang not in ON_HANG_CHOICES:
        raise DlprobeError(
            f"--on-hang must be one of {', '.join(ON_HANG_CHOICES)}, not {options.on_hang!r}",
            hint="wait: keep waiting after the stacks are saved; stop: end the run",
        )


def check_start_method(method: str | None) -> None:
    if method is not None and method not in START_METHOD_CHOICES:
        raise DlprobeError(
            f"--start-method must be one of {', '.join(START_METHOD_CHOICES)}, not {method!r}",
            hint="e.g. --start-method forkserver (Python 3.14's default on Linux)",
        )


def check_log_to(values: list[str] | tuple[str, ...]) -> tuple[str, ...]:
    """`--log-to wandb --log-to mlflow` or `--log-to wandb,mlflow`: the libraries named, each once, in order."""
    names: list[str] = []
    for value in values:
        for name in value.split(","):
            name = name.strip().lower()
            if name not in LOG_TO_CHOICES:
                raise DlprobeError(
                    f"--log-to must name {' or '.join(LOG_TO_CHOICES)}, not {name!r}",
                    hint="e.g. --log-to wandb, or --log-to wandb,mlflow; the script's own active run is logged into",
                )
            if name not in names:
                names.append(name)
    return tuple(names)


def run_script(options: RunOptions) -> RunOutcome:
    """Run the script, module or command under the probe; returns the run directory and the target's exit code."""
    check_target(options.script, options.launch, options.args)
    check_hang_options(options)
    check_start_method(options.start_method)
    options.log_to = check_log_to(options.log_to)
    prom = prepare(options.prom_textfile, options.prom_listen)  # the port is bound now: in use is exit 2, here
    try:
        return _run_checked(options, prom)
    except BaseException:
        if prom is not None:
            prom.close()  # the watch never took it over (it closes it itself once it has)
        raise


def _run_checked(options: RunOptions, prom: PromSetup | None) -> RunOutcome:
    command = launch.target_command(options.launch, options.script, options.args)
    env = dict(os.environ)
    launch.inject(env, options.launch, options.script)
    run_dir = create_run_dir(options.out, launch.run_name(options.launch, options.script, options.args))
    started = time.time()
    meta: Meta = {
        "schema_version": RUN_SCHEMA_VERSION,
        "dlprobe_version": __version__,
        # credentials on the command line (--token X, HF_TOKEN=X, a URL's password) never reach a file
        "script": redact_argv([options.script])[0],
        "argv": redact_argv(options.args),
        "launch": options.launch,
        "command": redact_argv([options.script, *options.args] if options.launch == LAUNCH_COMMAND else command[1:]),
        "node_rank": launch.node_rank([options.script, *options.args]),
        "cwd": os.getcwd(),
        "started_at": started,
    }
    env[RUN_DIR_ENV] = str(run_dir.resolve())
    env.pop(START_METHOD_ENV, None)  # only this run's own option forces a method
    if options.start_method:
        env[START_METHOD_ENV] = options.start_method
        meta["start_method_forced"] = options.start_method
    if options.own_options_after_script:
        meta["own_options_after_script"] = options.own_options_after_script
    env.pop(NO_ISOLATED_CHECKS_ENV, None)
    if options.no_isolated_checks:
        env[NO_ISOLATED_CHECKS_ENV] = "1"
        meta["isolated_checks"] = False
    env.pop(LOG_TO_ENV, None)  # only this run's own option logs anything
    if options.log_to:
        env[LOG_TO_ENV] = ",".join(options.log_to)
    env.update(options.env)
    stderr_at_start = stderr_origin()  # before the script writes a byte
    child = _start(command, env)
    meta["target_pid"] = child.pid
    previous = {sig: signal.signal(sig, lambda s, _f: child.send_signal(s)) for sig in FORWARDED_SIGNALS}
    # Ctrl-C reaches the whole process group; the script decides what it means, we keep recording.
    previous[signal.SIGINT] = signal.signal(signal.SIGINT, signal.SIG_IGN)
    # The watch (psutil, rich, the samplers, the hang guard: a third of the supervisor's start-up) is imported
    # while the target's interpreter starts, not before it: a short script would otherwise wait for it.
    try:
        from dlprobe.supervisor import run_watch
    except BaseException:
        child.kill()  # a broken install: no target left running unwatched
        child.wait()
        raise
    exit_code = run_watch.watch(child, run_dir, options, meta, previous, stderr_at_start, prom)
    killed_by = -child.returncode if child.returncode is not None and child.returncode < 0 else None
    return RunOutcome(run_dir, exit_code, killed_by)


def _start(command: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
    # stdin, stdout and stderr are dlprobe's own, inherited: nothing of dlprobe's sits between the script and its
    # terminal or pipe, and the script's output does not depend on dlprobe staying alive.
    try:
        return subprocess.Popen(command, env=env)
    except OSError as exc:  # checked before, but a command can vanish, lack a #! line, or meet E2BIG
        raise DlprobeError(
            f"cannot start {command[0]}: {exc.strerror or exc}",
            hint="check that the command runs on its own, without dlprobe",
        ) from None
