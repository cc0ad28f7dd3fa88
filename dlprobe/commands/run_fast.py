"""`dlprobe run` without typer: the plain command lines are parsed here so the script starts before typer is
imported; every other command line (help, `--`, a value that needs checking, any option spelled otherwise) goes
to typer, which alone writes help and usage errors."""

from __future__ import annotations

import atexit
import contextlib
import errno
import math
import os
import resource
import signal
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import NoReturn

from dlprobe.rundir.schema import LAUNCH_MODULE, LAUNCH_SCRIPT
from dlprobe.supervisor.hang import DEFAULT_HANG_TIMEOUT_S, ON_HANG_CHOICES

# Typer and click take ~30 ms to import, a tenth of what `dlprobe run` adds to a short script (benchmarks/startup.py).
_FLAGS = {"--quiet": "quiet", "-q": "quiet", "-m": "module", "--verbose": "verbose", "-v": "verbose",
          "--no-isolated-checks": "no_isolated_checks"}  # fmt: skip
_VALUES = {
    "--out": "out",
    "-o": "out",
    "--json": "json_path",
    "--hang-timeout": "hang_timeout",
    "--on-hang": "on_hang",
    "--start-method": "start_method",
    "--prom-textfile": "prom_textfile",
    "--prom-listen": "prom_listen",
    "--log-to": "log_to",
}
_REPEATED = {"log_to"}  # options given more than once add up (typer's list options); the others keep the last


@dataclass
class RunArgs:
    """`dlprobe run`'s arguments, parsed by typer (commands/run.py) or by `parse` here."""

    script: str
    script_args: list[str] = field(default_factory=list)
    module: bool = False
    out: str | None = None
    json_path: str | None = None
    quiet: bool = False
    hang_timeout: float = DEFAULT_HANG_TIMEOUT_S
    on_hang: str = ON_HANG_CHOICES[0]
    launch: str = LAUNCH_SCRIPT
    verbose: bool = False  # every finding's evidence in the summary, not only its key numbers
    start_method: str | None = None  # --start-method: every loader's workers start with it (None: the script's own)
    no_isolated_checks: bool = False  # --no-isolated-checks: no copy of the training forked for dlprobe's checks
    prom_textfile: str | None = None  # --prom-textfile DIR: node_exporter's textfile collector (supervisor/prom/)
    prom_listen: str | None = None  # --prom-listen [HOST:]PORT: /metrics over HTTP
    # --log-to wandb|mlflow (repeatable, or comma-separated), as given: checked by run_target.check_log_to
    log_to: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Ending:
    """How `dlprobe run` ends: with the script's exit code, or, where a signal killed the script, dying of the same
    signal once the report is written, so its caller sees what plain python gives it (returncode -N; a shell stops
    its line after Ctrl-C only when the child died of SIGINT)."""

    code: int
    signal: int | None = None


def parse(argv: list[str]) -> RunArgs | None:
    """`run [OPTIONS] SCRIPT [ARGS]...` as typer would parse it, or None for anything typer must see itself."""
    if not argv or argv[0] != "run" or "--" in argv:
        return None  # a launcher's command after --: typer records where the -- was
    values: dict[str, object] = {}
    repeated: dict[str, list[str]] = {}
    i = 1
    while i < len(argv):
        word = argv[i]
        if word in _FLAGS:
            values[_FLAGS[word]] = True
        elif word in _VALUES:
            if i + 1 >= len(argv) or argv[i + 1].startswith("-"):
                return None  # a missing value (typer's error line), or one that looks like an option
            name = _VALUES[word]
            if name in _REPEATED:
                repeated.setdefault(name, []).append(argv[i + 1])
            else:
                values[name] = argv[i + 1]
            i += 1
        elif word.startswith("-") or not word:
            return None  # --help, --opt=value, -qm, an unknown option, an empty script: typer's to answer
        else:
            break
        i += 1
    if i >= len(argv):
        return None  # no script: typer's "missing argument SCRIPT"
    timeout = values.pop("hang_timeout", None)
    try:
        hang_timeout = DEFAULT_HANG_TIMEOUT_S if timeout is None else float(str(timeout))
    except ValueError:
        return None  # typer's "not a valid float"
    if math.isnan(hang_timeout):
        return None
    module = bool(values.pop("module", False))
    values.update(repeated)
    args = RunArgs(argv[i], argv[i + 1 :], module, hang_timeout=hang_timeout, **values)  # type: ignore[arg-type]
    args.launch = LAUNCH_MODULE if module else LAUNCH_SCRIPT
    return args


