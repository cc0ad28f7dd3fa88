"""The exporter's options, checked (and its port bound) before the script starts, so a bad one is one `error:` line
and exit code 2, not a training run without the metrics asked for."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from dlprobe.errors import DlprobeError
from dlprobe.supervisor.prom import textfile

if TYPE_CHECKING:
    from dlprobe.supervisor.prom.http_server import MetricsServer


@dataclass
class PromSetup:
    textfile_dir: Path | None
    server: MetricsServer | None

    def close(self) -> None:
        """The port given back where the run never started."""
        if self.server is not None:
            self.server.close()


def prepare(textfile_dir: str | None, listen: str | None) -> PromSetup | None:
    """None without either option; else the checked directory and the bound (not yet serving) endpoint."""
    if textfile_dir is None and listen is None:
        return None
    directory = textfile.check_dir(textfile_dir) if textfile_dir is not None else None
    server = None
    if listen is not None:
        # http.server only when asked for: it is not on the way to the script's start otherwise
        from dlprobe.supervisor.prom.http_server import HINT, MetricsServer, parse_listen

        host, port = parse_listen(listen)
        try:
            server = MetricsServer(host, port)
        except OSError as exc:  # in use, not this machine's address, a name that does not resolve
            raise DlprobeError(f"cannot listen on --prom-listen {listen}: {exc.strerror or exc}", hint=HINT) from None
    return PromSetup(directory, server)
