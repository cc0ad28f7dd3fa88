"""Credentials stay out of run directories and reports; `dlprobe attach` watches only the tree it was given.

Real runs: `dlprobe run` of a DataLoader script given `--token=...`/`--api-key ...`, `dlprobe report` of a run
directory written before redaction, `dlprobe attach` of a plain `python` job while an unrelated Python process with
torch loaded runs beside it."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import SCRIPTS, run_dlprobe
from tests.integration.test_attach import WAIT_S, _children, _first_line, _wait_for, _workers

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "rundirs"
TOKEN = "SECRETVALUE123"
API_KEY = "APIKEYVALUE456"
HF_TOKEN = "hf_" + "aBcDeFgHiJkLmNoPqRsTuVwXyZ01234567"  # what tests/scripts/secret_args.py raises with
SCRIPT_OUTPUT = {"stdout.log", "stderr.log"}  # the script's own output, kept as it printed it


def _files_holding(run_dir: Path, secret: str) -> list[str]:
    return sorted(
        str(p.relative_to(run_dir)) for p in run_dir.rglob("*") if p.is_file() and secret.encode() in p.read_bytes()
    )


def test_run_keeps_credentials_out_of_every_file_and_the_terminal(tmp_path: Path) -> None:
    seen = tmp_path / "argv.json"  # outside the run directory
    run_dir = tmp_path / "run"
    result = run_dlprobe(
        ["run", "--out", str(run_dir), str(SCRIPTS / "secret_args.py"),
         f"--token={TOKEN}", "--api-key", API_KEY, "--argv-out", str(seen), "--fail"],
        tmp_path,
    )  # fmt: skip

    print(result.stderr)
    assert result.returncode == 1, result.stderr  # the script's own exit code: it raised
    # the script saw its command line as given
    assert json.loads(seen.read_text()) == {"token": TOKEN, "api_key": API_KEY}
    for secret in (TOKEN, API_KEY):
        assert _files_holding(run_dir, secret) == []
        assert secret not in result.stdout and secret not in result.stderr
    # the token in the exception's message: only in what the script itself printed (its traceback)
    assert set(_files_holding(run_dir, HF_TOKEN)) <= SCRIPT_OUTPUT
    assert HF_TOKEN in result.stderr  # the script's own output reaches its stderr as it wrote it
    assert "The script raised RuntimeError: 401 Unauthorized: the hub refused token hf_***" in result.stderr
    # what the report shows instead: the command line with its credentials starred, everything else as given
    meta = json.loads((run_dir / "meta.json").read_text())
    assert meta["argv"] == ["--token=***", "--api-key", "***", "--argv-out", str(seen), "--fail"]
    html = (run_dir / "report.html").read_text()
    assert f"--token=*** --api-key *** --argv-out {seen} --fail</title>" in html
    assert "--token=*** --api-key ***" in result.stderr  # the summary's command line


def test_report_of_a_run_recorded_before_redaction_shows_no_credential(tmp_path: Path) -> None:
    run_dir = tmp_path / "old"
    shutil.copytree(FIXTURES / "leaky_list", run_dir)
    meta = json.loads((run_dir / "meta.json").read_text())
    meta["argv"] = ["--token", TOKEN, "--data", f"https://me:{API_KEY}@hub.example.com/x"]
    meta["command"] = [meta["script"], *meta["argv"]]
    (run_dir / "meta.json").write_text(json.dumps(meta))
    events = (run_dir / "events.jsonl").read_text().replace('"argv":[]', f'"argv":["--token","{TOKEN}"]')
    error = {"ev": "script_error", "t": meta["started_at"] + 5, "pid": meta["target_pid"], "type": "RuntimeError",
             "message": f"401 for {HF_TOKEN}", "file": meta["script"], "line": 3}  # fmt: skip
    (run_dir / "events.jsonl").write_text(events + json.dumps(error) + "\n")
    with (run_dir / "stderr.log").open("a") as f:
        f.write(f"RuntimeError: 401 for {HF_TOKEN}\n")
    before = {p.name: p.read_bytes() for p in run_dir.iterdir() if p.is_file()}

    result = run_dlprobe(["report", str(run_dir), "--trace", str(tmp_path / "trace.json")], tmp_path)

    assert result.returncode == 0, result.stderr
    for name in ("report.json", "report.html"):
        text = (run_dir / name).read_text()
        assert TOKEN not in text and API_KEY not in text and HF_TOKEN not in text, name
    trace = (tmp_path / "trace.json").read_text()
    assert TOKEN not in trace and HF_TOKEN not in trace
    for secret in (TOKEN, API_KEY, HF_TOKEN):
        assert secret not in result.stdout + result.stderr
    assert "--token *** --data https://me:***@hub.example.com/x" in (run_dir / "report.html").read_text()
    # the run's own files are read, never rewritten
    assert all((run_dir / name).read_bytes() == data for name, data in before.items())


def test_attach_refuses_pid_1(tmp_path: Path) -> None:
    result = run_dlprobe(["attach", "1", "--duration", "1s"], tmp_path)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert lines[0] == "error: pid 1 is the system's init process: its tree is every process on the machine"
    assert lines[1].startswith("hint:") and len(lines) == 2
    assert not (tmp_path / "dlprobe-runs").exists()


def _kernel_thread() -> int | None:
    for entry in os.listdir("/proc"):
        if entry.isdigit() and entry != "2":
            try:
                stat = Path(f"/proc/{entry}/stat").read_bytes()
            except OSError:  # noqa: S112 - it exited meanwhile
                continue
            if stat[stat.rindex(b")") + 2 :].split()[1] == b"2":
                return int(entry)
    return None


def test_attach_refuses_kernel_threads(tmp_path: Path) -> None:
    for pid in (2, _kernel_thread()):
        if pid is None:
            continue
        result = run_dlprobe(["attach", str(pid), "--duration", "1s"], tmp_path)
        assert result.returncode == 2, result.stderr
        assert f"error: pid {pid} is a kernel thread, not a training job" in result.stderr
        assert "hint:" in result.stderr and "Traceback" not in result.stderr


@pytest.mark.skipif(os.geteuid() != 0, reason="starts a process as uid 65534 inside the job's tree (needs root)")
def test_attach_watches_only_the_jobs_tree_and_keeps_its_credentials_out(tmp_path: Path) -> None:
    stop = tmp_path / "stop"
    job_token, other_token = "JOBSECRET777", "UNRELATEDSECRET888"
    job = subprocess.Popen(
        [sys.executable, str(SCRIPTS / "attach_secret_job.py"), str(stop), f"--token={job_token}", "--other-user"],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    # an unrelated Python process with torch loaded, beside the job (another process of the same parent)
    unrelated = subprocess.Popen(
        [sys.executable, "-c", "import sys, time, torch; print('up', flush=True); time.sleep(300)",
         f"--token={other_token}"],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert _first_line(unrelated) == "up\n"
        assert _first_line(job) == "first batch\n"
        workers = _wait_for("2 DataLoader workers", lambda: len(_workers(job.pid)) == 2 and _workers(job.pid))
        helper = next(c for c in _children(job.pid) if c not in workers)
        result = run_dlprobe(["attach", str(job.pid), "--duration", "2s", "--out", str(tmp_path / "run")], tmp_path)
    finally:
        stop.touch()
        unrelated.kill()
        unrelated.communicate(timeout=WAIT_S)
        try:
            job.communicate(timeout=WAIT_S)
        except subprocess.TimeoutExpired:
            for pid in [job.pid, *_children(job.pid)]:
                os.kill(pid, signal.SIGKILL)
            job.communicate()

    print(result.stderr)
    assert result.returncode == 0, result.stderr
    run_dir = tmp_path / "run"
    record = json.loads((run_dir / "attach.json").read_text())
    assert {p["pid"] for p in record["processes"]} == {job.pid, *workers, helper}
    for secret in (job_token, other_token):
        assert _files_holding(run_dir, secret) == [] and secret not in result.stderr + result.stdout
    assert str(unrelated.pid) not in (run_dir / "attach.json").read_text()
    main = next(p for p in record["processes"] if p["pid"] == job.pid)
    assert main["cmdline"][-3:] == [str(stop), "--token=***", "--other-user"]
    note = f"pid {helper} (sleep) in the tree belongs to another user (uid 65534)"
    assert note in record["notes"] and note in result.stderr


@pytest.mark.parametrize("stderr_to", ["pipe", "file"])
def test_a_workers_exception_copied_by_the_sample_check_keeps_its_credentials_out(
    tmp_path: Path, stderr_to: str
) -> None:
    # the dataset raises OSError("cannot fetch https://alice:s3cretpw@db.example/x?token=abc123") for index 5: the
    # worker's traceback, the sample check's own copy (loaded again alone) and the script's error all hold it
    run_dir = tmp_path / "run"
    args = ["run", "--out", str(run_dir), str(SCRIPTS / "secret_in_sample_error.py")]
    if stderr_to == "pipe":
        result = run_dlprobe(args, tmp_path)
        returncode, stderr = result.returncode, result.stderr
    else:  # `2> train.log`: dlprobe keeps a copy of the run's stderr in stderr.log
        log = tmp_path / "train.log"
        with log.open("w") as err:
            command = [sys.executable, "-m", "dlprobe", *args]
            env = {**os.environ, "COLUMNS": "120"}
            returncode = subprocess.run(
                command, cwd=tmp_path, stdout=subprocess.PIPE, stderr=err, timeout=180, env=env
            ).returncode
        stderr = log.read_text()
        assert (run_dir / "stderr.log").is_file()

    assert returncode == 1, stderr[-3000:]
    # the script's own stderr reaches the terminal (or its file) as plain python prints it
    assert "OSError: cannot fetch https://alice:s3cretpw@db.example/x?token=abc123" in stderr
    events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]
    checks = [ev for ev in events if ev["ev"] == "sample_check"]
    assert [(ev["index"], ev["outcome"]) for ev in checks] == [(5, "fails")], checks  # the check ran, and copied it
    assert checks[0]["error_alone"] == "OSError: cannot fetch https://alice:***@db.example/x?token=***"
    for secret in ("s3cretpw", "abc123"):
        assert _files_holding(run_dir, secret) == [], secret
    report = (run_dir / "report.json").read_text()
    assert "https://alice:***@db.example/x?token=***" in report
