"""`--prom-listen [HOST:]PORT`: GET /metrics over HTTP, served from a daemon thread of the supervisor (never a
process of the training's), on loopback unless a host is given. It serves the exposition the watch last rendered:
the readings are the watch thread's, so this thread never reads them while they change."""

from __future__ import annotations

import os
import selectors
import socket
import socketserver
import sys
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from dlprobe.errors import DlprobeError
from dlprobe.supervisor.prom.exposition import CONTENT_TYPE

DEFAULT_HOST = "127.0.0.1"
HINT = "e.g. --prom-listen 9400 (127.0.0.1), --prom-listen 0.0.0.0:9400 (every interface), or port 0 (any free port)"
REQUEST_TIMEOUT_S = 10.0  # a scraper that connects and sends nothing holds a thread this long at most

ErrorHook = Callable[[BaseException], None]


def parse_listen(value: str) -> tuple[str, int]:
    """`PORT`, `HOST:PORT` or `[IPV6]:PORT` -> (host, port); else one error line, exit 2."""
    host, sep, port_text = value.rpartition(":")
    if not sep:
        host = DEFAULT_HOST
    elif not host:
        # Go's ":9400" (node_exporter's own default spelling) means every interface; dlprobe's default is loopback,
        # so the ambiguous spelling is refused rather than guessed.
        raise DlprobeError(f"--prom-listen {value}: no host before the ':'", hint=HINT)
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    try:
        port = int(port_text)
    except ValueError:
        raise DlprobeError(f"--prom-listen {value}: {port_text!r} is not a port number", hint=HINT) from None
    if not 0 <= port <= 65535:
        raise DlprobeError(f"--prom-listen {value}: the port must be 0-65535", hint=HINT)
    return host, port


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    server_version = "dlprobe"
    timeout = REQUEST_TIMEOUT_S

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        if self.path.split("?", 1)[0] != "/metrics":
            self._send(404, b"not found: dlprobe serves /metrics\n", "text/plain; charset=utf-8")
            return
        self._send(200, self.server.body, CONTENT_TYPE)

    def _send(self, status: int, body: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - http.server's signature
        pass  # stderr is the training's: a line per scrape would land among its own output


class _Server(ThreadingHTTPServer):
    daemon_threads = True  # a scrape in progress never keeps dlprobe from exiting
    # handle_request's own wait, once the loop saw the socket ready: a connection reset before accept() must not
    # leave it blocked past `close`
    timeout = 0.1
    body = b""
    on_error: ErrorHook | None = None

    def server_bind(self) -> None:
        # HTTPServer's own looks the host's name up (socket.getfqdn): a DNS query that can take seconds in a
        # container without a resolver, before the script may start
        socketserver.TCPServer.server_bind(self)
        host, port = self.server_address[:2]
        self.server_name, self.server_port = str(host), int(port)

    def handle_error(self, request: Any, client_address: Any) -> None:
        # socketserver prints the traceback to stderr (the training's); here it is a probe problem instead
        exc = sys.exc_info()[1]
        if isinstance(exc, ConnectionError | TimeoutError):
            return  # the scraper hung up or went silent: its own business, nothing of the probe's failed
        if exc is not None and self.on_error is not None:
            self.on_error(exc)


class _Server6(_Server):
    address_family = socket.AF_INET6


class MetricsServer:
    """Bound at construction (so a port in use is the user's error before the script starts), serving once
    `start` is called."""

    def __init__(self, host: str, port: int) -> None:
        cls = _Server6 if ":" in host else _Server
        self.server = cls((host, port), _Handler)  # the socket is not inheritable: the target never holds it
        self.thread: threading.Thread | None = None
        self._wake: tuple[int, int] | None = None

    @property
    def address(self) -> str:
        host, port = str(self.server.server_address[0]), int(self.server.server_address[1])
        return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"

    def start(self, on_error: ErrorHook) -> None:
        self.server.on_error = on_error

        # Not serve_forever: it wakes every poll_interval to look for shutdown(), and shutdown() waits for that
        # wake-up (0.5 s by default, added to the end of every run). This loop sleeps until a scrape or `close`.
        self._wake = os.pipe()
        wake_read = self._wake[0]

        def serve() -> None:
            try:
                with selectors.DefaultSelector() as selector:
                    selector.register(self.server.socket, selectors.EVENT_READ)
                    selector.register(wake_read, selectors.EVENT_READ)
                    while True:
                        events = selector.select()
                        if any(key.fileobj == wake_read for key, _ in events):
                            return
                        self.server.handle_request()  # accept the connection and hand it to its own thread
            except Exception as exc:  # the endpoint is gone; the run and the textfile go on
                on_error(exc)

        self.thread = threading.Thread(target=serve, name="dlprobe-prom-http", daemon=True)
        self.thread.start()

    def publish(self, text: str) -> None:
        self.server.body = text.encode()  # one reference replaced: a request reads the old body or the new

    def close(self) -> None:
        thread, self.thread = self.thread, None
        wake, self._wake = self._wake, None
        if wake is not None:
            os.write(wake[1], b"x")
        if thread is not None:
            thread.join(timeout=5)
        if wake is not None:
            os.close(wake[0])
            os.close(wake[1])
        self.server.server_close()
