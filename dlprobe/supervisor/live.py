"""The live view: a status line on a terminal, or a plain progress line now and then when piped."""

from __future__ import annotations

import os
import sys
import threading
import time
from typing import TextIO

from rich.text import Text

from dlprobe.console import SafeConsole

PLAIN_EVERY_S = 10.0


class LiveView:
    """Shares stderr with the training script: the status line is wiped before script output is written."""

    def __init__(self, enabled: bool, stream: TextIO | None = None) -> None:
        self.stream = stream or sys.stderr
        self.enabled = enabled
        self.tty = enabled and self.stream.isatty()
        self.console = SafeConsole(file=self.stream) if self.tty else None
        self.lock = threading.Lock()
        self.shown = False
        self.at_line_start = True
        self.last_plain = time.monotonic()
        self.status: Text = Text("")

    def _erase(self) -> None:
        if self.shown:
            self.stream.write("\r\x1b[2K")
            self.stream.flush()
            self.shown = False

    def _draw(self) -> None:
        if self.console is not None and self.at_line_start and self.status.plain:
            self.console.print(self.status, end="", overflow="ellipsis", no_wrap=True, crop=True)
            self.stream.flush()
            self.shown = True

    def forward(self, fd: int, data: bytes) -> None:
        """Write the script's own bytes unchanged, keeping the status line out of their way."""
        with self.lock:
            if self.tty:  # stdout and stderr usually share the terminal: clear the line either way
                self._erase()
            _write_all(fd, data)
            if data:
                self.at_line_start = data.endswith(b"\n")
            if self.tty:
                self._draw()

    def update(self, status: Text) -> None:
        if not self.enabled:
            return
        with self.lock:
            self.status = status
            if self.tty:
                self._erase()
                self._draw()
            elif time.monotonic() - self.last_plain >= PLAIN_EVERY_S:
                self.last_plain = time.monotonic()
                self.stream.write(f"[dlprobe] {status.plain}\n")
                self.stream.flush()

    def close(self) -> None:
        with self.lock:
            if self.tty:
                self._erase()
            self.enabled = False


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        try:
            n = os.write(fd, view)
        except BlockingIOError:
            time.sleep(0.01)
            continue
        except OSError:
            return  # our own stdout went away (closed pipe); keep probing, drop the bytes
        view = view[n:]
