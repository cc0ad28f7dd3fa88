"""`dlprobe run` on workers that hang, crash, get OOM-killed, run out of /dev/shm or raise, all on index 13
of tests/scripts/faulty_worker.py: each run must name the code, the cause, the worker and the index, and
leave no process behind."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

from dlprobe.rundir.inflight_format import read_all
from dlprobe.rundir.schema import STOP_REASON_HANG
from tests.conftest import SCRIPTS, memory_cgroup, names_not_in_schema, needs_small_shm, run_dlprobe, run_with_small_shm
from tests.htmlpage import read_page

FAULTY = str(SCRIPTS / "faulty_worker.py")
HANG_OPTIONS = ["--quiet", "--hang-timeout", "3", "--on-hang", "stop"]


def _report(run_dir: Path) -> dict[str, Any]:
    return json.loads((run_dir / "report.json").read_text())


def _finding(report: dict[str, Any], code: str) -> dict[str, Any]:
    found = [f for f in report["findings"] if f["code"] == code]
    assert found, f"no {code} finding in {[f['code'] for f in report['findings']]}"
    return found[0]


def _assert_no_leftovers(report: dict[str, Any]) -> None:
    """No process of the run is left: every pid the report knows is gone (or a reused pid running
    something else)."""
    deadline = time.monotonic() + 5
    while True:
        alive = []
        for proc in report["processes"]:
            try:
                p = psutil.Process(proc["pid"])
                if p.status() != psutil.STATUS_ZOMBIE and any("faulty_worker" in part for part in p.cmdline()):
                    alive.append(proc["pid"])
            except psutil.Error:  # noqa: S112 - exited while listed: not alive
                continue
        if not alive or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert alive == [], f"processes left behind: {alive}"


def _probe_faulty(tmp_path: Path, mode: str, *args: str, options: list[str] | None = None, env=None):
    run_dir = tmp_path / f"run-{mode}"
    cmd = ["run", "--out", str(run_dir), *(options or ["--quiet"]), FAULTY, mode, *args]
    return run_dlprobe(cmd, tmp_path, timeout=120, env=env), run_dir


def test_blocked_sample_is_a_worker_hang_with_the_users_frame(worker_hang_run):
    proc, run_dir = worker_hang_run, worker_hang_run.run_dir  # faulty_worker.py hang under HANG_OPTIONS
    assert proc.returncode == -signal.SIGTERM, proc.stderr  # dlprobe ended it with SIGTERM, and died of it
    report = _report(run_dir)
    finding = _finding(report, "worker-hang")
    ev = finding["evidence"]
    assert ev["cause"] == "blocked-read" and ev["worker_id"] == 0
    assert ev["index"] == 13 and ev["batch_indices"] == [12, 13] and ev["phase"] == "getitem"
    assert "misbehave" in ev["stuck_frame"] and "faulty_worker.py" in ev["stuck_frame"]
    assert ev["stack"][0] == ev["stuck_frame"]  # the user's frame comes first, before torch and stdlib
    assert ev["fd_target"].startswith("pipe:")
    assert ev["stack_tool"].startswith("py-spy")
    assert "misbehave" in finding["title"]
    result = json.loads((run_dir / "result.json").read_text())
    assert result["stopped_by"] and result["stop_reason"] == STOP_REASON_HANG and result["survivors"] == []
    assert list((run_dir / "stacks").glob("hang1-*.json")), "py-spy output is kept in the run directory"
    assert names_not_in_schema(run_dir) == []
    page = read_page(run_dir, ["worker-hang"]).all_text  # the hang on the time axis, and its stacks
    assert "hang 1: no batch for" in page and "Hang 1: no batch for" in page and "misbehave (" in page
    _assert_no_leftovers(report)


def test_lock_held_at_fork_is_named(tmp_path):
    proc, run_dir = _probe_faulty(tmp_path, "lock", options=HANG_OPTIONS)
    assert proc.returncode == -signal.SIGTERM, proc.stderr
    report = _report(run_dir)
    ev = _finding(report, "worker-hang")["evidence"]
    assert ev["cause"] == "fork-lock"
    assert ev["index"] == 13 and ev["worker_id"] == 0
    assert "misbehave" in ev["stuck_frame"] and "LOCK" in ev["stuck_frame"]
    assert any("hold_lock_forever" in t for t in ev["threads_at_fork"])
    _assert_no_leftovers(report)


def test_when_ptrace_is_refused_the_targets_faulthandler_gives_the_stack(tmp_path):
    refusing = tmp_path / "py-spy"  # stands in for py-spy in a container without SYS_PTRACE
    refusing.write_text('#!/bin/sh\necho "Error: Failed to attach: Operation not permitted (os error 1)" >&2\nexit 1\n')
    refusing.chmod(0o755)
    proc, run_dir = _probe_faulty(tmp_path, "hang", options=HANG_OPTIONS, env={"DLPROBE_PY_SPY": str(refusing)})
    assert proc.returncode == -signal.SIGTERM, proc.stderr
    report = _report(run_dir)
    finding = _finding(report, "worker-hang")
    assert finding["evidence"]["stack_tool"] == "faulthandler"
    assert "misbehave" in finding["evidence"]["stuck_frame"]
    assert finding["evidence"]["index"] == 13
    assert "--cap-add SYS_PTRACE" in finding["detail"] and "ptrace_scope" in finding["detail"]
    _assert_no_leftovers(report)


def test_hang_without_workers_is_a_main_hang_on_the_index(tmp_path):
    proc, run_dir = _probe_faulty(tmp_path, "hang", "0", options=HANG_OPTIONS)
    assert proc.returncode == -signal.SIGTERM, proc.stderr
    report = _report(run_dir)
    ev = _finding(report, "main-hang")["evidence"]
    assert ev["index"] == 13 and ev["cause"] == "blocked-read" and "misbehave" in ev["stuck_frame"]
    assert report["findings"][0]["code"] == "main-hang"
    _assert_no_leftovers(report)


def test_segfault_on_a_sample_is_a_killed_worker_with_the_index(tmp_path):
    proc, run_dir = _probe_faulty(tmp_path, "segfault")
    assert proc.returncode == 1
    # The script's own output still comes through: torch's error names the signal under fork; under forkserver it
    # cannot (the worker is not the script's child), and the worker's own line from torch's handler says it.
    assert "Segmentation fault" in proc.stderr or "Unexpected segmentation fault" in proc.stderr, proc.stderr
    report = _report(run_dir)
    finding = _finding(report, "worker-killed")
    ev = finding["evidence"]
    assert ev["cause"] == "segfault" and ev["signal"] == "SIGSEGV"
    assert ev["worker_id"] == 0 and ev["index"] == 13 and ev["batch_indices"] == [12, 13]
    assert ev["last_rss_bytes"] > 0
    assert report["findings"][0]["code"] == "worker-killed"  # before the generic script-error
    _assert_no_leftovers(report)


def test_a_crash_the_scripts_error_does_not_name_is_a_killed_worker_from_its_own_record(tmp_path):
    # Issue 21: torch 2.15 sometimes raised ConnectionResetError before it named the dead worker; the death is
    # known from the worker's own fatal-signal record, whatever error the script ends with.
    script = str(SCRIPTS / "worker_crash_torch_does_not_name.py")
    proc = run_dlprobe(["run", "--quiet", "--out", str(tmp_path / "crash"), script, "crash"], tmp_path, timeout=120)
    assert proc.returncode == 1, proc.stderr
    assert "worker 0 gone: True" in proc.stdout
    assert "ConnectionResetError: [Errno 104]" in proc.stderr and "is killed by signal" not in proc.stderr
    assert "Fatal Python error" not in proc.stderr  # the record goes to the run directory, not the user's stderr
    ev = _finding(_report(tmp_path / "crash"), "worker-killed")["evidence"]
    assert (ev["cause"], ev["signal"], ev["seen_by"]) == ("segfault", "SIGSEGV", ["fault-record"])
    assert ev["worker_id"] == 0 and ev["index"] == 13 and ev["batch_indices"] == [12, 13]
    assert ev["crash_frame"].startswith("__getitem__ (worker_crash_torch_does_not_name.py:")

    proc = run_dlprobe(["run", "--quiet", "--out", str(tmp_path / "clean"), script, "clean"], tmp_path, timeout=120)
    assert proc.returncode == 1 and "ConnectionResetError" in proc.stderr, proc.stderr
    report = _report(tmp_path / "clean")
    assert [f["code"] for f in report["findings"] if f["code"] == "worker-killed"] == []


def test_exception_on_a_sample_is_a_bad_sample_with_the_index(tmp_path):
    proc, run_dir = _probe_faulty(tmp_path, "exception")
    assert proc.returncode == 1
    report = _report(run_dir)
    finding = _finding(report, "bad-sample")
    ev = finding["evidence"]
    assert ev["worker_id"] == 0 and ev["index"] == 13 and ev["position_in_batch"] == 1
    assert ev["exception"] == "ValueError"
    assert ev["error"] == "ValueError: corrupt record at index 13"
    assert ev["raised_in"].startswith("misbehave (faulty_worker.py:")
    _assert_no_leftovers(report)


def test_real_oom_kill_in_a_memory_cgroup_is_named_oom(tmp_path):
    run_dir = tmp_path / "run"
    with memory_cgroup(600 * 1024 * 1024) as group:
        command = (
            f"echo $$ > {group}/cgroup.procs && exec {sys.executable} -m dlprobe run --quiet --out {run_dir} "
            f"{FAULTY} oom"
        )
        proc = subprocess.run(["sh", "-c", command], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    # The kernel kills the worker (its oom_score_adj is raised); now and then, 17 ms later and before the worker's
    # memory is freed, it kills the training process too, as it would under plain python: SIGKILL then (dlprobe dies of
    # it too), and the worker's death is still named from the kernel's record (seen on torch 2.15, about 1 run in 10).
    assert proc.returncode in (1, -signal.SIGKILL), proc.stderr
    report = _report(run_dir)
    ev = _finding(report, "worker-killed")["evidence"]
    assert ev["cause"] == "oom" and ev["signal"] == "SIGKILL"
    assert ev["worker_id"] == 0 and ev["index"] == 13
    assert ev.get("cgroup_oom_kills", 0) >= 1 or "kernel_log" in ev
    page = read_page(run_dir, ["worker-killed"]).all_text
    assert "loader 0 worker 0" in page and "killed: oom (SIGKILL)" in page  # the death, on the time axis
    assert "memory limit (cgroup)" in page
    # the verdict: the kill (or growth that explains it) leads; the script's RuntimeError only restates the kill
    assert report["verdict"]["code"] == report["findings"][0]["code"] in ("worker-killed", "cow-growth")
    assert all(f["explained_by"] == "worker-killed" for f in report["findings"] if f["code"] == "script-error")
    _assert_no_leftovers(report)


@needs_small_shm
def test_too_small_dev_shm_is_shm_exhausted(tmp_path):
    run_dir = tmp_path / "run"
    log = tmp_path / "job.log"  # stderr a file, as in a Slurm job: dlprobe reads back what the run wrote to it
    command = f"exec {sys.executable} -m dlprobe run --quiet --out {run_dir} {FAULTY} shm 2> {log}"
    proc = run_with_small_shm("8M", command, timeout=120)
    assert proc.returncode == 1, log.read_text()
    report = _report(run_dir)
    finding = _finding(report, "shm-exhausted")
    ev = finding["evidence"]
    assert ev["shm_total_bytes"] == 8 * 1024 * 1024
    assert ev["worker_id"] in (0, 1) and 13 in ev["batch_indices"] and ev["phase"] == "collate"
    assert "--shm-size" in finding["fix"] and "--ipc=host" in finding["fix"]
    kept = (run_dir / "stderr.log").read_bytes()
    assert kept.count(b"unable to allocate shared memory") >= 1
    assert log.read_bytes().startswith(kept)  # the script's own stderr, whole, in the file it wrote to (-q: only it)
    _assert_no_leftovers(report)


def test_probe_keeps_batches_seeds_and_worker_init_fn_under_spawn(tmp_path):
    script = str(SCRIPTS / "worker_init_loader.py")
    plain = subprocess.run([sys.executable, script, "spawn"], capture_output=True, text=True, timeout=120)
    run_dir = tmp_path / "run"
    probed = run_dlprobe(["run", "--quiet", "--out", str(run_dir), script, "spawn"], tmp_path, timeout=120)
    assert plain.returncode == 0 and probed.returncode == 0, probed.stderr
    assert probed.stdout == plain.stdout  # same batches, same worker ids and random numbers, fn restored
    slots = [s for s in read_all(run_dir).values() if s["role"] == "worker"]
    assert sorted((s["loader_id"], s["worker_id"]) for s in slots) == [(0, 0), (1, 0), (1, 1)]
    # map-style: the last batch each worker fetched, as printed by the script; iterable: stream positions
    printed = {tuple(row[0] for row in json.loads(line.split(" ", 1)[1])) for line in plain.stdout.splitlines()
               if line.startswith("map [")}  # fmt: skip
    for slot in slots:
        assert slot["phase"] == "done"
        if slot["kind"] == "map":
            assert slot["fetches"] == 6 and tuple(slot["indices"]) in printed
        else:
            assert slot["fetches"] == 3 and slot["kind"] == "iterable" and slot["indices"] == [8, 9]


def test_bad_hang_options_are_usage_errors(tmp_path):
    proc = run_dlprobe(["run", "--hang-timeout", "-1", FAULTY, "ok"], tmp_path)
    assert proc.returncode == 2 and proc.stderr.startswith("error: --hang-timeout")
    proc = run_dlprobe(["run", "--on-hang", "later", FAULTY, "ok"], tmp_path)
    assert proc.returncode == 2 and "--on-hang must be one of wait, stop" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_on_hang_wait_keeps_the_run_and_a_recovered_stall_is_a_warning(tmp_path):
    run_dir = tmp_path / "run"
    options = ["--hang-timeout", "2", "--on-hang", "wait"]
    proc = run_dlprobe(["run", "--out", str(run_dir), *options, str(SCRIPTS / "slow_sample.py"), "5"], tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "done: 32 samples\n"
    assert "still waiting (--on-hang wait" in proc.stderr
    report = _report(run_dir)
    finding = _finding(report, "worker-hang")
    assert finding["severity"] == "warning" and finding["title"].startswith("(recovered later)")
    assert finding["evidence"]["cause"] == "sleep" and finding["evidence"]["index"] == 13
    assert "__getitem__" in finding["evidence"]["stuck_frame"]


def test_a_worker_leaking_descriptors_is_named_with_its_limit_and_what_they_point_to(probe):
    result = probe("worker_leaks_descriptors.py")
    assert result.returncode != 0  # the script dies of it: Too many open files in a worker
    [finding] = result.findings("fd-leak")
    assert finding["severity"] == "error", finding["title"]
    assert "leaks file descriptors" in finding["title"] and "limit of 320 open files" in finding["title"]
    worker_pids = {w["pid"] for w in result.report["loaders"][0]["workers"]}
    assert finding["evidence"]["hit_limit_pids"] and set(finding["evidence"]["hit_limit_pids"]) <= worker_pids
    leaking = finding["evidence"]["leaking"]
    assert {row["pid"] for row in leaking} <= worker_pids and all(row["fd_limit"] == 320 for row in leaking)
    assert leaking[0]["fd_targets"][0]["target"].endswith("/shard_*.npy")
    assert "Too many open files" in finding["evidence"]["error"]


def test_a_dataset_closing_what_it_opens_has_no_descriptor_finding(probe):
    result = probe("worker_leaks_descriptors.py", "closed")
    assert result.returncode == 0, result.stderr
    assert result.findings("fd-leak") == []


def test_a_loop_keeping_its_batches_is_named_as_the_cause_of_the_main_process_running_out(probe):
    """The dataset opens nothing: the main process's descriptors are the storages of the batches the loop keeps
    (torch's file_descriptor strategy), so the cause is kept batches and the fix `.clone()`, not the dataset's."""
    result = probe("loop_keeps_batches.py")
    assert result.returncode != 0  # torch's "Too many open files. Communication with the workers is no longer ..."
    [finding] = result.findings("fd-leak")
    evidence = finding["evidence"]
    assert evidence["cause"] == "kept-batches" and evidence["holder"] == "main", finding["title"]
    main_pid = next(p["pid"] for p in evidence["leaking"] if p["role"] == "main")
    assert evidence["hit_limit_pids"] == [main_pid]
    shm, read = evidence["by_kind"]["torch-shm"], evidence["targets_read"]
    assert shm >= 0.8 * read and f"{shm} of {read} are torch shared-memory storages" in finding["title"]
    assert evidence["tensors_per_batch"] == 2 and 1.5 <= evidence["fds_per_batch"] <= 2.5  # one per tensor kept
    # the workers' counts stay flat beside the main process's climb: a worker holds the descriptors of the batches
    # it has in flight until the loop takes them (up to 8 more on a busy clean-clone CI run, where the main process
    # climbed by hundreds to its limit)
    main_row = next(p for p in evidence["leaking"] if p["role"] == "main")
    main_rise = main_row["fds_peak"] - main_row["fds_first"]
    assert len(evidence["workers_fds"]) == 2 and all(
        w["fds_max"] - w["fds_min"] < max(8, 0.1 * main_rise) for w in evidence["workers_fds"]
    ), (evidence["workers_fds"], main_rise)
    assert "Ruled out: files the dataset opens" in finding["detail"]
    assert "the workers' descriptors are flat" in finding["detail"]
    assert "batch.clone()" in finding["fix"] and "set_sharing_strategy('file_system')" in finding["fix"]
    assert "__getitem__" not in finding["fix"]


def test_a_loop_keeping_clones_of_its_batches_has_no_descriptor_finding(probe):
    result = probe("loop_keeps_batches.py", "clone")
    assert result.returncode == 0, result.stderr
    assert result.findings("fd-leak") == []


@needs_small_shm
@pytest.mark.parametrize("clone", [False, True], ids=["views", "clones"])
def test_batches_of_views_that_fill_dev_shm_are_named_with_what_they_send(tmp_path, clone):
    """Each sample is a 200 KB slice of a 4 MB decoded chunk and the collate_fn keeps the samples: a worker sends each
    view's whole storage, 20x the batch's own bytes, so a 32 MiB /dev/shm has no room and the batches drop. The
    finding says what the batches hold and send and to `.clone()` the slice; the clone twin fits and finds none."""
    run_dir = tmp_path / "run"
    script = f"{SCRIPTS / 'shm_views.py'}{' clone' if clone else ''}"
    proc = run_with_small_shm("32M", f"exec {sys.executable} -m dlprobe run --quiet --out {run_dir} {script}")
    report = _report(run_dir)
    codes = [f["code"] for f in report["findings"]]
    if clone:
        assert proc.returncode == 0, proc.stderr[-2000:]
        assert "batch-dropped" not in codes and "shm-pressure" not in codes, codes
        return
    assert proc.returncode == 1, proc.stderr[-2000:]  # DataLoader(timeout=8): the dropped batches never come
    dropped = _finding(report, "batch-dropped")
    ev = dropped["evidence"]
    assert ev["cause"] == "views" and ev["batch_bytes"] == 4 * 200_000 and ev["sent_bytes"] == 4 * 4_000_000
    assert "batches hold 781.2 KiB each but send 15.3 MiB (storages 20x larger: views" in dropped["title"]
    assert "Ruled out: an unpicklable batch" in dropped["detail"]
    assert dropped["fix"].startswith("Return copies, not views") and ".clone()" in dropped["fix"]
    pressure = _finding(report, "shm-pressure")
    assert pressure["evidence"]["views"] and pressure["evidence"]["loaders"][0]["storage_ratio"] == 20.0
    assert pressure["evidence"]["in_flight_estimate_bytes"] == 2 * 2 * 16_000_000  # what is sent, not 3.1 MiB
