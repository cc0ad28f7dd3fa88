"""`dlprobe scan` as one plain function: check the output paths, scan, print the summary, write the files."""

from __future__ import annotations

import os
from pathlib import Path

from rich.console import Console

from dlprobe.errors import DlprobeError
from dlprobe.exclude import write_excluded
from dlprobe.rundir import write_json
from dlprobe.scan.options import ScanOptions
from dlprobe.scan.progress import ScanProgress
from dlprobe.scan.render import print_scan_summary
from dlprobe.scan.result import ScanResult
from dlprobe.scan.runner import run_scan


def _check_writable(option: str, path: str | None) -> None:
    """Fail before a long scan, not after it, when an output file cannot be written."""
    if not path:
        return
    parent = Path(path).parent
    if Path(path).is_dir():
        raise DlprobeError(f"{option} {path} is a directory", hint=f"give a file name, e.g. {option} bad.json")
    if not parent.is_dir() or not os.access(parent, os.W_OK):
        raise DlprobeError(f"{option} {path}: cannot write into {parent}", hint="give a path in a writable directory")


def write_scan_files(result: ScanResult, json_path: str | None, exclude_out: str | None) -> None:
    try:
        if json_path:
            write_json(Path(json_path), result.to_json())
        if exclude_out:
            about = f"{result.dataset_type}: {len(result.bad)} bad of {result.scanned} checked"
            if not result.complete:
                about += " (the scan did not finish)"
            write_excluded(exclude_out, result.bad, result.unit, about)
    except OSError as exc:
        raise DlprobeError(f"cannot write {exc.filename}: {exc.strerror or exc}", hint="check the path") from None


def scan(
    script: str,
    args: list[str],
    loader: int,
    options: ScanOptions,
    json_path: str | None,
    exclude_out: str | None,
    console: Console | None,
) -> int:
    """Run the whole command; returns its exit code (0 all good, 1 bad samples, 130 interrupted)."""
    _check_writable("--json", json_path)
    _check_writable("--exclude-out", exclude_out)
    if loader < 0:
        raise DlprobeError(f"--loader {loader}: loaders are numbered from 0", hint="e.g. --loader 1 for the second")
    result = run_scan(script, args, loader, options, ScanProgress(enabled=console is not None))
    if console is not None:
        print_scan_summary(result, console)
    write_scan_files(result, json_path, exclude_out)
    if result.died:
        code = result.returncode
        raise DlprobeError(
            f"the scan process ended unexpectedly ({'exit code' if code and code > 0 else 'signal'} "
            f"{abs(code or 0)}) after {result.scanned} samples",
            hint="what it found until then is in the summary and files above",
        )
    return result.exit_code()
