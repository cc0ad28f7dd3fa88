"""A run directory is written and read where it is meant to be: no link planted in it is followed, a folder someone
else controls is refused, and runs started at once each get their own directory."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from dlprobe.errors import DlprobeError
from dlprobe.rundir.files import create_run_dir
from tests.conftest import run_dlprobe

FIXTURE = Path(__file__).parent.parent / "fixtures" / "rundirs" / "leaky_list"
OTHER_UID = 65534
as_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to give a file to a second user (uid 65534)")


def _saved_run(tmp_path: Path) -> Path:
    run = tmp_path / "run"
    shutil.copytree(FIXTURE, run)
    os.chmod(run, 0o700)
    return run


def test_a_link_under_a_temporary_name_is_not_written_through(tmp_path: Path):
    run = _saved_run(tmp_path)
    victim = tmp_path / "bashrc"
    victim.write_text("export PS1='$ '\n")
    for name in ("report.json", "report.html", "trace.json", "stacks.speedscope.json", "memory.png"):
        (run / f"{name}.tmp").symlink_to(victim)
    (run / "memory.png").symlink_to(victim)  # the plot is written by name too: replaced, never written through
    proc = run_dlprobe(["report", str(run)], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert victim.read_text() == "export PS1='$ '\n"
    assert json.loads((run / "report.json").read_text())["findings"]
    assert not (run / "memory.png").is_symlink() and (run / "memory.png").read_bytes().startswith(b"\x89PNG")


@pytest.mark.damaged
def test_a_linked_stderr_log_is_not_copied_into_the_page(tmp_path: Path):
    run = _saved_run(tmp_path)
    secret = tmp_path / "id_rsa"
    secret.write_text("-----BEGIN OPENSSH PRIVATE KEY----- secret-key-material\n")
    (run / "stderr.log").unlink()
    (run / "stderr.log").symlink_to(secret)
    os.mkfifo(run / "stdout.log.fifo")
    (run / "stdout.log").unlink()
    os.rename(run / "stdout.log.fifo", run / "stdout.log")  # a FIFO must not block the report either
    proc = run_dlprobe(["report", str(run)], cwd=tmp_path, timeout=120)
    assert proc.returncode == 0, proc.stderr
    for name in ("report.html", "report.json"):
        assert "secret-key-material" not in (run / name).read_text()
    problems = json.loads((run / "report.json").read_text())["read_problems"]
    assert {"file": "stderr.log", "problem": "unreadable (a symbolic link, not followed)"} in problems


@pytest.mark.damaged
def test_a_linked_subfolder_and_linked_records_are_not_read(tmp_path: Path):
    run = _saved_run(tmp_path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "hang-1.json").write_text(json.dumps({"main_pid": 1, "processes": []}))
    (run / "hangs").symlink_to(elsewhere)
    (run / "kernel.json").unlink()
    (run / "kernel.json").symlink_to(elsewhere / "hang-1.json")
    proc = run_dlprobe(["report", str(run)], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    problems = {p["file"]: p["problem"] for p in json.loads((run / "report.json").read_text())["read_problems"]}
    assert problems["hangs/"] == "a symbolic link, not followed"
    assert problems["kernel.json"] == "unreadable (a symbolic link, not followed)"


@as_root
def test_report_refuses_a_run_directory_another_user_owns(tmp_path: Path):
    run = _saved_run(tmp_path)
    os.chown(run, OTHER_UID, OTHER_UID)
    proc = run_dlprobe(["report", str(run)], cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.startswith(f"error: the run directory {run} belongs to another user (uid {OTHER_UID})")
    assert "Traceback" not in proc.stderr and not (run / "report.json").exists()


def test_report_refuses_a_run_directory_others_can_write(tmp_path: Path):
    run = _saved_run(tmp_path)
    os.chmod(run, 0o777)
    proc = run_dlprobe(["report", str(run)], cwd=tmp_path)
    assert proc.returncode == 2
    assert "is writable by its group and every user" in proc.stderr and "hint:" in proc.stderr


@as_root
def test_run_refuses_an_out_folder_another_user_made_in_advance(tmp_path: Path):
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    out = tmp_path / "planted"
    out.mkdir()
    (out / "samples.jsonl").symlink_to(victim)
    (out / "stdout.log").symlink_to(victim)
    os.lchown(out / "samples.jsonl", OTHER_UID, OTHER_UID)
    os.chown(out, OTHER_UID, OTHER_UID)
    (tmp_path / "train.py").write_text("print('ran')\n")
    proc = run_dlprobe(["run", "--out", str(out), "train.py"], cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith(f"error: --out {out} belongs to another user")
    assert "ran" not in proc.stdout and victim.read_text() == "precious\n"


def _run_with_stderr_to_file(args: list[str], cwd: Path, log: Path) -> subprocess.CompletedProcess[str]:
    """`dlprobe ARGS` with its stderr (the script's too) a regular file, as a Slurm or CI log is: the one case where
    dlprobe keeps stderr.log."""
    with log.open("w") as err:
        return subprocess.run([sys.executable, "-m", "dlprobe", *args], cwd=cwd, stdout=subprocess.PIPE, stderr=err,
                              text=True, timeout=180, env={**os.environ, "COLUMNS": "120"})  # fmt: skip


def test_run_directories_are_private_and_the_files_in_them_too(tmp_path: Path):
    (tmp_path / "train.py").write_text("import sys\nprint('ran')\nprint('to stderr', file=sys.stderr)\n")
    proc = _run_with_stderr_to_file(["run", "-q", "train.py"], tmp_path, tmp_path / "job.log")
    assert proc.returncode == 0, (tmp_path / "job.log").read_text()
    [run] = (tmp_path / "dlprobe-runs").iterdir()
    assert stat.S_IMODE(run.stat().st_mode) == 0o700
    for name in ("meta.json", "report.json", "stderr.log", "samples.jsonl"):
        assert stat.S_IMODE((run / name).stat().st_mode) & 0o077 == 0, name


def test_runs_started_at_once_in_one_folder_each_get_their_own_directory(tmp_path: Path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    threads, rounds = 8, 25
    made: list[Path] = []
    errors: list[BaseException] = []
    for _ in range(rounds):
        barrier = threading.Barrier(threads)

        def start() -> None:
            barrier.wait()  # noqa: B023 - each round's own barrier, used before the next round starts
            try:
                made.append(create_run_dir(None, "train.py"))
            except BaseException as exc:  # pragma: no cover - the failure is what the assertion shows
                errors.append(exc)

        workers = [threading.Thread(target=start) for _ in range(threads)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
    assert not errors
    assert len(made) == threads * rounds
    assert len({p.resolve() for p in made}) == threads * rounds, "two runs were given one directory"


def test_two_runs_given_one_out_folder_at_once_do_not_share_it(tmp_path: Path):
    out = str(tmp_path / "out")
    results: list[str] = []
    barrier = threading.Barrier(2)

    def start() -> None:
        barrier.wait()
        try:
            create_run_dir(out, "train.py")
            results.append("made")
        except DlprobeError as exc:
            results.append(exc.message)

    workers = [threading.Thread(target=start) for _ in range(2)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert sorted(results) == sorted(["made", f"{out} already holds a dlprobe run"])


def test_a_folder_every_user_may_write_without_the_sticky_bit_is_no_parent(tmp_path: Path):
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o777)
    with pytest.raises(DlprobeError, match="writable by every user without the sticky bit"):
        create_run_dir(str(shared / "run"), "train.py")
    os.chmod(shared, 0o1777)  # /tmp's mode: only the owner of an entry may rename or remove it
    assert stat.S_IMODE(create_run_dir(str(shared / "run"), "train.py").stat().st_mode) == 0o700


def test_a_link_in_an_own_out_folder_is_not_written_through_and_the_output_still_flows(tmp_path: Path):
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    out = tmp_path / "out"
    out.mkdir(mode=0o700)
    (out / "stderr.log").symlink_to(victim)
    (tmp_path / "train.py").write_text("import sys\nfor i in range(3):\n    print('line', i, file=sys.stderr)\n")
    log = tmp_path / "job.log"
    proc = _run_with_stderr_to_file(["run", "-q", "--out", str(out), "train.py"], tmp_path, log)
    assert proc.returncode == 0, log.read_text()
    assert log.read_text().startswith("line 0\nline 1\nline 2\n") and victim.read_text() == "precious\n"
    # The copy of stderr took the link's place as a file of its own: the link was replaced, never followed.
    kept = out / "stderr.log"
    assert not kept.is_symlink() and kept.read_text().startswith("line 0\nline 1\nline 2\n")
