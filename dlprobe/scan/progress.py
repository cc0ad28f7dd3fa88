"""The scan's live view on stderr: a rich progress bar with rate and ETA on a terminal, plain lines otherwise."""

from __future__ import annotations

import sys
import threading
import time
from typing import TextIO

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, ProgressColumn, Task, TextColumn, TimeRemainingColumn
from rich.text import Text

from dlprobe.scan.result import ScanResult

PLAIN_EVERY_S = 10.0


class _RateColumn(ProgressColumn):
    def render(self, task: Task) -> Text:
        speed = task.finished_speed or task.speed
        return Text(f"{speed:,.0f} samples/s" if speed else "- samples/s", style="progress.data.speed")


class _BadColumn(ProgressColumn):
    def render(self, task: Task) -> Text:
        bad = int(task.fields.get("bad", 0))
        return Text(f"{bad} bad", style="bold red" if bad else "green")


class ScanProgress:
    """Shows how far the scan is; the script's own output is printed above the bar, never through it."""

    def __init__(self, enabled: bool, stream: TextIO | None = None) -> None:
        self.stream = stream or sys.stderr
        self.enabled = enabled
        self.tty = enabled and self.stream.isatty()
        self.lock = threading.Lock()
        self.bar: Progress | None = None
        self.task = None
        self.started_at: float | None = None
        self.scans_seen = 0
        self.last_plain = time.monotonic()
        if self.tty:
            console = Console(file=self.stream, highlight=False)
            self.bar = Progress(
                TextColumn("[bold cyan]dlprobe scan"),
                BarColumn(),
                MofNCompleteColumn(),
                _RateColumn(),
                TextColumn("ETA"),
                TimeRemainingColumn(),
                _BadColumn(),
                console=console,
                speed_estimate_period=10.0,
            )
            self.bar.start()
            self.task = self.bar.add_task("scan", total=None, bad=0)

    def output(self, data: bytes) -> None:
        """A line the script (or its dataset) wrote."""
        with self.lock:
            if self.bar is not None:
                self.bar.console.print(Text(data.decode(errors="replace").rstrip("\n")), soft_wrap=True)
            else:
                self.stream.write(data.decode(errors="replace"))
                self.stream.flush()

    def update(self, result: ScanResult) -> None:
        if not self.enabled or not result.started:
            return
        scan = result.current
        with self.lock:
            if self.started_at is None or len(result.scans) != self.scans_seen:  # each loader starts afresh
                self.started_at = time.monotonic()
                self.scans_seen = len(result.scans)
                if self.bar is None:
                    self._plain(
                        f"scanning {scan.selected if scan.selected is not None else 'a stream of'} samples of "
                        f"{scan.dataset_type} with {scan.workers} {scan.start_method} worker(s)"
                    )
                elif self.task is not None:
                    self.bar.reset(self.task)
            if self.bar is not None and self.task is not None:
                self.bar.update(self.task, total=scan.selected, completed=scan.scanned, bad=result.bad_count)
            elif time.monotonic() - self.last_plain >= PLAIN_EVERY_S:
                self._plain(self._plain_status(result))

    def _plain_status(self, whole: ScanResult) -> str:
        result = whole.current
        elapsed = time.monotonic() - (self.started_at or time.monotonic())
        rate = result.scanned / elapsed if elapsed > 0 else 0.0
        text = f"{result.scanned}"
        if result.selected:
            text += f"/{result.selected} ({100 * result.scanned / result.selected:.0f}%)"
            if rate > 0:
                text += f", ETA {max(0.0, (result.selected - result.scanned) / rate):.0f}s"
        return f"{text} samples, {rate:,.0f} samples/s, {whole.bad_count} bad"

    def _plain(self, text: str) -> None:
        self.last_plain = time.monotonic()
        self.stream.write(f"[dlprobe] scan: {text}\n")
        self.stream.flush()

    def close(self) -> None:
        with self.lock:
            if self.bar is not None:
                self.bar.stop()
                self.bar = None
