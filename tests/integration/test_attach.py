"""`dlprobe attach PID` on real jobs started as plain `python` (no dlprobe): a leaking one, a hung one, bad pids."""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import SCRIPTS, dead_pid, memory_cgroup, run_dlprobe

WAIT_S = 120.0


def _children(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(c) for c in f.read().split()]
    except OSError:
        return []


def _read(path: str) -> str:
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return ""


def _wait_for(what: str, check: Callable[[], Any]) -> Any:
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def _workers(pid: int) -> list[int]:
    return sorted(c for c in _children(pid) if _read(f"/proc/{c}/comm") == "pt_data_worker")


@pytest.fixture
def job(tmp_path: Path) -> Iterator[Callable[..., subprocess.Popen[str]]]:
    """job('script.py', *args): the script started as a plain `python` process, killed at the end if still running."""
    started: list[subprocess.Popen[str]] = []

    def _start(script: str, *args: str) -> subprocess.Popen[str]:
        proc = subprocess.Popen(
            [sys.executable, str(SCRIPTS / script), *args],
            cwd=tmp_path,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        started.append(proc)
        return proc

    yield _start
    for proc in started:
        if proc.poll() is None:
            for pid in [proc.pid, *_children(proc.pid)]:
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:  # noqa: S110 - already gone
                    pass
            proc.communicate(timeout=30)


def _first_line(proc: subprocess.Popen[str]) -> str:
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], WAIT_S)
    assert ready, "the job printed nothing"
    return proc.stdout.readline()


def _attach(tmp_path: Path, pid: int, *options: str) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    out = tmp_path / "out.json"
    result = run_dlprobe(["attach", str(pid), "--out", str(tmp_path / "run"), "--json", str(out), *options], tmp_path)
    report = json.loads(out.read_text()) if out.exists() else {}
    return result, report


def _findings(report: dict[str, Any], code: str) -> list[dict[str, Any]]:
    return [f for f in report.get("findings") or [] if f["code"] == code]


def test_attach_names_growing_workers_and_kind_and_leaves_the_job_alone(tmp_path: Path, job) -> None:
    stop = tmp_path / "stop"
    proc = job("workers_keep_allocating.py", str(stop))
    assert _first_line(proc) == "first batch\n"
    workers = _wait_for("2 DataLoader workers", lambda: len(_workers(proc.pid)) == 2 and _workers(proc.pid))

    result, report = _attach(tmp_path, proc.pid, "--duration", "6s")
    stop.touch()
    out, err = proc.communicate(timeout=WAIT_S)

    print(result.stderr)
    assert result.returncode == 0, result.stderr
    # the job went on and ended as it does without dlprobe: same exit code, same output, nothing on stderr from us
    assert proc.returncode == 0, err
    assert out == "stopped after several batches\n"
    assert "dlprobe" not in err and "Traceback" not in err
    assert report["attached"]["pid"] == proc.pid
    meta = json.loads((tmp_path / "run" / "meta.json").read_text())
    assert meta["attached"] is True and meta["attached_pid"] == proc.pid
    roles = {p["pid"]: p["role"] for p in report["processes"]}
    assert roles[proc.pid] == "main" and all(roles[w] == "worker" for w in workers)

    (growth,) = _findings(report, "attached-memory-growth")
    growing = {row["pid"]: row for row in growth["evidence"]["growing"]}
    assert set(workers) <= set(growing), growth
    assert all(growing[w]["kind"] == "new allocations" for w in workers)
    assert "at this rate the job reaches" in growth["title"] and "in about" in growth["title"]
    assert growth["evidence"]["eta_s"] > 0
    # the memory analyzers of `dlprobe run` read the attached run too: same kind of growth
    (cow,) = _findings(report, "cow-growth")
    assert cow["evidence"]["variant"] == "allocating"
    (outside,) = _findings(report, "attached-outside-view")
    assert f"dlprobe run {SCRIPTS / 'workers_keep_allocating.py'} {stop}" in outside["title"]
    assert not {"attached-worker-stuck", "attached-loop-stuck"} & {f["code"] for f in report["findings"]}
    said = " ".join(result.stderr.split())  # the terminal wraps a title at any space
    assert "Attached from outside" in said and "at this rate the job reaches" in said


