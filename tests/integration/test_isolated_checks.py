"""dlprobe's own checks never act on the training's world: real runs of `dlprobe run` beside plain python on a
dataset with side effects (a file append, an HTTP request), a script's at-fork handler and SIGCHLD handler, and an
installed library's `__reduce__` that writes a file. The sample check loads the failing index again only inside a
sandbox (no network, read-only files), the readiness copy never calls a library's reduction, and no fork of
dlprobe's is seen by the script; each check that does not run says why."""

from __future__ import annotations

import http.server
import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import SCRIPTS, DlprobeResult

SCRIPT = "acts_on_the_world.py"


def _plain(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPTS / SCRIPT), *args], cwd=tmp_path, capture_output=True,
                          text=True, timeout=180)  # fmt: skip


def _events(result: DlprobeResult, name: str) -> list[dict[str, Any]]:
    lines = (result.run_dir / "events.jsonl").read_text().splitlines()
    return [e for e in map(json.loads, lines) if e.get("ev") == name]


def _sample_check(result: DlprobeResult) -> dict[str, Any]:
    checks = _events(result, "sample_check")
    assert len(checks) == 1, checks
    return checks[0]


def _worker_finding(result: DlprobeResult) -> dict[str, Any]:
    found = [f for f in result.report["findings"] if f["code"] in ("bad-sample", "worker-error")]
    assert len(found) == 1, [(f["code"], f["title"]) for f in result.report["findings"]]
    return found[0]


def test_a_getitem_that_appends_to_a_file_appends_only_what_plain_python_appends(probe, tmp_path):
    plain_log, probed_log = tmp_path / "plain.log", tmp_path / "probed.log"
    plain = _plain(tmp_path, "append", str(plain_log))
    result = probe(SCRIPT, "append", str(probed_log), options=["--quiet"])
    assert plain.returncode == result.returncode == 1, result.stderr[-2000:]
    assert "ValueError: record 9 is corrupt" in result.stderr
    # Which indices the workers reached before the error depends on their timing; dlprobe's copy adds none: each
    # line is one load of the workers', and the failing index was loaded once, by its worker
    assert sorted(probed_log.read_text().split()).count("9") == 1
    assert sorted(plain_log.read_text().split()).count("9") == 1
    check = _sample_check(result)
    assert check["outcome"] == "unverified" and "Read-only file system" in check["reason"], check
    assert check["isolation"][0].startswith("in new user, mount and network namespaces"), check
    finding = _worker_finding(result)
    assert finding["code"] == "worker-error", finding["title"]  # never blamed: the load could not be repeated
    assert "the sample was not checked" in finding["title"] and "Read-only file system" in finding["detail"]


class _Counting(http.server.BaseHTTPRequestHandler):
    hits: list[str] = []

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        self.hits.append(self.path)
        self.send_response(200)
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, *args: Any) -> None:
        pass  # quiet: the test reads the hits


@pytest.fixture
def server() -> Iterator[tuple[str, list[str]]]:
    hits: list[str] = []
    handler = type("Handler", (_Counting,), {"hits": hits})
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}/item", hits
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_a_getitem_that_calls_a_server_is_not_called_again_by_the_check(probe, server):
    url, hits = server
    result = probe(SCRIPT, "http", url, options=["--quiet"])
    assert result.returncode == 1 and "ValueError: record 9 is corrupt" in result.stderr, result.stderr[-2000:]
    assert hits.count("/item?i=9") == 1, hits  # the worker's own request only: the sandbox has no network
    check = _sample_check(result)
    assert check["outcome"] == "unverified" and "Network is unreachable" in check["reason"], check
    assert _worker_finding(result)["code"] == "worker-error"


def test_a_sample_that_fails_alone_in_the_sandbox_is_still_blamed(probe, tmp_path):
    result = probe("raises_through_loader.py", "worker", "4", options=["--quiet"])
    assert result.returncode == 1, result.stderr[-2000:]
    finding = _worker_finding(result)
    assert finding["code"] == "bad-sample", finding["title"]
    assert "in new user, mount and network namespaces" in finding["detail"]


def test_the_scripts_at_fork_handler_runs_only_for_its_own_workers(probe, tmp_path):
    plain = _plain(tmp_path, "atfork")
    result = probe(SCRIPT, "atfork", options=["--quiet"])
    assert plain.returncode == result.returncode == 1, result.stderr[-2000:]
    line = "at-fork handler ran in a child"
    assert plain.stdout.count(line) == 2  # one per worker
    assert result.stdout.count(line) == 2, result.stdout  # no copy of dlprobe's ran it
    skipped = _events(result, "start_readiness_skipped")
    assert len(skipped) == 1 and "at-fork handlers (acts_on_the_world.py:" in skipped[0]["reason"], skipped
    assert not _events(result, "start_readiness")
    check = _sample_check(result)
    assert check["outcome"] == "unverified" and "at-fork handlers" in check["reason"], check


def test_the_scripts_sigchld_handler_sees_no_child_of_dlprobes(probe, tmp_path):
    plain = _plain(tmp_path, "sigchld")
    result = probe(SCRIPT, "sigchld", options=["--quiet"])
    assert plain.returncode == result.returncode == 0, result.stderr[-2000:]
    assert "SIGCHLD seen at the first batch: 0" in plain.stdout
    assert "SIGCHLD seen at the first batch: 0" in result.stdout, result.stdout
    assert len(_events(result, "start_readiness")) == 1  # the copy ran: its exit was kept from the handler


