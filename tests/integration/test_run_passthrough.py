"""`dlprobe run` leaves the script alone: same stdout, stderr and exit code; bad input gets one line."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys

import psutil
import pytest

from dlprobe.rundir.schema import META_FILE, RUN_SCHEMA_VERSION
from tests.conftest import SCRIPTS, names_not_in_schema, run_dlprobe, shared_run, wait_for_plot
from tests.htmlpage import read_page
from tests.schema_check import problems


def _plain(script: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPTS / script), *args], capture_output=True, text=True)


def test_exit_code_and_output_come_through_unchanged(probe):
    plain = _plain("fails_after_batches.py", "3")
    result = probe("fails_after_batches.py", "3", options=["--quiet"])
    assert plain.returncode == 3
    assert result.returncode == 3
    assert result.stdout == plain.stdout
    assert result.stderr == plain.stderr
    assert result.report["exit_code"] == 3
    assert result.report["loaders"][0]["batches"] == 4


def test_script_that_raises_keeps_exit_code_and_a_clean_traceback(probe):
    result = probe("fails_after_batches.py", "raise")
    assert result.returncode == 1
    assert "ValueError: bad learning rate" in result.stderr
    assert "dlprobe/target" not in result.stderr and "runpy" not in result.stderr
    [finding] = result.findings("script-error")
    assert finding["evidence"]["type"] == "ValueError"
    assert finding["evidence"]["line"] == 14  # the `raise` line


def test_script_without_a_loader_is_explained(probe):
    result = probe("no_loader.py")
    assert result.returncode == 0
    assert result.stdout == "hello without a loader\n"
    assert [f["code"] for f in result.report["findings"]] == ["no-loader"]
    assert "created no torch DataLoader" in result.stderr


def test_syntax_error_is_reported_like_python_without_dlprobe_traceback(probe):
    result = probe("syntax_error.py")
    assert result.returncode == 1
    assert "SyntaxError" in result.stderr
    assert "Traceback" not in result.stderr
    assert result.findings("script-error")[0]["evidence"]["type"] == "SyntaxError"
    # reported as a script that failed before its loader: no cost line of a probe that had nothing to probe
    assert "dlprobe's own cost" not in result.stderr and "DataLoaders" not in result.stderr
    page = read_page(result.run_dir, ["script-error"]).all_text
    assert "the script failed: exit code 1" in page and "SyntaxError" in page


def test_missing_script_is_a_usage_error(tmp_path):
    proc = run_dlprobe(["run", str(tmp_path / "nope.py")], tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.startswith("error: script not found")
    assert "hint:" in proc.stderr and "Traceback" not in proc.stderr


def test_unwritable_run_directory_is_a_usage_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    proc = run_dlprobe(["run", "--out", str(blocker / "run"), str(SCRIPTS / "no_loader.py")], tmp_path)
    assert proc.returncode == 2
    assert "cannot write the run directory" in proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.fixture(scope="module")
def saved_run(tmp_path_factory):
    """A run that finished cleanly, for the tests of `dlprobe report` on a saved run directory. The re-render test
    deletes report.json and memory.png and checks `report` writes them again, so the directory ends as it began."""
    return shared_run(tmp_path_factory, "saved", str(SCRIPTS / "fails_after_batches.py"), "0", options=("--quiet",))


def test_report_command_rerenders_a_saved_run(saved_run, tmp_path):
    result = saved_run
    saved = json.loads((result.run_dir / "report.json").read_text())
    (result.run_dir / "report.json").unlink()
    wait_for_plot(result.run_dir).unlink()
    out = tmp_path / "again.json"
    proc = run_dlprobe(["report", str(result.run_dir), "--json", str(out)], tmp_path)
    assert proc.returncode == 0, proc.stderr
    again = json.loads(out.read_text())
    assert again == saved
    assert (result.run_dir / "memory.png").exists()
    assert "DataLoaders" in proc.stdout


def test_run_directory_format_version_older_reads_newer_is_refused(saved_run, tmp_path):
    result = saved_run
    meta = json.loads((result.run_dir / META_FILE).read_text())
    assert meta["schema_version"] == RUN_SCHEMA_VERSION
    assert names_not_in_schema(result.run_dir) == []
    current = run_dlprobe(["report", str(result.run_dir)], tmp_path)
    assert current.returncode == 0, current.stderr

    # as written by a dlprobe from before the field: read as version 1, silently (same name length: same wrapping)
    older = result.run_dir.parent / "old"  # beside the run: its path as long as the run's
    shutil.copytree(result.run_dir, older)
    del meta["schema_version"]
    (older / META_FILE).write_text(json.dumps(meta))
    proc = run_dlprobe(["report", str(older)], tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == current.stdout.replace(str(result.run_dir), str(older))
    assert proc.stderr == current.stderr == ""
    assert "the script finished: exit code 0" in read_page(older).all_text
    assert problems(json.loads((older / "report.json").read_text())) == []  # outside tmp_path: checked here

    newer = result.run_dir.parent / "new"
    shutil.copytree(result.run_dir, newer)
    meta["schema_version"] = RUN_SCHEMA_VERSION + 1
    (newer / META_FILE).write_text(json.dumps(meta))
    proc = run_dlprobe(["report", str(newer)], tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.startswith("error: ") and proc.stderr.count("error:") == 1
    assert "newer dlprobe" in proc.stderr and "upgrade dlprobe" in proc.stderr
    assert "Traceback" not in proc.stderr and proc.stdout == ""


def test_report_on_a_non_run_directory_is_a_usage_error(tmp_path):
    proc = run_dlprobe(["report", str(tmp_path)], tmp_path)
    assert proc.returncode == 2
    assert "not a dlprobe run directory" in proc.stderr


def test_json_report_has_the_documented_shape(probe, tmp_path):
    out = tmp_path / "r.json"
    result = probe("fails_after_batches.py", "0", options=["--quiet", "--json", str(out)])
    report = json.loads(out.read_text())
    for key in ("schema_version", "script", "argv", "exit_code", "duration_s", "loaders", "processes", "findings"):
        assert key in report
    assert report["argv"] == ["0"]
    [loader] = report["loaders"]
    for key in ("dataset_type", "dataset_len", "batch_size", "num_workers", "start_method", "pin_memory",
                "prefetch_factor", "persistent_workers", "batches", "wait_fraction"):  # fmt: skip
        assert key in loader
    assert loader["dataset_type"] == "torch.utils.data.dataset.TensorDataset"
    roles = sorted(p["role"] for p in report["processes"] if p["role"] in ("main", "worker"))
    assert roles == ["main", "worker", "worker"]
    for proc in report["processes"]:
        for metric in ("rss", "uss", "pss"):
            assert set(proc[metric]) == {"start", "peak", "end"}
    assert result.returncode == 0


def test_a_killed_process_leaves_no_shared_memory_file_behind(probe):
    result = probe("killed_leaving_shm_file.py", options=["--quiet"])
    assert result.returncode == -signal.SIGKILL  # dlprobe dies of the script's SIGKILL, as python's caller sees it
    name = result.stdout.strip()
    assert name.startswith("torch_") and not os.path.exists(f"/dev/shm/{name}")
    assert result.report["shm_removed"] == [{"name": name, "bytes": 65536}]
    assert f"dlprobe removed 1 file(s) (64.0 KiB) that the job's killed processes left in /dev/shm: {name}" in (
        run_dlprobe(["report", str(result.run_dir)], result.run_dir.parent).stdout.replace("\n", " ")
    )


def test_a_worker_blocked_after_its_main_process_died_is_named_and_left_running_as_python_leaves_it(tmp_path):
    # The worker left running keeps the script's stdout and stderr open, as it would without dlprobe: files, not
    # pipes a test would wait on for their end.
    run_dir, out = tmp_path / "run", tmp_path / "out.txt"
    with out.open("wb") as sink:
        command = [sys.executable, "-m", "dlprobe", "run", "--quiet", "--out", str(run_dir),
                   str(SCRIPTS / "killed_with_a_blocked_worker.py")]  # fmt: skip
        code = subprocess.run(command, cwd=tmp_path, stdout=sink, stderr=subprocess.DEVNULL, timeout=180).returncode
    report = json.loads((run_dir / "report.json").read_text())
    workers = {p["pid"]: p for p in report["processes"] if p["role"] == "worker"}
    blocked = [pid for pid, p in workers.items() if p.get("worker_id") == 0]
    alive = [pid for pid in blocked if psutil.pid_exists(pid) and psutil.Process(pid).status() != "zombie"]
    try:
        assert code == -signal.SIGKILL
        assert out.read_text() == "first batch [0.0, 1.0, 2.0, 3.0]\n"
        assert blocked and set(blocked) <= set(report["orphans_left"]) <= set(workers)
        assert report["orphans_stopped"] == []
        assert alive == blocked  # no signal of dlprobe's: the script's process runs on, as without dlprobe
        said = run_dlprobe(["report", str(run_dir)], tmp_path).stdout.replace("\n", " ")
        assert "DataLoader worker(s) still ran 6 s after their main process was gone, left running" in said
        assert f"pids {blocked[0]}" in said
    finally:
        # The test's own clean-up: no process outlives the test, whatever the report said (a worker it missed too).
        script = str(SCRIPTS / "killed_with_a_blocked_worker.py")
        left = [p for p in psutil.process_iter(["cmdline", "environ"]) if script in (p.info["cmdline"] or [])
                and (p.info["environ"] or {}).get("DLPROBE_RUN_DIR") == str(run_dir.resolve())]  # fmt: skip
        for proc in left:
            proc.kill()
        psutil.wait_procs(left, timeout=30)


# `dlprobe run` as the console script starts it, with an object whose finalizer says whether python's teardown ran
# and an atexit hook that must still run.
_TEARDOWN_PROBE = """
import atexit, sys
class Teardown:
    def __del__(self):
        sys.stderr.write("teardown ran\\n")
