"""The exposition's two transports, for real: the textfile (atomic, never through a link, gone at the end) and the
/metrics endpoint on a real socket; the options' bad values are one `error:` line and exit code 2 before the script
starts."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from dlprobe.errors import DlprobeError
from dlprobe.supervisor.prom.exposition import CONTENT_TYPE
from dlprobe.supervisor.prom.http_server import MetricsServer, parse_listen
from dlprobe.supervisor.prom.textfile import Textfile, check_dir, file_name

TEXT = '# HELP dlprobe_a_bytes A.\n# TYPE dlprobe_a_bytes gauge\ndlprobe_a_bytes{worker="0"} 5\n'


def test_the_textfile_replaces_a_planted_link_never_writes_through_it(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("precious")
    out = tmp_path / "collector"
    out.mkdir()
    textfile = Textfile(out, "my job/1", 4242)
    assert textfile.path.name == "dlprobe_my_job_1_4242.prom" == file_name("my job/1", 4242)
    textfile.path.symlink_to(victim)
    textfile.write(TEXT)
    assert victim.read_text() == "precious" and not textfile.path.is_symlink()
    assert textfile.path.read_text() == TEXT
    assert sorted(p.name for p in out.iterdir()) == [textfile.path.name]  # no temporary left beside it
    textfile.remove()
    assert list(out.iterdir()) == [] and victim.exists()


def test_a_textfile_never_written_is_not_removed(tmp_path: Path) -> None:
    textfile = Textfile(tmp_path, "j", 1)
    textfile.path.write_text("someone else's")
    textfile.remove()
    assert textfile.path.exists()


@pytest.mark.parametrize(
    ("given", "why"),
    [("missing", "no such directory"), ("a-file", "not a directory")],
)
def test_the_textfile_directory_must_be_one(tmp_path: Path, given: str, why: str) -> None:
    (tmp_path / "a-file").write_text("")
    with pytest.raises(DlprobeError, match=why) as caught:
        check_dir(str(tmp_path / given))
    assert caught.value.exit_code == 2 and "textfile.directory" in (caught.value.hint or "")
    assert check_dir(str(tmp_path)) == tmp_path


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write in any directory: needs an unprivileged user")
def test_a_directory_this_user_cannot_write_is_refused(tmp_path: Path) -> None:
    tmp_path.chmod(0o500)
    try:
        with pytest.raises(DlprobeError, match="not writable"):
            check_dir(str(tmp_path))
    finally:
        tmp_path.chmod(0o700)


@pytest.mark.parametrize(
    ("given", "address"),
    [("9400", ("127.0.0.1", 9400)), ("0", ("127.0.0.1", 0)), ("0.0.0.0:80", ("0.0.0.0", 80)),
     ("[::1]:9400", ("::1", 9400)), ("localhost:1", ("localhost", 1))],
)  # fmt: skip
def test_listen_addresses(given: str, address: tuple[str, int]) -> None:
    assert parse_listen(given) == address


@pytest.mark.parametrize("given", [":9400", "port", "70000", "-1", "host:", ""])
def test_bad_listen_addresses(given: str) -> None:
    with pytest.raises(DlprobeError, match="--prom-listen"):
        parse_listen(given)


def _get(url: str) -> tuple[int, str, str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:  # noqa: S310 - a loopback URL of the test's
            return response.status, response.headers["Content-Type"], response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers["Content-Type"], exc.read().decode()


def test_the_endpoint_serves_the_last_exposition_on_loopback() -> None:
    server = MetricsServer("127.0.0.1", 0)
    errors: list[BaseException] = []
    try:
        server.start(errors.append)
        host, port = server.address.split(":")
        assert host == "127.0.0.1" and int(port) > 0
        assert _get(f"http://{server.address}/metrics")[0] == 200  # before the first refresh: empty, not an error
        server.publish(TEXT)
        status, content_type, body = _get(f"http://{server.address}/metrics")
        assert (status, content_type) == (200, CONTENT_TYPE)
        assert [s.value for f in text_string_to_metric_families(body) for s in f.samples] == [5]
        assert _get(f"http://{server.address}/")[0] == 404
        # a scraper that hangs up mid-request is its own business, never a probe problem
        with socket.create_connection(("127.0.0.1", int(port))) as sock:
            sock.sendall(b"GET /metrics HTTP/1.1\r\n")
        assert _get(f"http://{server.address}/metrics")[0] == 200
    finally:
        server.close()
    assert errors == []
    with pytest.raises(OSError), socket.create_connection(("127.0.0.1", int(port)), timeout=5):
        pass  # closed with the run: nothing listens any more


def _dlprobe(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "dlprobe", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=120)  # fmt: skip


@pytest.mark.parametrize("command", ["run", "check"])
def test_bad_options_stop_before_the_script_starts(tmp_path: Path, command: str) -> None:
    script = tmp_path / "train.py"
    marker = tmp_path / "started"
    script.write_text(f"open({str(marker)!r}, 'w').close()\n")
    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen()
    in_use = str(busy.getsockname()[1])
    try:
        for options, message in (
            (["--prom-textfile", str(tmp_path / "nowhere")], "no such directory"),
            (["--prom-listen", "nine"], "is not a port number"),
            (["--prom-listen", in_use], "cannot listen on --prom-listen"),
        ):
            proc = _dlprobe(command, "-o", str(tmp_path / "run"), *options, str(script), cwd=tmp_path)
            assert proc.returncode == 2, proc.stderr
            assert proc.stderr.startswith("error: ") and message in proc.stderr and "hint:" in proc.stderr
            assert "Traceback" not in proc.stderr
            assert not marker.exists() and not (tmp_path / "run").exists()
    finally:
        busy.close()


def test_an_error_in_a_scrape_goes_to_the_problems_not_to_the_trainings_stderr(
    capfd: pytest.CaptureFixture[str],
) -> None:
    server = MetricsServer("127.0.0.1", 0)
    errors: list[BaseException] = []
    try:
        server.start(errors.append)
        server.server.body = None  # type: ignore[assignment] - a body of the wrong type: the handler raises
        with pytest.raises(OSError):  # the scraper sees the connection end without an answer
            _get(f"http://{server.address}/metrics")
        deadline = time.monotonic() + 30
        while not errors and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        server.close()
    assert [type(e) for e in errors] == [TypeError]
    assert "Traceback" not in capfd.readouterr().err  # socketserver's own handler would have printed it
