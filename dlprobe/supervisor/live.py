"""The live view: a plain progress line now and then where stderr is not a terminal; on a terminal, nothing.

The script writes to the terminal itself (dlprobe is not between them), so a status line drawn there would land in
the middle of the script's own lines and progress bars: on a terminal dlprobe prints only its notices (a hang
recorded) during the run, and its summary after it.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from typing import TextIO

from rich.text import Text

from dlprobe.console import escape_controls

PLAIN_EVERY_S = 10.0


class LiveView:
    """Shares stderr with the training script."""

    def __init__(self, enabled: bool, stream: TextIO | None = None) -> None:
        self.stream = stream or sys.stderr
        self.enabled = enabled
        self.plain = enabled and not self.stream.isatty()
        self.lock = threading.Lock()
        self.last_plain = time.monotonic()

    def notice(self, text: str) -> None:
        """One line of dlprobe's own (a hang recorded), on a line of its own."""
        if self.enabled:
            with self.lock:
                _write_all(self.stream.fileno(), f"[dlprobe] {escape_controls(text)}\n".encode())

    def update(self, status: Text) -> None:
        if not self.plain:
            return
        with self.lock:
            if time.monotonic() - self.last_plain >= PLAIN_EVERY_S:
                self.last_plain = time.monotonic()
                _write_all(self.stream.fileno(), f"[dlprobe] {escape_controls(status.plain)}\n".encode())

    def close(self) -> None:
        with self.lock:
            self.enabled = self.plain = False


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        try:
            n = os.write(fd, view)
        except BlockingIOError:
            time.sleep(0.01)
            continue
        except OSError:
            return  # our own stderr went away (closed pipe); keep probing, drop the line
        view = view[n:]