keep = Teardown()
atexit.register(lambda: sys.stderr.write("atexit ran\\n"))
from dlprobe.cli import main
sys.argv = ["dlprobe", *sys.argv[1:]]
main()
"""


def test_dlprobe_run_exits_with_the_scripts_code_without_the_interpreters_teardown(tmp_path):
    run_dir = tmp_path / "run"
    cmd = [
        sys.executable,
        "-c",
        _TEARDOWN_PROBE,
        "run",
        "--out",
        str(run_dir),
        str(SCRIPTS / "fails_after_batches.py"),
        "3",
    ]
    result = subprocess.run(
        cmd, cwd=tmp_path, capture_output=True, text=True, timeout=180, env={**os.environ, "COLUMNS": "120"}
    )
    assert result.returncode == 3, result.stderr
    assert "atexit ran" in result.stderr  # the hooks run, the streams are flushed: the summary is whole
    assert f"Run saved in {run_dir}" in result.stderr.replace("\n", "")
    assert "teardown ran" not in result.stderr  # no time spent freeing the supervisor's modules
    assert json.loads((run_dir / "report.json").read_text())["exit_code"] == 3


def test_a_loop_that_breaks_out_of_its_epoch_stops_its_workers_at_once_and_they_are_read_as_they_stop(probe):
    # A reference cycle of the probe's (its own frames kept by a snapshot of the threads' frames, the per-worker
    # counter's bound method) held the iterator until a garbage collection: workers outlived the loop that left them.
    plain = _plain("breaks_mid_epoch.py")
    result = probe("breaks_mid_epoch.py")
    assert result.returncode == 0, result.stderr
    assert plain.stdout == result.stdout == "workers alive after the break: 0\n"
    events = [json.loads(line) for line in (result.run_dir / "events.jsonl").read_text().splitlines()]
    [started] = [e for e in events if e["ev"] == "epoch"]
    [last] = [e for e in events if e["ev"] == "workers_last"]  # read before torch stopped them, mid-epoch
    assert last["epoch"] == 0
    assert sorted(w["pid"] for w in last["workers"]) == sorted(w["pid"] for w in started["workers"])
    assert all(w["memory"] and w["memory"]["uss"] > 0 for w in last["workers"])
