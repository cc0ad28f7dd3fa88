"""`dlprobe scan`: check the output paths, scan every sample of the script's datasets, print and write the result."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from dlprobe.commands.options import MODULE_HELP, SCRIPT_ARGS, json_option, one_process_only
from dlprobe.errors import DlprobeError
from dlprobe.rundir.schema import LAUNCH_SCRIPT

if TYPE_CHECKING:
    from rich.console import Console

    from dlprobe.scan.options import ScanOptions
    from dlprobe.scan.result import ScanResult


def scan(
    ctx: typer.Context,
    script: str = typer.Argument(
        ..., help="The training script (with -m a module); it runs until its DataLoader, then stops."
    ),
    script_args: list[str] | None = SCRIPT_ARGS,
    module: bool = typer.Option(False, "-m", help=MODULE_HELP),
    loader: int | None = typer.Option(
        None, "--loader", help="Only this DataLoader: 0 is the first one the script iterates (default: every one)."
    ),
    workers: int | None = typer.Option(None, "--workers", "-w", help="Worker processes (default: usable cores)."),
    sample_timeout: str | None = typer.Option(None, "--sample-timeout", help="Time limit per sample (default 60s)."),
    range_text: str | None = typer.Option(None, "--range", help="Only indices START:STOP (either may be left out)."),
    sample: int | None = typer.Option(None, "--sample", help="Only N indices picked at random."),
    seed: int = typer.Option(0, "--seed", help="Seed for --sample."),
    start_method: str = typer.Option("auto", "--start-method", help="auto (the loader's), fork, spawn or forkserver."),
    json_path: str | None = json_option("Write the result as JSON to this path."),
    exclude_out: str | None = typer.Option(None, "--exclude-out", help="Write the bad indices to this file."),
    html_path: str | None = typer.Option(None, "--html", help="Write the result as a self-contained HTML page here."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bar and no summary."),
) -> None:
    """Check every sample of every DataLoader the script has before training (or of --loader N); list the bad ones.

    Under Lightning the sanity-check validation loader is checked, then the training loader; the script never trains.

    Exit code 0 when every sample is good, 1 when some are bad, 2 when the scan cannot run, 130 on Ctrl-C.
    """
    from dlprobe.console import out_console
    from dlprobe.scan.options import build_options

    launch = one_process_only(ctx, module, "scan")
    options = build_options(workers, sample_timeout, range_text, sample, seed, start_method)
    options.every_loader = loader is None
    console = None if quiet else out_console()
    raise typer.Exit(
        run_scan_command(
            script, list(script_args or []), loader, options, json_path, exclude_out, console, html_path, launch
        )
    )


def _check_writable(option: str, path: str | None) -> None:
    """Fail before a long scan, not after it, when an output file cannot be written."""
    if not path:
        return
    parent = Path(path).parent
    if Path(path).is_dir():
        raise DlprobeError(f"{option} {path} is a directory", hint=f"give a file name, e.g. {option} bad.json")
    if not parent.is_dir() or not os.access(parent, os.W_OK):
        raise DlprobeError(f"{option} {path}: cannot write into {parent}", hint="give a path in a writable directory")


def write_scan_files(
    result: ScanResult, json_path: str | None, exclude_out: str | None, html_path: str | None = None
) -> None:
    from dlprobe.rundir.files import write_json

    try:
        if json_path:
            write_json(Path(json_path), result.to_json())
        if exclude_out:
            _write_exclude_files(result, exclude_out)
        if html_path:
            from dlprobe.render.html_page import write_page
            from dlprobe.render.html_results import render_scan_html

            write_page(Path(html_path), render_scan_html(result.to_json(), result.exit_code()))
    except OSError as exc:
        raise DlprobeError(f"cannot write {exc.filename}: {exc.strerror or exc}", hint="check the path") from None


def _write_exclude_files(result: ScanResult, exclude_out: str) -> None:
    """One file per dataset: the indices of two datasets in one file would exclude the wrong samples."""
    from dlprobe.exclude import write_excluded

    bad_scans = [scan for scan in result.scans if scan.bad_by_index] or result.scans[:1]
    for number, scan in enumerate(bad_scans):
        path = Path(exclude_out)
        if number:  # the first keeps the name asked for; the others name their loader
            path = path.with_name(f"{path.stem}.loader{scan.loader}{path.suffix}")
        about = f"{scan.dataset_type}: {len(scan.bad)} bad of {scan.scanned} checked"
        if not scan.complete:
            about += " (the scan did not finish)"
        write_excluded(str(path), scan.bad, scan.unit, about)


def run_scan_command(
    script: str,
    args: list[str],
    loader: int | None,
    options: ScanOptions,
    json_path: str | None,
    exclude_out: str | None,
    console: Console | None,
    html_path: str | None = None,
    launch: str = LAUNCH_SCRIPT,
) -> int:
    """Run the whole command; returns its exit code (0 all good, 1 bad samples, 130 interrupted)."""
    from dlprobe.render.scan import scan_summary
    from dlprobe.scan.progress import ScanProgress
    from dlprobe.supervisor.scan_launch import run_scan

    _check_writable("--json", json_path)
    _check_writable("--exclude-out", exclude_out)
    _check_writable("--html", html_path)
    if loader is not None and loader < 0:
        raise DlprobeError(f"--loader {loader}: loaders are numbered from 0", hint="e.g. --loader 1 for the second")
    result = run_scan(script, args, loader, options, ScanProgress(enabled=console is not None), launch)
    if console is not None:
        console.print(scan_summary(result), soft_wrap=True)
    write_scan_files(result, json_path, exclude_out, html_path)
    if result.died:
        code = result.returncode
        raise DlprobeError(
            f"the scan process ended unexpectedly ({'exit code' if code and code > 0 else 'signal'} "
            f"{abs(code or 0)}) after {sum(scan.scanned for scan in result.scans)} samples",
            hint="what it found until then is in the summary and files above",
        )
    return result.exit_code()
