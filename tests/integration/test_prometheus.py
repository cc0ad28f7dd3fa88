"""The Prometheus exposition of a real run, read while it runs: the textfile node_exporter collects, /metrics, and
the real Prometheus stack (Debian's prometheus and prometheus-node-exporter) scraping both."""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import psutil
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import SCRIPTS

MiB = 1 << 20
T = TypeVar("T")
WAIT_S = 240.0  # a generous bound on a busy machine: each wait ends as soon as the state it waits for is seen


def wait_for(what: str, probe: Callable[[], T | None], proc: subprocess.Popen[bytes] | None = None) -> T:
    """`probe()` once it is not None; fails when `proc` ended first or after WAIT_S."""
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        found = probe()
        if found is not None:
            return found
        if proc is not None and proc.poll() is not None:
            found = probe()
            if found is not None:
                return found
            pytest.fail(f"the run ended (exit {proc.returncode}) before {what}")
        time.sleep(0.1)
    pytest.fail(f"no {what} after {WAIT_S:g} s")


@contextmanager
def started_dlprobe(args: list[str], cwd: Path, env: dict[str, str] | None = None) -> Iterator[subprocess.Popen[bytes]]:
    """`python -m dlprobe ARGS` running; on the way out it is waited for (and killed only if the test failed)."""
    with (cwd / "dlprobe.out").open("wb") as out, (cwd / "dlprobe.err").open("wb") as err:
        proc = subprocess.Popen([sys.executable, "-m", "dlprobe", *args], cwd=cwd, stdout=out, stderr=err,
                                env={**os.environ, **(env or {})})  # fmt: skip
        try:
            yield proc
            proc.wait(timeout=300)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def prom_meta(run_dir: Path) -> dict[str, Any] | None:
    try:
        meta = json.loads((run_dir / "meta.json").read_text())
    except (OSError, ValueError):
        return None
    return meta if "prometheus" in meta else None


def samples(text: str, name: str) -> list[Any]:
    return [s for f in text_string_to_metric_families(text) for s in f.samples if s.name == name]


def read_textfile(path: Path) -> str | None:
    try:
        return path.read_text()
    except FileNotFoundError:
        return None


def scrape(address: str) -> str | None:
    try:
        with urllib.request.urlopen(f"http://{address}/metrics", timeout=10) as response:  # noqa: S310 - loopback
            return response.read().decode()
    except OSError:
        return None


def with_workers(text: str | None, n: int = 2, by: str = "worker") -> str | None:
    """The exposition once it has the USS of `n` workers, told apart by their `by` label."""
    if text is None:
        return None
    workers = {s.labels.get(by) for s in samples(text, "dlprobe_worker_uss_bytes")}
    return text if len(workers - {None}) >= n else None


def test_a_leaky_run_exposes_every_worker_while_it_runs(tmp_path: Path) -> None:
    collector = tmp_path / "collector"
    collector.mkdir()
    run_dir = tmp_path / "run"
    args = ["run", "--out", str(run_dir), "--prom-textfile", str(collector), "--prom-listen", "0",
            str(SCRIPTS / "leaky_list_dataset.py")]  # fmt: skip
    with started_dlprobe(args, tmp_path) as proc:
        meta = wait_for("meta.json", lambda: prom_meta(run_dir), proc)
        textfile, listen = Path(meta["prometheus"]["textfile"]), meta["prometheus"]["listen"]
        assert textfile.parent == collector and textfile.name == f"dlprobe_run_{proc.pid}.prom"
        host, port = listen.rsplit(":", 1)
        assert host == "127.0.0.1" and int(port) > 0  # port 0: the one the system chose, recorded
        text = wait_for("both workers' USS in the textfile", lambda: with_workers(read_textfile(textfile)), proc)
        scraped = wait_for("both workers' USS at /metrics", lambda: with_workers(scrape(listen)), proc)
        # Only the supervisor listens: nothing of the training's process tree holds the socket.
        target = psutil.Process(meta["target_pid"])
        tree = [target, *target.children(recursive=True)]
        for process in tree:
            try:
                assert not [c for c in process.net_connections("tcp") if c.laddr and c.laddr.port == int(port)]
            except psutil.NoSuchProcess:  # noqa: S112 - ended meanwhile: it holds nothing
                continue
        assert [c for c in psutil.Process(proc.pid).net_connections("tcp") if c.laddr.port == int(port)]
    assert proc.returncode == 0, (tmp_path / "dlprobe.err").read_text()
    for exposition in (text, scraped):
        uss = samples(exposition, "dlprobe_worker_uss_bytes")
        assert {s.labels["worker"] for s in uss} == {"0", "1"}
        assert all(s.labels["job"] == "run" and s.labels["loader"] == "0" and s.value > MiB for s in uss)
        assert {s.labels["start_method"] for s in uss} == {"fork"}
        assert samples(exposition, "dlprobe_shm_used_bytes") and samples(exposition, "dlprobe_worker_open_fds")
    # The workers' pids are the report's.
    report = json.loads((run_dir / "report.json").read_text())
    workers = {str(p["pid"]) for p in report["processes"] if p.get("role") == "worker"}
    assert {s.labels["pid"] for s in samples(text, "dlprobe_worker_uss_bytes")} <= workers
    assert not textfile.exists() and list(collector.iterdir()) == []  # removed with the run, no temporary left
    assert scrape(listen) is None  # closed with the run
    assert "problems" not in json.loads((run_dir / "result.json").read_text())
    assert f"Prometheus metrics at http://{listen}/metrics" in (tmp_path / "dlprobe.err").read_text()