FAKELIB = '''
class Thing:
    """An installed library's object whose pickling writes a file (as a client that logs, or flushes, would)."""

    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        with open(self.path, "a") as f:
            f.write("reduced\\n")
        return (Thing, (self.path,))
'''


def test_an_installed_librarys_reduce_is_never_called_by_the_readiness_copy(probe, tmp_path):
    lib = tmp_path / "lib"
    (lib / "site-packages" / "fakelib").mkdir(parents=True)
    (lib / "site-packages" / "fakelib" / "__init__.py").write_text(FAKELIB)
    result = probe(SCRIPT, "libreduce", str(lib), options=["--quiet"])
    assert result.returncode == 0, result.stderr[-2000:]
    assert not (lib / "reduced.txt").exists()  # workers fork: nothing pickles it, unprobed or probed
    (readiness,) = _events(result, "start_readiness")
    dataset = next(o for o in readiness["objects"] if o["name"] == "dataset")
    assert "fakelib.Thing" in dataset["not_run"], dataset


def test_no_isolated_checks_turns_both_off_and_says_so(probe, tmp_path):
    result = probe(SCRIPT, "append", str(tmp_path / "x.log"), options=["--quiet", "--no-isolated-checks"])
    assert result.returncode == 1, result.stderr[-2000:]
    check = _sample_check(result)
    assert check["outcome"] == "unverified" and "--no-isolated-checks" in check["reason"]
    skipped = _events(result, "start_readiness_skipped")
    assert len(skipped) == 1 and "--no-isolated-checks" in skipped[0]["reason"]
    assert json.loads((result.run_dir / "meta.json").read_text())["isolated_checks"] is False


def test_a_grayscale_image_among_rgb_ones_is_named_though_torch_names_no_sample(probe, tmp_path):
    result = probe("one_grayscale_image.py", str(tmp_path), options=["--quiet"])
    assert result.returncode == 1 and "Trying to resize storage that is not resizable" in result.stderr
    finding = _worker_finding(result)
    assert finding["code"] == "bad-sample" and finding["evidence"]["index"] == 13, finding["title"]
    assert "(Tensor(1, 16, 16) float32, int) where the other 7 are (Tensor(3, 16, 16) float32, int)" in finding["title"]
    assert "loaded each sample of that batch again, one by one" in finding["detail"]
    assert ".convert('RGB')" in finding["fix"]


def test_the_same_images_converted_to_rgb_get_no_finding(probe, tmp_path):
    result = probe("one_grayscale_image.py", str(tmp_path), "rgb", options=["--quiet"])
    assert result.returncode == 0 and "total " in result.stdout, result.stderr[-2000:]
    assert [f for f in result.report["findings"] if f["code"] in ("bad-sample", "worker-error")] == []


def test_the_scripts_own_except_block_runs_before_the_check_is_done(probe):
    result = probe("error_while_check_runs.py", options=["--quiet"])
    assert result.returncode == 3, result.stderr[-2000:]  # the script's own ending, from its except block
    # The check had not ended when the script caught the error: it runs beside the training, not before it
    assert "caught: Caught ValueError in DataLoader worker process" in result.stdout, result.stdout
    assert "sample checks already written: 0" in result.stdout, result.stdout
    check = _sample_check(result)  # and the report still has what it found, once it ended
    assert check["outcome"] == "unverified" and "did not finish within 10 s" in check["reason"], check


def test_the_training_never_waits_for_the_readiness_copy(probe):
    # a million dicts take the copy a second or more to pickle: the script's own iter(loader) used to include all of
    # it (the training waited for the copy); now it returns while the copy still pickles, and the event still lands
    result = probe("readiness_not_waited.py", options=["--quiet"])
    assert result.returncode == 0, result.stderr[-2000:]
    iter_s = json.loads(result.stdout.strip().splitlines()[-1])["iter_s"]
    (readiness,) = _events(result, "start_readiness")
    main_pid = json.loads((result.run_dir / "meta.json").read_text())["target_pid"]
    assert readiness["pid"] == main_pid  # written for the training, by a process that is none of its children
    assert iter_s < readiness["pickle_s"] + readiness["size_s"], (iter_s, readiness["pickle_s"])
    assert result.report["loaders"][0]["start_readiness"].startswith("fork (the interpreter's default)")


def test_dlprobe_watch_waits_for_its_own_checks_before_the_report(tmp_path):
    script = tmp_path / "watched.py"
    script.write_text(
        "import json, sys\nsys.path.insert(0, sys.argv[1])\nimport dlprobe\n"
        "from readiness_not_waited import Records\nfrom torch.utils.data import DataLoader\n"
        "if __name__ == '__main__':\n"
        "    with dlprobe.watch(out=sys.argv[2]) as probe:\n"
        "        total = sum(int(b.sum()) for b in DataLoader(Records(1_000_000), batch_size=8, num_workers=2))\n"
        "    print(json.dumps(probe.report['loaders'][0].get('start_readiness')))\n"
    )
    proc = subprocess.run([sys.executable, str(script), str(SCRIPTS), str(tmp_path / "run")], cwd=tmp_path,
                          capture_output=True, text=True, timeout=180)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    readiness = json.loads(proc.stdout.strip().splitlines()[-1])
    assert readiness is not None and "forkserver/spawn: the dataset pickles" in readiness, proc.stdout
