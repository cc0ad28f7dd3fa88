"""Shared test helpers: run `python -m dlprobe` for real, in a subprocess, on scripts in tests/scripts/."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import dlprobe

SCRIPTS = Path(__file__).parent / "scripts"
# Every real run starts Pythons that import dlprobe (the CLI, the target's hooks, the plot process). Where the shell or
# CI image sets PYTHONDONTWRITEBYTECODE, each of them compiles dlprobe's source again: about 0.5 s of CPU per run,
# hundreds of runs. The processes the tests start may cache it (__pycache__ is ignored by git).
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
# The installed package, by its real location: never a substring such as "dlprobe/", which a checkout, its .venv or
# a user's own project (~/dlprobe/train.py) may hold in its path too.
PACKAGE_DIRS = {os.path.join(d, "") for d in (os.path.dirname(os.path.abspath(dlprobe.__file__)),
                                              os.path.dirname(os.path.realpath(dlprobe.__file__)))}  # fmt: skip
_FRAME_FILE = re.compile(r'File "([^"]+)", line \d+')


def traceback_files(text: str) -> list[str]:
    """The files of every traceback frame printed in `text`, in order."""
    return _FRAME_FILE.findall(text)


def assert_no_probe_frames(text: str) -> None:
    """No traceback frame in `text` is dlprobe's own code, nor does any other line name a file of the package."""
    ours = [f for f in traceback_files(text) if os.path.realpath(f).startswith(tuple(PACKAGE_DIRS))]
    assert ours == [] and not any(d in text for d in PACKAGE_DIRS), text


class DlprobeResult:
    def __init__(self, proc: subprocess.CompletedProcess[str], run_dir: Path) -> None:
        self.proc = proc
        self.run_dir = run_dir
        self.returncode = proc.returncode
        self.stdout = proc.stdout
        self.stderr = proc.stderr

    @property
    def report(self) -> dict[str, Any]:
        return json.loads((self.run_dir / "report.json").read_text())

    def findings(self, code: str) -> list[dict[str, Any]]:
        return [f for f in self.report["findings"] if f["code"] == code]


def run_dlprobe(args: list[str], cwd: Path, timeout: float = 180, env: dict[str, str] | None = None,
                ) -> subprocess.CompletedProcess[str]:  # fmt: skip
    full_env = {**os.environ, "COLUMNS": "120", **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "dlprobe", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=full_env,
    )


def background_plotters(under: Path) -> list[Any]:
    """The detached `python -m dlprobe.commands.plot_process RUN_DIR DATA_FILE` processes
    (render/plot.py:plot_in_background) drawing a run under `under`."""
    import psutil

    found = []
    for proc in psutil.process_iter(["cmdline"]):
        cmd = proc.info["cmdline"] or []
        if "dlprobe.commands.plot_process" in cmd and any(arg.startswith(str(under)) for arg in cmd):
            found.append(proc)
    return found


@pytest.fixture(autouse=True)
def no_plotter_left(tmp_path: Path) -> Iterator[None]:
    """`dlprobe run` leaves its plot to a detached process; a test ends only when the ones it started are done,
    so no process outlives the test that caused it."""
    yield
    if next(tmp_path.iterdir(), None) is None:
        return  # nothing under tmp_path, so no run of its to draw: skip reading every process's command line
    _gone, alive = __import__("psutil").wait_procs(background_plotters(tmp_path), timeout=60)
    assert alive == [], f"plot processes still running after 60 s: {alive}"