def test_an_exporter_that_fails_mid_run_is_a_probe_problem_not_the_runs_end(tmp_path: Path) -> None:
    collector = tmp_path / "collector"
    collector.mkdir()
    run_dir = tmp_path / "run"
    args = ["run", "--out", str(run_dir), "--prom-textfile", str(collector), str(SCRIPTS / "leaky_list_dataset.py")]
    with started_dlprobe(args, tmp_path) as proc:
        meta = wait_for("meta.json", lambda: prom_meta(run_dir), proc)
        textfile = Path(meta["prometheus"]["textfile"])
        wait_for("the textfile", lambda: with_workers(read_textfile(textfile), n=1), proc)
        shutil.rmtree(collector)  # the collector's directory goes away under the running job
    assert proc.returncode == 0, (tmp_path / "dlprobe.err").read_text()
    assert "checksum" in (tmp_path / "dlprobe.out").read_text()  # the training ran to its end
    problems = json.loads((run_dir / "result.json").read_text())["problems"]
    assert [p["where"] for p in problems] == ["prometheus textfile"] and problems[0]["count"] >= 1
    report = json.loads((run_dir / "report.json").read_text())
    degraded = [f for f in report["findings"] if f["code"] == "probe-degraded"]
    assert any("prometheus textfile" in f["title"] for f in degraded)
    assert report["exit_code"] == 0 and report["findings"][0]["code"] != "probe-degraded"


def test_workers_that_exit_leave_the_exposition(tmp_path: Path) -> None:
    collector = tmp_path / "collector"
    collector.mkdir()
    args = ["run", "--quiet", "--out", str(tmp_path / "run"), "--prom-textfile", str(collector),
            str(SCRIPTS / "workers_each_epoch.py")]  # fmt: skip
    per_exposition: list[set[str]] = []
    with started_dlprobe(args, tmp_path) as proc:
        while proc.poll() is None:
            for path in collector.glob("*.prom"):
                text = read_textfile(path)
                if text:
                    per_exposition.append({s.labels["pid"] for s in samples(text, "dlprobe_worker_uss_bytes")})
            time.sleep(0.1)
    assert proc.returncode == 0, (tmp_path / "dlprobe.err").read_text()
    seen = set().union(*per_exposition)
    assert len(seen) >= 4, per_exposition  # the workers of at least two epochs were exported, in turn
    assert max(len(pids) for pids in per_exposition) <= 2  # never more than the loader's 2 at once


def test_check_on_a_torchrun_job_exports_every_ranks_workers(tmp_path: Path) -> None:
    from tests.integration.test_job_report import torchrun_command

    listen = f"127.0.0.1:{free_port()}"
    command = [*torchrun_command(), "--nproc-per-node", "2", "--master-addr", "127.0.0.1", "--master-port",
               str(free_port()), str(SCRIPTS / "ddp_leaky_list.py")]  # fmt: skip
    args = ["check", "--quiet", "--out", str(tmp_path / "run"), "--prom-listen", listen, "--", *command]
    with started_dlprobe(args, tmp_path) as proc:
        text = wait_for("4 workers' USS at /metrics", lambda: with_workers(scrape(listen), n=4, by="pid"), proc)
    assert proc.returncode in (0, 1), (tmp_path / "dlprobe.err").read_text()  # the check's verdict is its own
    uss = samples(text, "dlprobe_worker_uss_bytes")
    by_rank = {(s.labels["rank"], s.labels["local_rank"]): set() for s in uss}
    for s in uss:
        by_rank[(s.labels["rank"], s.labels["local_rank"])].add(s.labels["worker"])
    assert by_rank == {("0", "0"): {"0", "1"}, ("1", "1"): {"0", "1"}}
    mains = {s.labels["rank"]: s.labels["pid"] for s in samples(text, "dlprobe_main_uss_bytes")}
    assert set(mains) == {"0", "1"}  # each rank's own process, never torchrun's
    assert {s.labels["rank"] for s in samples(text, "dlprobe_loader_batches_total")} <= {"0", "1"}


# --- the real Prometheus stack -----------------------------------------------------------------------------------

PROMETHEUS = shutil.which("prometheus")
NODE_EXPORTER = shutil.which("prometheus-node-exporter") or shutil.which("node_exporter")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def http_json(url: str) -> Any:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:  # noqa: S310 - loopback URLs of the test's servers
            return json.loads(response.read())
    except (OSError, ValueError):
        return None