def _attach_to_allocating_job_in_cgroup(
    tmp_path: Path, limit: int, duration: str
) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    """workers_keep_allocating.py started as plain python in a memory cgroup of `limit` bytes, attached to for
    `duration` once its 2 workers exist, then told to stop."""
    stop = tmp_path / "stop"
    with memory_cgroup(limit) as group:
        script = SCRIPTS / "workers_keep_allocating.py"
        command = f"echo $$ > {group}/cgroup.procs && exec {sys.executable} {script} {stop}"
        proc = subprocess.Popen(["sh", "-c", command], cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True)  # fmt: skip
        try:
            assert _first_line(proc) == "first batch\n"
            _wait_for("2 DataLoader workers", lambda: len(_workers(proc.pid)) == 2)
            result, report = _attach(tmp_path, proc.pid, "--duration", duration)
        finally:
            stop.touch()
            proc.communicate(timeout=WAIT_S)
    print(result.stderr)
    return result, report


def test_growth_is_projected_to_the_job_cgroup_limit(tmp_path: Path) -> None:
    limit = 3 * 1024**3
    result, report = _attach_to_allocating_job_in_cgroup(tmp_path, limit, "5s")
    assert result.returncode == 0, result.stderr
    (growth,) = _findings(report, "attached-memory-growth")
    ev = growth["evidence"]
    assert ev["limit"] == "the cgroup memory limit" and ev["limit_bytes"] == limit
    assert 0 < ev["headroom_bytes"] < limit
    assert abs(ev["eta_s"] - ev["headroom_bytes"] / ev["bytes_per_s_total"]) <= 1
    assert "at this rate the job reaches the cgroup memory limit in about" in growth["title"]


def test_a_worker_the_oom_killer_takes_while_watched_is_named(tmp_path: Path) -> None:
    # 2 workers each allocating ~16 MiB/s in a 700 MiB cgroup: the kernel kills one within seconds of attaching
    result, report = _attach_to_allocating_job_in_cgroup(tmp_path, 700 * 1024**2, "60s")
    assert result.returncode == 0, result.stderr
    assert report["attached"]["job_ended"] is True  # the window ended with the job, long before 60 s
    (gone,) = _findings(report, "attached-workers-gone")
    assert gone["severity"] == "error" and gone["evidence"]["gone"][0]["oom_killed"] is True
    assert "went first (killed by the kernel's OOM killer)" in gone["title"]


def test_attach_tells_copy_on_write_from_new_allocations(tmp_path: Path, job) -> None:
    stop = tmp_path / "stop"
    proc = job("workers_copy_parent_records.py", str(stop))
    assert _first_line(proc) == "first batch\n"
    workers = _wait_for("2 DataLoader workers", lambda: len(_workers(proc.pid)) == 2 and _workers(proc.pid))

    result, report = _attach(tmp_path, proc.pid, "--duration", "8s")
    stop.touch()
    out, err = proc.communicate(timeout=WAIT_S)

    print(result.stderr)
    assert result.returncode == 0, result.stderr
    assert proc.returncode == 0 and out == "stopped after several batches\n", err
    (growth,) = _findings(report, "attached-memory-growth")
    growing = {row["pid"]: row for row in growth["evidence"]["growing"]}
    assert set(workers) <= set(growing), growth
    assert all(growing[w]["kind"] == "copy-on-write" for w in workers)
    assert all(growing[w]["copied_bytes"] > 10 * growing[w]["new_anonymous_bytes"] for w in workers)
    assert "copy-on-write" in growth["title"] and "reference count" in growth["fix"]


def _blocked_worker(pid: int) -> int | None:
    return next((w for w in _workers(pid) if "pipe" in _read(f"/proc/{w}/wchan")), None)


def test_attach_to_a_hung_job_names_the_stuck_worker_and_its_frame(tmp_path: Path, job) -> None:
    proc = job("faulty_worker.py", "hang")
    stuck = _wait_for("a worker blocked reading a pipe", lambda: _blocked_worker(proc.pid))
    result, report = _attach(tmp_path, proc.pid, "--duration", "3s")

    print(result.stderr)
    assert result.returncode == 0, result.stderr
    (finding,) = _findings(report, "attached-worker-stuck")
    assert finding["evidence"]["pid"] == stuck
    assert finding["evidence"]["cause"] == "blocked-read"
    assert finding["evidence"]["stuck_frame"].startswith("FaultyDataset.misbehave (faulty_worker.py:")
    assert "os.read(read_end, 1)" in finding["evidence"]["stuck_frame"]
    assert f"Stuck: worker 0 (pid {stuck})" in finding["title"]
    assert proc.poll() is None  # still hung: attach sent it nothing


