"""`dlprobe compare`: two runs side by side in the terminal, one row per measure, one column per run."""

from __future__ import annotations

from rich.console import Group
from rich.table import Table
from rich.text import Text

from dlprobe.analysis.report.compare import Comparison, LoaderSide, RunSide
from dlprobe.units import format_bytes


def _method(side: RunSide, loader: LoaderSide | None) -> str:
    if loader is None:
        return "-"
    method = loader["start_method"] or "-"
    forced = side["start_method_forced"]
    return f"{method} (--start-method)" if forced and forced == method else method


def _num(value: float | None, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


def _rows(side: RunSide, loader: LoaderSide | None) -> list[str]:
    if loader is None:
        return ["no such loader"] + ["-"] * 6
    return [
        _method(side, loader),
        "-" if loader["num_workers"] is None else str(loader["num_workers"]),
        format_bytes(loader["worker_uss_peak"]) if loader["worker_uss_peak"] is not None else "-",
        format_bytes(loader["worker_pss_peak"]) if loader["worker_pss_peak"] is not None else "-",
        "-" if loader["first_batch_s"] is None else f"{loader['first_batch_s']:.2f} s",
        f"{_num(loader['batches_per_s'], '.3g')} ({loader['batches']} batches)",
        "-" if loader["wait_fraction"] is None else f"{loader['wait_fraction']:.0%}",
    ]


_MEASURES = (
    "start method",
    "workers",
    "USS per worker (median of peaks)",
    "PSS per worker (median of peaks)",
    "time to first batch",
    "batches/s (start included)",
    "loop waiting",
)


def _ended(side: RunSide) -> str:
    code = side["exit_code"]
    took = "" if side["duration_s"] is None else f", {side['duration_s']:.1f} s"
    return ("-" if code is None else f"exit code {code}") + took


def _problems(side: RunSide) -> str:
    found = [f"{code} ({sev})" for code, sev in side["findings"].items() if sev in ("error", "warning")]
    return ", ".join(found) if found else "none"


def compare_summary(comparison: Comparison) -> Group:
    a, b = comparison["a"], comparison["b"]
    table = Table(title="dlprobe compare", title_justify="left")
    table.add_column("", no_wrap=True)
    table.add_column("A", overflow="fold")
    table.add_column("B", overflow="fold")
    table.add_row("run directory", a["run_dir"], b["run_dir"])
    table.add_row("script", a["script"] or "-", b["script"] or "-")
    table.add_row("ended", _ended(a), _ended(b))
    for lid in comparison["loader_ids"]:
        table.add_section()
        rows_a, rows_b = _rows(a, a["loaders"].get(lid)), _rows(b, b["loaders"].get(lid))
        for measure, va, vb in zip(_MEASURES, rows_a, rows_b, strict=True):
            table.add_row(f"loader {lid} {measure}", va, vb)
    if not comparison["loader_ids"]:
        table.add_row("loaders", "none iterated", "none iterated")
    table.add_section()
    table.add_row("warnings and errors", _problems(a), _problems(b))
    parts: list[Table | Text] = [table]
    if comparison["only_a"] or comparison["only_b"]:
        text = Text("What differs: ", style="bold")
        text.append(f"only in A: {', '.join(comparison['only_a']) or 'none'}; ")
        text.append(f"only in B: {', '.join(comparison['only_b']) or 'none'}")
        parts.append(text)
    else:
        parts.append(Text("Both runs have the same warnings and errors."))
    return Group(*parts)