def own_options_after_script(script_args: list[str]) -> list[str]:
    """The words after the script that are `dlprobe run`'s own options: the script gets them, as designed, and the
    report says where they go if the script then refuses them."""
    return [word for word in script_args if word.split("=", 1)[0] in _FLAGS or word.split("=", 1)[0] in _VALUES]


def execute(args: RunArgs) -> Ending:
    """Run the script under the probe, write and print its report; the script's exit code or its signal."""
    from dlprobe.supervisor.run_options import RunOptions
    from dlprobe.supervisor.run_target import run_script

    options = RunOptions(
        args.script,
        list(args.script_args),
        args.out,
        not args.quiet,
        hang_timeout=args.hang_timeout,
        on_hang=args.on_hang,
        launch=args.launch,
        start_method=args.start_method,
        no_isolated_checks=args.no_isolated_checks,
        prom_textfile=args.prom_textfile,
        prom_listen=args.prom_listen,
        log_to=tuple(args.log_to),
        own_options_after_script=own_options_after_script(list(args.script_args)),
        # Everything the report needs after the script (benchmarks/wall_timeline.py lists what is imported after
        # the exit): a module left out here is imported on the way to the summary, after the script has exited.
        # rich reads its emoji table on the summary's first markup.
        preload=("dlprobe.commands.outputs", "dlprobe.console", "dlprobe.render.plot")
        + (() if args.quiet else ("rich._emoji_codes",)),
    )
    stop = _SignalStop()
    with stop.installed():
        outcome = run_script(options)  # forwards SIGTERM and SIGHUP to the script meanwhile, then hands them back
        # Imported once the script has started (run_script preloads them meanwhile), never on the way to starting it.
        from dlprobe.commands.outputs import write_outputs
        from dlprobe.console import err_console, print_error
        from dlprobe.errors import DlprobeError

        try:
            stop.now()
            console = None if args.quiet else err_console()
            write_outputs(outcome.run_dir, console, args.json_path, plot_in_background=True, verbose=args.verbose)
        except DlprobeError as exc:  # the script ran: its exit code is still the one to return, not dlprobe's 2
            print_error(exc.message, exc.hint)
        except _ReportStopped as stopped:
            _say_report_stopped(outcome.run_dir, stopped.signum)
    return Ending(outcome.exit_code, outcome.signal)


class _ReportStopped(BaseException):
    """A second SIGTERM (a scheduler's grace period running out) or a SIGHUP after the script has ended. A
    BaseException, as KeyboardInterrupt is: the report's own guards (a failing analyzer costs one finding) catch
    Exception, and must not turn the stop into a report of a run that "raised"."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


class _SignalStop:
    """SIGTERM and SIGHUP once the script has ended (while the run is recorded they are the script's: run_script
    forwards them). One that comes while result.json is written is kept until it is; one during the report ends the
    writing, not dlprobe: what is written stays (each file lands whole or not at all), one line says what is missing,
    and the exit code is still the script's. Any signal after the first is ignored, so that line gets printed."""

    SIGNALS = (signal.SIGTERM, signal.SIGHUP)

    def __init__(self) -> None:
        self.signum: int | None = None
        self.raising = False

    def _handle(self, signum: int, _frame: object) -> None:
        for sig in self.SIGNALS:
            signal.signal(sig, signal.SIG_IGN)
        self.signum = signum
        if self.raising:
            raise _ReportStopped(signum)

    def now(self) -> None:
        """From here on a signal stops the writing at once; one that came before stops it before it starts."""
        self.raising = True
        if self.signum is not None:
            raise _ReportStopped(self.signum)

    @contextlib.contextmanager
    def installed(self) -> Iterator[None]:
        previous = {sig: signal.signal(sig, self._handle) for sig in self.SIGNALS}
        try:
            yield
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)