def test_attach_to_a_worker_watches_its_training_process(tmp_path: Path, job) -> None:
    proc = job("faulty_worker.py", "hang")
    stuck = _wait_for("a worker blocked reading a pipe", lambda: _blocked_worker(proc.pid))
    result, report = _attach(tmp_path, stuck, "--duration", "1s")

    assert result.returncode == 0, result.stderr
    assert f"pid {stuck} is a DataLoader worker; attached to its training process, pid {proc.pid}" in result.stderr
    assert report["attached"]["pid"] == stuck and report["attached"]["root_pid"] == proc.pid


def test_ctrl_c_ends_the_attach_with_a_report_not_the_job(tmp_path: Path, job) -> None:
    proc = job("faulty_worker.py", "hang")
    _wait_for("a worker blocked reading a pipe", lambda: _blocked_worker(proc.pid))
    attach = subprocess.Popen(
        [sys.executable, "-m", "dlprobe", "attach", str(proc.pid), "--duration", "10m", "--out", str(tmp_path / "run")],
        cwd=tmp_path,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "COLUMNS": "120"},
    )
    assert attach.stderr is not None
    line = _wait_for("attach to start watching", lambda: attach.stderr.readline())  # type: ignore[union-attr]
    assert "watching 1 training process(es) and 2 DataLoader worker(s)" in line
    attach.send_signal(signal.SIGINT)
    _, err = attach.communicate(timeout=WAIT_S)

    assert attach.returncode == 0, err
    assert "interrupted: writing the report" in err
    record = json.loads((tmp_path / "run" / "attach.json").read_text())
    assert record["interrupted"] is True
    assert (tmp_path / "run" / "report.json").exists()
    assert proc.poll() is None and len(_workers(proc.pid)) == 2  # the job and its workers still run


def test_attach_to_a_pid_that_does_not_exist(tmp_path: Path) -> None:
    pid = dead_pid()
    result = run_dlprobe(["attach", str(pid), "--duration", "1s"], tmp_path)
    assert result.returncode == 2
    assert f"error: no process with pid {pid}" in result.stderr
    assert "hint:" in result.stderr
    assert not (tmp_path / "dlprobe-runs").exists()


def test_attach_to_a_process_that_is_not_python(tmp_path: Path) -> None:
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        result = run_dlprobe(["attach", str(sleeper.pid), "--duration", "1s"], tmp_path)
    finally:
        sleeper.kill()
        sleeper.wait()
    assert result.returncode == 2
    assert f"error: pid {sleeper.pid} (sleep 60) is not a Python process" in result.stderr
    assert "hint:" in result.stderr


def test_attach_to_python_without_torch(tmp_path: Path) -> None:
    plain = subprocess.Popen([sys.executable, "-c", "import time; print('up', flush=True); time.sleep(60)"],
                             stdout=subprocess.PIPE, text=True)  # fmt: skip
    try:
        assert _first_line(plain) == "up\n"
        result = run_dlprobe(["attach", str(plain.pid), "--duration", "1s"], tmp_path)
    finally:
        plain.kill()
        plain.communicate()
    assert result.returncode == 2
    assert "has no process that has loaded torch" in result.stderr


def _rank_pids(agent: int) -> dict[int, int]:
    """rank -> pid of the torchrun agent's children, from their environment."""
    ranks = {}
    for pid in _children(agent):
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                env = dict(item.split(b"=", 1) for item in f.read().split(b"\0") if b"=" in item)
        except OSError:  # noqa: S112 - exited meanwhile
            continue
        if b"RANK" in env:
            ranks[int(env[b"RANK"])] = pid
    return ranks


def _rank_1_stuck_rank_0_waiting(agent: int) -> bool:
    ranks = _rank_pids(agent)
    return len(ranks) == 2 and not _workers(ranks[0]) and len(_workers(ranks[1])) == 2