@contextmanager
def server(command: list[str], log: Path) -> Iterator[subprocess.Popen[bytes]]:
    with log.open("wb") as out:
        proc = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
        try:
            yield proc
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def ready(url: str, proc: subprocess.Popen[bytes], log: Path) -> None:
    def answered() -> bool | None:
        if proc.poll() is not None:
            pytest.fail(f"{proc.args[0]} exited {proc.returncode}: {log.read_text()[-2000:]}")
        try:
            with urllib.request.urlopen(url, timeout=5) as response:  # noqa: S310 - loopback
                return True if response.status == 200 else None
        except OSError:
            return None

    wait_for(url, answered)


@pytest.mark.slow
def test_prometheus_scrapes_a_workers_rising_uss_from_the_textfile_and_metrics(tmp_path: Path) -> None:
    if PROMETHEUS is None or NODE_EXPORTER is None:
        pytest.skip("needs Debian's prometheus and prometheus-node-exporter (apt-get install prometheus "
                    "prometheus-node-exporter): not installed here")  # fmt: skip
    collector = tmp_path / "collector"
    collector.mkdir()
    node_port, prom_port, dlprobe_port = free_port(), free_port(), free_port()
    job = f"prom-test-{uuid.uuid4().hex[:8]}"
    config = tmp_path / "prometheus.yml"
    # honor_labels: the exposition's own `job` label is kept (else Prometheus renames it exported_job)
    config.write_text(
        "global: {scrape_interval: 1s, scrape_timeout: 1s, evaluation_interval: 1s}\n"
        "scrape_configs:\n"
        f"  - {{job_name: node, honor_labels: true, static_configs: [{{targets: ['127.0.0.1:{node_port}']}}]}}\n"
        f"  - {{job_name: dlprobe, honor_labels: true, static_configs: [{{targets: ['127.0.0.1:{dlprobe_port}']}}]}}\n"
    )
    node_log, prom_log = tmp_path / "node_exporter.log", tmp_path / "prometheus.log"
    node_command = [NODE_EXPORTER, f"--web.listen-address=127.0.0.1:{node_port}", "--collector.disable-defaults",
                    "--collector.textfile", f"--collector.textfile.directory={collector}"]  # fmt: skip
    prom_command = [PROMETHEUS, f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                    f"--web.listen-address=127.0.0.1:{prom_port}"]  # fmt: skip
    api = f"http://127.0.0.1:{prom_port}/api/v1"
    with server(node_command, node_log) as node, server(prom_command, prom_log) as prom:
        ready(f"http://127.0.0.1:{node_port}/metrics", node, node_log)
        ready(f"http://127.0.0.1:{prom_port}/-/ready", prom, prom_log)
        run_dir = tmp_path / "run"
        args = ["run", "--quiet", "--out", str(run_dir), "--prom-textfile", str(collector),
                "--prom-listen", f"127.0.0.1:{dlprobe_port}", str(SCRIPTS / "leaky_list_dataset.py")]  # fmt: skip
        with started_dlprobe(args, tmp_path, env={"DLPROBE_JOB": job}) as proc:
            pass
        assert proc.returncode == 0, (tmp_path / "dlprobe.err").read_text()
        query = urllib.parse.quote(f'dlprobe_worker_uss_bytes{{job="{job}",worker="0"}}[10m]')
        answer = http_json(f"{api}/query?query={query}")
    assert answer is not None and answer["status"] == "success", answer
    report = json.loads((run_dir / "report.json").read_text())
    [start_uss] = [p["uss"]["start"] for p in report["processes"] if p["role"] == "worker" and p["worker_id"] == 0]
    by_source = {series["metric"]["instance"]: series for series in answer["data"]["result"]}
    # one series per way in: node_exporter's textfile and dlprobe's own /metrics
    assert set(by_source) == {f"127.0.0.1:{node_port}", f"127.0.0.1:{dlprobe_port}"}, answer
    for series in by_source.values():
        labels = series["metric"]
        assert labels["loader"] == "0" and labels["start_method"] == "fork" and labels["pid"].isdigit()
        values = [float(v) for _t, v in series["values"]]
        # the copy-on-write growth, seen: above what the worker held when it was first read (on a busy machine the
        # first scrape can come after the growth, and a starved Prometheus scraped one way in only once in a
        # clean-clone CI run, so the scraped series alone need not rise nor hold two points)
        assert values and max(values) > start_uss + 10 * MiB, (values, start_uss)


PROMTOOL = shutil.which("promtool")


def test_the_alert_rules_in_docs_fleet_are_valid_for_prometheus(tmp_path: Path) -> None:
    if PROMTOOL is None:
        pytest.skip("needs promtool (Debian's prometheus package): not installed here")
    page = (Path(__file__).resolve().parents[2] / "docs" / "fleet.md").read_text()
    blocks = re.findall(r"```yaml\n(groups:.*?)```", page, re.S)
    assert len(blocks) == 1, "docs/fleet.md has one rules file"
    rules = tmp_path / "rules.yml"
    rules.write_text(blocks[0])
    proc = subprocess.run([PROMTOOL, "check", "rules", str(rules)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "SUCCESS: 5 rules found" in proc.stdout + proc.stderr