def _say_report_stopped(run_dir: Path, signum: int) -> None:
    from dlprobe.console import escape_controls
    from dlprobe.rundir.handle import RunDir

    written = RunDir(run_dir).report.is_file()
    what = "the page and plot were not written" if written else "the report was not written"
    name = signal.Signals(signum).name
    line = f"dlprobe: {name} while writing the report: {what}; `dlprobe report {run_dir}` makes it"
    try:
        sys.stderr.write(escape_controls(line) + "\n")
        sys.stderr.flush()
    except OSError:  # noqa: S110 - stderr is gone: the exit code still says how the script ended
        pass


def main(argv: list[str]) -> Ending | None:
    """How a `dlprobe run` parsed here ends, as cli.main would end it; None when typer must parse it."""
    args = parse(argv)
    if args is None:
        return None
    from dlprobe.errors import DlprobeError

    try:
        return execute(args)
    except DlprobeError as exc:
        from dlprobe.console import print_error

        print_error(exc.message, exc.hint)
        return Ending(exc.exit_code)
    except KeyboardInterrupt:
        return Ending(130)  # as typer answers Ctrl-C
    except OSError as exc:
        if exc.errno != errno.EPIPE:
            raise
        # as click does for a closed pipe: exit 1 without a second error when the streams are flushed at exit
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.dup2(devnull, sys.stderr.fileno())
        return Ending(1)


def exit_now(ending: Ending) -> NoReturn:
    """Exit with the script's code once the report is written, skipping the interpreter's teardown: freeing every
    module and object of the supervisor took 10-20 ms of CPU after the script had exited, for nothing
    (benchmarks/wall_timeline.py, "interpreter exit"). The atexit handlers still run and the streams are flushed; with
    a thread of ours still running, python's own exit (which waits for it) is kept. A script killed by a signal:
    dlprobe dies of the same signal (`die_of`)."""
    if ending.signal is not None:
        die_of(ending.signal)
    if _threads_left():
        sys.exit(ending.code)
    _flush_for_exit()
    os._exit(ending.code)


def die_of(signum: int) -> NoReturn:
    """End dlprobe by the signal that killed its script, as plain python's caller would have seen it end: a parent's
    returncode -N, not 128+N; a shell running `dlprobe run x.py; next` after Ctrl-C stops the line (bash goes on
    after a child that exited 130, it stops only for one that died of SIGINT)."""
    for thread in _threads_left():  # python's own exit waits for them too, before it re-raises a SIGINT
        thread.join()
    _flush_for_exit()
    if signum in _CORE_SIGNALS:
        # the script dumped its core (or not, by its own limit); dlprobe's would only be a second, useless file
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_CORE, (0, resource.getrlimit(resource.RLIMIT_CORE)[1]))
    if signum not in (signal.SIGKILL, signal.SIGSTOP):  # those two have no handler to reset
        signal.signal(signum, signal.SIG_DFL)  # dlprobe's own (SIGINT ignored, SIGTERM forwarded) are gone now
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signum})
    os.kill(os.getpid(), signum)
    os._exit(128 + signum)  # a signal whose default action does not end a process (none kills a script that way)


# Signals whose default action dumps core (signal(7)).
_CORE_SIGNALS = frozenset(
    {signal.SIGQUIT, signal.SIGILL, signal.SIGTRAP, signal.SIGABRT, signal.SIGBUS, signal.SIGFPE, signal.SIGSEGV,
     signal.SIGXCPU, signal.SIGXFSZ, signal.SIGSYS}
)  # fmt: skip


def _threads_left() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t is not threading.main_thread() and t.is_alive() and not t.daemon]


def _flush_for_exit() -> None:
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):  # a closed pipe: nothing left to flush to, as at python's own exit
            stream.flush()