@pytest.fixture(autouse=True)
def reports_fit_the_schema(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[None]:
    """Every report.json a test writes (dlprobe run, report, check, in-process outputs) fits report.schema.json, names
    no evidence key its code's TypedDict does not (tests/schema_check.undeclared_evidence), and
    unless the test damages its run directory on purpose (@pytest.mark.damaged), the load-time checks rejected
    nothing of it: a real record they reject is a check that is wrong, and a report that quietly lost data."""
    yield
    from tests.schema_check import problems, undeclared_evidence

    damaged = request.node.get_closest_marker("damaged") is not None
    for path in tmp_path.rglob("report.json"):
        try:
            report = json.loads(path.read_text())
        except (OSError, ValueError):  # noqa: S112 - a test that damages its own report checks that itself
            continue
        found = problems(report)
        assert not found, f"{path} does not fit report.schema.json: {found[:5]}"
        extra = undeclared_evidence(report)
        assert not extra, f"{path}: evidence keys dlprobe/analysis/evidence/ does not name: {extra[:5]}"
        assert damaged or not report.get("read_problems"), f"{path}: {report['read_problems']}"


def wait_for_plot(run_dir: Path, timeout: float = 60) -> Path:
    """memory.png of a `dlprobe run`, once its background plotter has written it (or said why it could not)."""
    import psutil

    psutil.wait_procs(background_plotters(run_dir), timeout=timeout)
    return run_dir / "memory.png"


@pytest.fixture
def probe(tmp_path: Path):
    """probe('script.py', *script_args, options=[...]) -> DlprobeResult of `dlprobe run`."""

    def _probe(script: str, *script_args: str, options: list[str] | None = None, **kw: Any) -> DlprobeResult:
        run_dir = tmp_path / "run"
        args = ["run", "--out", str(run_dir), *(options or []), str(SCRIPTS / script), *script_args]
        return DlprobeResult(run_dlprobe(args, tmp_path, **kw), run_dir)

    return _probe


def shared_run(tmp_path_factory: pytest.TempPathFactory, name: str, *target: str, options: tuple[str, ...] = (),
               timeout: float = 300) -> DlprobeResult:  # fmt: skip
    """One real `dlprobe run [options] TARGET...` into a run directory of its own, for a fixture wider than one test
    (module or session) that several tests assert on."""
    tmp = tmp_path_factory.mktemp(name)
    run_dir = tmp / "run"
    return checked_shared_run(
        DlprobeResult(run_dlprobe(["run", "--out", str(run_dir), *options, *target], tmp, timeout=timeout), run_dir)
    )


def checked_shared_run(result: DlprobeResult) -> DlprobeResult:
    """The checks the autouse fixtures make on a test's tmp_path, made on a shared run (which is not under one): its
    plotter is done, and its report fits the schema with nothing rejected."""
    from tests.schema_check import problems, undeclared_evidence

    _gone, alive = __import__("psutil").wait_procs(background_plotters(result.run_dir.parent), timeout=60)
    assert alive == [], f"plot processes still running after 60 s: {alive}"
    if (result.run_dir / "report.json").exists():
        assert not problems(result.report), problems(result.report)[:5]
        assert not undeclared_evidence(result.report), undeclared_evidence(result.report)[:5]
        assert not result.report.get("read_problems"), result.report["read_problems"]
    return result


@pytest.fixture(scope="session")
def leaky_list_run(tmp_path_factory: pytest.TempPathFactory) -> DlprobeResult:
    """`dlprobe run leaky_list_dataset.py`: 2 forked workers copying a list of 600,000 dicts. One run for the whole
    session: test_run_memory (cow-growth), test_trace (its tracks), test_fixes (the naive twin) and test_verdict_first
    (the report opens with its verdict) read the same."""
    return shared_run(tmp_path_factory, "leaky_list", str(SCRIPTS / "leaky_list_dataset.py"))


@pytest.fixture(scope="session")
def healthy_run(tmp_path_factory: pytest.TempPathFactory) -> DlprobeResult:
    """`dlprobe run healthy_loader.py`: 2 fork workers, two epochs, nothing wrong. One run for the session:
    test_run_advice (no finding), test_start_readiness (its start-up figures) and test_thread_workers (process
    workers, no thread) read it."""
    return shared_run(tmp_path_factory, "healthy", str(SCRIPTS / "healthy_loader.py"))


@pytest.fixture(scope="session")
def worker_hang_run(tmp_path_factory: pytest.TempPathFactory) -> DlprobeResult:
    """`dlprobe run --quiet --hang-timeout 3 --on-hang stop faulty_worker.py hang`: worker 0 blocks reading a pipe on
    index 13 and dlprobe stops the run. One run for the session: test_run_failures (the worker-hang finding) and
    test_trace (the hang on the trace) read it."""
    options = ("--quiet", "--hang-timeout", "3", "--on-hang", "stop")
    return shared_run(tmp_path_factory, "worker_hang", str(SCRIPTS / "faulty_worker.py"), "hang", options=options)


@pytest.fixture(scope="session")
def ddp_leaky_list_job(tmp_path_factory: pytest.TempPathFactory) -> DlprobeResult:
    """`dlprobe run -- torchrun --nproc-per-node 2 ddp_leaky_list.py`: the leaky list on 2 ranks x 2 workers. One run
    for the session: test_job_report (the job's cow-growth) and test_trace (a track per rank and worker) read it."""
    from tests.integration.test_job_report import run_job

    return checked_shared_run(run_job(tmp_path_factory.mktemp("ddp_leaky_list"), "ddp_leaky_list.py"))


def dead_pid() -> int:
    """The pid of a process that has exited and been reaped: what a killed builder or worker leaves behind."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


_TORCH_SHM = re.compile(r"^torch_(\d+)_")


@contextlib.contextmanager
def orphan_torch_shm_removed() -> Iterator[None]:
    """Remove the /dev/shm segments that torch processes which ended during the block left behind.

    torch unlinks a batch's segment once the receiver has it; a process SIGKILLed in between leaves the file, in
    plain python as under the probe (Lightning's observer SIGKILLs rank 0 after a rank fails). The name carries
    the creating pid, so only segments of processes that are gone and were not there before are removed."""
    before = set(os.listdir("/dev/shm"))
    try:
        yield
    finally:
        for name in set(os.listdir("/dev/shm")) - before:
            match = _TORCH_SHM.match(name)
            if match and not os.path.exists(f"/proc/{match[1]}"):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(os.path.join("/dev/shm", name))


def can_mount_small_shm() -> bool:
    """Whether this machine lets a test mount its own small /dev/shm (root or user namespaces, and unshare)."""
    if shutil.which("unshare") is None:
        return False
    probe_cmd = ["unshare", "-m", "sh", "-c", "mount -t tmpfs -o size=1M tmpfs /dev/shm"]
    return subprocess.run(probe_cmd, capture_output=True).returncode == 0


needs_small_shm = pytest.mark.skipif(
    not can_mount_small_shm(), reason="needs root (or user namespaces) to mount a small /dev/shm"
)


def run_with_small_shm(size: str, command: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    """Run a shell command in a private mount namespace whose /dev/shm is a tmpfs of `size` (e.g. "8M")."""
    script = f"mount -t tmpfs -o size={size} tmpfs /dev/shm && {command}"
    return subprocess.run(["unshare", "-m", "sh", "-c", script], capture_output=True, text=True, timeout=timeout)


def names_not_in_schema(run_dir: Path) -> list[str]:
    """Entries of a real run directory that dlprobe/rundir/schema.py does not name (numbers in names are
    matched by the schema's name functions)."""
    import re

    from dlprobe.rundir import schema

    def pattern(name: str) -> str:
        return re.sub(r"\d+", "0", name)

    inside = {
        schema.HANGS_DIR: {schema.hang_record_name(0)},
        schema.STACKS_DIR: {schema.hang_stack_name(0, 0), schema.FAULTHANDLER_FILE},
        schema.INFLIGHT_DIR: {schema.inflight_slot_name(0)},
        schema.FAULTS_DIR: {schema.fault_record_name(0)},
    }
    unnamed = []
    for entry in sorted(run_dir.iterdir()):
        if entry.name not in schema.RUN_DIR_NAMES:
            unnamed.append(entry.name)
        elif entry.is_dir():
            allowed = inside.get(entry.name, set())
            unnamed += [f"{entry.name}/{p.name}" for p in sorted(entry.iterdir()) if pattern(p.name) not in allowed]
    return unnamed


@contextlib.contextmanager
def memory_cgroup(limit: int) -> Iterator[Path]:
    """A fresh memory cgroup (v1 or v2) with `limit` bytes and no swap; removed afterwards, whatever happens."""
    if os.geteuid() != 0:
        pytest.skip("needs root: making a memory cgroup")
    name = f"dlprobe-test-{uuid.uuid4().hex[:8]}"
    v2 = Path("/sys/fs/cgroup/cgroup.controllers")
    if v2.exists() and "memory" in v2.read_text().split():
        path, files = Path("/sys/fs/cgroup") / name, [("memory.max", limit), ("memory.swap.max", 0)]
    elif Path("/sys/fs/cgroup/memory").is_dir():
        path = Path("/sys/fs/cgroup/memory") / name
        files = [("memory.limit_in_bytes", limit), ("memory.memsw.limit_in_bytes", limit)]
    else:
        pytest.skip("needs a memory cgroup controller, and there is none here")
    try:
        path.mkdir()
    except OSError as exc:
        pytest.skip(f"needs root and a writable cgroup tree: cannot create a memory cgroup: {exc}")
    try:
        for filename, value in files:
            with contextlib.suppress(OSError):  # memsw/swap files are missing where swap accounting is off
                (path / filename).write_text(str(value))
        yield path
    finally:
        for _ in range(50):
            with contextlib.suppress(OSError, ValueError):
                for pid in (path / "cgroup.procs").read_text().split():
                    os.kill(int(pid), signal.SIGKILL)  # only the scenario's own processes live in there
            try:
                path.rmdir()
                break
            except OSError:
                time.sleep(0.1)