def test_attach_to_torchrun_agent_covers_every_rank(tmp_path: Path) -> None:
    from tests.integration.test_launchers import DDP, torchrun

    agent = subprocess.Popen(torchrun(DDP, "--block", "1:5"), cwd=tmp_path, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        _wait_for(
            "rank 1 stuck in its first batch, rank 0 done with its epoch",
            lambda: _rank_1_stuck_rank_0_waiting(agent.pid),
        )
        ranks = _rank_pids(agent.pid)
        result, report = _attach(tmp_path, agent.pid, "--duration", "3s")
    finally:
        for pid in [agent.pid, *_children(agent.pid), *[w for r in _children(agent.pid) for w in _children(r)]]:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:  # noqa: S110 - already gone
                pass
        agent.communicate(timeout=60)

    print(result.stderr)
    assert result.returncode == 0, result.stderr
    assert [r["rank"] for r in report["ranks"]] == [0, 1]
    (worker,) = _findings(report, "attached-worker-stuck")
    assert worker["title"].startswith("Rank 1: Stuck: worker")  # the rank whose worker is stuck in the user's code
    assert worker["evidence"]["stuck_frame"].startswith("Squares.__getitem__ (ddp_torchrun.py:")
    rank_1_workers = {p["pid"] for p in report["processes"] if p["role"] == "worker" and p.get("rank") == "rank 1"}
    assert worker["evidence"]["pid"] in rank_1_workers and len(rank_1_workers) == 2
    assert {p["pid"] for p in report["processes"] if p["role"] == "main"} == set(ranks.values())
    (loop,) = _findings(report, "attached-loop-stuck")
    assert loop["severity"] == "warning" and "dist.all_reduce(total)" in loop["evidence"]["stuck_frame"]
    (outside,) = _findings(report, "attached-outside-view")  # one for the job: the tree seen from its launcher
    assert outside["title"].startswith("Attached from outside for 3 s: 2 training process(es), 2 worker(s)")


def test_ptrace_refused_says_stacks_are_missing_and_keeps_the_memory_view(tmp_path: Path, job) -> None:
    # A stand-in for the kernel's refusal (kernel.yama.ptrace_scope, a container without CAP_SYS_PTRACE: neither can
    # be set up for a test run as root here): a py-spy that answers as py-spy does when ptrace is refused.
    fake = tmp_path / "py-spy"
    fake.write_text(
        '#!/bin/sh\necho "Permission Denied: Try running again with elevated permissions by going '
        '\'sudo env \\"PATH=\\$PATH\\" !!\'" >&2\nexit 1\n'
    )
    fake.chmod(0o755)
    proc = job("faulty_worker.py", "hang")
    blocked = _wait_for("a worker blocked reading a pipe", lambda: _blocked_worker(proc.pid))
    out = tmp_path / "out.json"
    result = run_dlprobe(
        ["attach", str(proc.pid), "--duration", "2s", "--out", str(tmp_path / "run"), "--json", str(out)],
        tmp_path,
        env={"DLPROBE_PY_SPY": str(fake)},
    )
    report = json.loads(out.read_text())

    print(result.stderr)
    assert result.returncode == 0, result.stderr
    (missing,) = _findings(report, "attached-no-stacks")
    assert missing["title"].startswith("No stacks: the kernel refused py-spy ptrace access (Permission Denied")
    assert "SYS_PTRACE" in missing["fix"] and "ptrace_scope" in missing["fix"] and "dlprobe run" in missing["fix"]
    # the memory view does not need ptrace: every process has its USS
    assert all(p["uss"]["peak"] for p in report["processes"])
    # no stack, so no frame: still said stuck, from CPU time, and which worker from the kernel's state
    (stuck,) = _findings(report, "attached-worker-stuck")
    assert stuck["title"] == f"Stuck: worker 0 (pid {blocked}) used no CPU for the 2 s watched: blocked-read"
    assert "Stacks are missing" in stuck["detail"]


def test_a_worker_killed_while_watched_is_named_first(tmp_path: Path, job) -> None:
    stop = tmp_path / "stop"
    proc = job("workers_keep_allocating.py", str(stop))
    assert _first_line(proc) == "first batch\n"
    workers = _wait_for("2 DataLoader workers", lambda: len(_workers(proc.pid)) == 2 and _workers(proc.pid))
    attach = subprocess.Popen(
        [sys.executable, "-m", "dlprobe", "attach", str(proc.pid), "--duration", "8s", "--out", str(tmp_path / "run"),
         "--json", str(tmp_path / "out.json")],
        cwd=tmp_path, stderr=subprocess.PIPE, text=True, env={**os.environ, "COLUMNS": "120"},
    )  # fmt: skip
    assert attach.stderr is not None
    assert "watching" in _wait_for("attach to start watching", attach.stderr.readline)
    os.kill(workers[1], signal.SIGKILL)  # what the OOM killer does
    _, job_err = proc.communicate(timeout=WAIT_S)
    _, err = attach.communicate(timeout=WAIT_S)

    print(err)
    assert attach.returncode == 0, err
    assert proc.returncode != 0, job_err  # torch ends the job (its message varies with where the loop was)
    report = json.loads((tmp_path / "out.json").read_text())
    (gone,) = _findings(report, "attached-workers-gone")
    assert gone["evidence"]["gone"][0]["pid"] == workers[1]
    # "(killed by signal 9)" too where its zombie was seen before torch reaped it: not always
    assert gone["title"].startswith(f"The job ended while watched: worker 1 (pid {workers[1]}) went first")
    assert report["attached"]["job_ended"] is True
