"""`dlprobe run` under any launcher: real torchrun (gloo on CPU), `-m`, shell commands, Lightning DDP, two "nodes"."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

from tests.conftest import SCRIPTS, assert_no_probe_frames, run_dlprobe

DDP = str(SCRIPTS / "ddp_torchrun.py")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def torchrun(*args: str, nproc: int = 2) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(nproc),
            "--master-port", str(free_port()), *args]  # fmt: skip


def events(run_dir: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines() if line.strip()]


def of_kind(run_dir: Path, kind: str) -> list[dict[str, Any]]:
    return [e for e in events(run_dir) if e["ev"] == kind]


def sampled_pids(run_dir: Path) -> set[int]:
    lines = (run_dir / "samples.jsonl").read_text().splitlines()
    return {rec["pid"] for rec in map(json.loads, lines) if rec.get("k") == "proc"}


def assert_nothing_left(run_dir: Path, marker: str) -> None:
    """No process of the job is alive, and /dev/shm holds nothing named after one of its pids."""
    time.sleep(0.2)  # a worker reaped by its parent a moment after the parent's own exit
    alive = []
    for proc in psutil.process_iter(["cmdline", "status"]):
        try:
            ours = any(marker in part for part in proc.info["cmdline"] or [])
            if ours and proc.info["status"] != psutil.STATUS_ZOMBIE:
                alive.append(proc.pid)
        except psutil.Error:  # noqa: S110 - exited while listed: not alive
            pass
    assert not alive, f"left running: {alive}"
    pids = {str(pid) for pid in sampled_pids(run_dir)}
    left = [name for name in os.listdir("/dev/shm") if any(f"_{pid}_" in name for pid in pids)]
    assert not left, left


def test_torchrun_two_ranks_each_with_workers(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    proc = run_dlprobe(["run", "-q", "--out", str(run_dir), "--", *torchrun(DDP, "--epochs", "2")], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    # both ranks' output comes through; each rank saw every square once per epoch, summed by all_reduce
    assert "rank 0/2 local 0 total" in proc.stdout and "rank 1/2 local 1 total" in proc.stdout
    processes = of_kind(run_dir, "process")
    by_rank = {e["rank"]: e for e in processes}
    assert sorted(by_rank) == [0, 1]
    assert by_rank[0]["pid"] != by_rank[1]["pid"]
    assert {e["world_size"] for e in processes} == {2}
    assert {e["local_rank"] for e in processes} == {0, 1}
    assert {e["node_rank"] for e in processes} == {0}
    # each rank writes its identity before its first loader event
    for rank in (0, 1):
        pid = by_rank[rank]["pid"]
        mine = [e["ev"] for e in events(run_dir) if e["pid"] == pid]
        assert mine.index("process") < mine.index("loader")
    # loaders keyed by (writer pid, loader id): both ranks have a loader 0 with two epochs of 8 batches
    ends = {(e["pid"], e["loader"], e["epoch"]): e["batches"] for e in of_kind(run_dir, "epoch_end")}
    for rank in (0, 1):
        pid = by_rank[rank]["pid"]
        assert ends[(pid, 0, 0)] == 8 and ends[(pid, 0, 1)] == 16
    workers = {(e["pid"], w["pid"]) for e in of_kind(run_dir, "epoch") for w in e["workers"] or []}
    assert {writer for writer, _ in workers} == {by_rank[0]["pid"], by_rank[1]["pid"]}
    sampled = sampled_pids(run_dir)
    assert {w for _, w in workers} <= sampled
    assert {by_rank[0]["pid"], by_rank[1]["pid"]} <= sampled
    meta = json.loads((run_dir / "meta.json").read_text())
    assert meta["launch"] == "command" and meta["command"][2] == "torch.distributed.run"
    assert meta["node_rank"] is None
    assert_nothing_left(run_dir, DDP)


def test_torchrun_rank_raising_keeps_torchruns_exit_code(tmp_path: Path) -> None:
    command = torchrun(DDP, "--fail", "1:13")
    plain = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=180)
    assert plain.returncode != 0
    run_dir = tmp_path / "run"
    command[command.index("--master-port") + 1] = str(free_port())
    proc = run_dlprobe(["run", "-q", "--out", str(run_dir), "--", *command], tmp_path)
    assert proc.returncode == plain.returncode, proc.stderr[-3000:]
    assert "ChildFailedError" in proc.stderr and "sample 13 is corrupt" in proc.stderr
    rank_of = {e["pid"]: e["rank"] for e in of_kind(run_dir, "process")}
    errors = of_kind(run_dir, "loader_error")
    assert [rank_of[e["pid"]] for e in errors] == [1]
    assert "sample 13 is corrupt" in errors[0]["message"]
    result = json.loads((run_dir / "result.json").read_text())
    assert result["exit_code"] == plain.returncode
    assert_nothing_left(run_dir, DDP)


def test_torchrun_hang_names_the_stuck_rank_and_shows_the_other_in_a_collective(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    options = ["run", "-q", "--out", str(run_dir), "--hang-timeout", "4", "--on-hang", "stop"]
    proc = run_dlprobe([*options, "--", *torchrun(DDP, "--block", "1:13")], tmp_path, timeout=240)
    assert proc.returncode != 0
    rank_of = {e["pid"]: e["rank"] for e in of_kind(run_dir, "process")}
    record = json.loads((run_dir / "hangs" / "hang-1.json").read_text())
    assert rank_of[record["main_pid"]] == 1  # the rank whose loop waits for a batch, not rank 0 or torchrun
    assert record["processes"][0]["pid"] == record["main_pid"]
    stuck = [p for p in record["processes"] if 13 in ((p.get("inflight") or {}).get("indices") or [])]
    assert len(stuck) == 1 and stuck[0]["role"] == "worker" and stuck[0]["main_pid"] == record["main_pid"]
    mains = {p["pid"]: p for p in record["processes"] if p["role"] == "main"}
    rank0 = next(pid for pid, rank in rank_of.items() if rank == 0)
    assert set(mains) == set(rank_of)
    if mains[rank0].get("stack"):  # py-spy (or faulthandler) could read it: rank 0 waits in the epoch's all_reduce
        names = [f["name"] for thread in mains[rank0]["stack"] for f in thread["frames"]]
        assert "all_reduce" in names, names
    result = json.loads((run_dir / "result.json").read_text())
    assert result["stop_reason"] == "hang" and result["survivors"] == []
    assert_nothing_left(run_dir, DDP)


def test_sigterm_to_dlprobe_reaches_the_whole_job(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    command = [sys.executable, "-m", "dlprobe", "run", "-q", "--out", str(run_dir), "--hang-timeout", "0", "--",
               *torchrun(DDP, "--block", "1:1")]  # fmt: skip
    env = {**os.environ, "COLUMNS": "120"}
    # Files, not pipes: a worker left running keeps the job's output open, as it would without dlprobe.
    out = (tmp_path / "out.txt").open("wb")
    proc = subprocess.Popen(command, cwd=tmp_path, env=env, stdout=out, stderr=out)
    try:
        deadline = time.time() + 120
        # Both ranks iterate their loaders and rank 0 has finished its epoch: the job is up and quiet (rank 1 blocked
        # on index 1, rank 0 in all_reduce). A SIGTERM while a worker is handing a batch over can leave torch's own
        # shared-memory segment behind, with or without dlprobe; that race is torch's, not what this test is about.
        while time.time() < deadline:
            if (
                (run_dir / "events.jsonl").exists()
                and len(of_kind(run_dir, "epoch")) >= 2
                and of_kind(run_dir, "epoch_end")
            ):
                break
            time.sleep(0.2)
        else:
            pytest.fail("the job never started its loaders")
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
    finally:
        out.close()
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode != 0
    result = json.loads((run_dir / "result.json").read_text())
    # A worker blocked in __getitem__ (rank 1's, on index 1) never notices its rank is gone: torchrun leaves it
    # running, and so does dlprobe (no signal of its own reaches the job); the report names it.
    left = [p for p in psutil.process_iter(["cmdline", "status"]) if DDP in (p.info["cmdline"] or [])
            and p.info["status"] != psutil.STATUS_ZOMBIE]  # fmt: skip
    assert {p.pid for p in left} <= set(result.get("orphans_left") or []), (left, result)
    for leftover in left:  # the test's own clean-up
        leftover.kill()
    psutil.wait_procs(left, timeout=30)
    assert_nothing_left(run_dir, DDP)


def make_package(root: Path) -> None:
    """mypkg/train.py: prints how it was run, iterates a DataLoader with 2 spawn-started workers, exits 4."""
    package = root / "mypkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "train.py").write_text(
        "import sys\n"
        "import torch\n"
        "from torch.utils.data import DataLoader, TensorDataset\n"
        "if __name__ == '__main__':\n"
        "    print('argv', sys.argv[1:], 'main', __name__, 'spec', __spec__.name, flush=True)\n"
        "    loader = DataLoader(TensorDataset(torch.arange(16.0)), batch_size=4, num_workers=2,\n"
        "                        multiprocessing_context='spawn')\n"
        "    print('batches', sum(1 for _ in loader))\n"
        "    sys.exit(4)\n"
    )


def test_module_in_a_package_runs_as_python_m_does(tmp_path: Path) -> None:
    make_package(tmp_path)
    run_dir = tmp_path / "run"
    proc = run_dlprobe(["run", "-q", "--out", str(run_dir), "-m", "mypkg.train", "--lr", "3", "-q"], tmp_path)
    assert proc.returncode == 4, proc.stderr[-3000:]
    assert "argv ['--lr', '3', '-q'] main __main__ spec mypkg.train" in proc.stdout
    assert "batches 4" in proc.stdout
    # spawn-started workers run the injected sitecustomize too, but build no loader: one process, one loader
    assert len(of_kind(run_dir, "process")) == 1
    assert len(of_kind(run_dir, "loader")) == 1
    workers = [w["pid"] for e in of_kind(run_dir, "epoch") for w in e["workers"] or []]
    assert len(workers) == 2
    meta = json.loads((run_dir / "meta.json").read_text())
    assert (meta["launch"], meta["script"], meta["argv"]) == ("module", "mypkg.train", ["--lr", "3", "-q"])


def test_missing_module_and_missing_command_are_one_error_line(tmp_path: Path) -> None:
    for args in (["run", "-m", "nosuch_pkg.train"], ["run", "--", "nosuch-launcher", "train.py"]):
        proc = run_dlprobe(args, tmp_path)
        assert proc.returncode == 2, proc.stderr
        lines = proc.stderr.strip().splitlines()
        assert lines[0].startswith("error: ") and "Traceback" not in proc.stderr
        assert lines[1].startswith("hint: ")
    assert not (tmp_path / "dlprobe-runs").exists()


def test_command_without_python_keeps_its_exit_code_and_output(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    proc = run_dlprobe(["run", "--out", str(run_dir), "--", "bash", "-c", "echo out; echo err >&2; exit 3"], tmp_path)
    assert proc.returncode == 3
    assert proc.stdout == "out\n"
    assert proc.stderr.startswith("err\n") and "Traceback" not in proc.stderr
    assert json.loads((run_dir / "result.json").read_text())["exit_code"] == 3
    codes = [f["code"] for f in json.loads((run_dir / "report.json").read_text())["findings"]]
    assert "probe-degraded" not in codes  # no Python, no start event: nothing the probe failed at


def test_users_own_sitecustomize_still_runs_once(tmp_path: Path) -> None:
    site = tmp_path / "usersite"
    site.mkdir()
    (site / "sitecustomize.py").write_text("import sys\nsys.stderr.write('USER-SITECUSTOMIZE\\n')\n")
    script = tmp_path / "hello.py"
    script.write_text("import sitecustomize\nprint('hello from', sitecustomize.__file__)\n")
    env = {"PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")])}
    for args in (["--", sys.executable, str(script)], [str(script)]):
        run_dir = tmp_path / f"run{len(args)}"
        proc = run_dlprobe(["run", "-q", "--out", str(run_dir), *args], tmp_path, env=env)
        assert proc.returncode == 0, proc.stderr
        # dlprobe's own python runs it too (same PYTHONPATH) and shares the stderr: once each, never twice in the target
        assert proc.stderr.count("USER-SITECUSTOMIZE") == 2, proc.stderr
        assert not (run_dir / "stderr.log").exists()  # stderr was a pipe: left to the script, not copied
        assert f"hello from {site / 'sitecustomize.py'}" in proc.stdout


def test_lightning_ddp_ranks_relaunched_by_lightning_are_probed(tmp_path: Path) -> None:
    pytest.importorskip("lightning")
    run_dir = tmp_path / "run"
    env = {"MASTER_PORT": str(free_port())}
    proc = run_dlprobe(["run", "-q", "--out", str(run_dir), str(SCRIPTS / "lightning_ddp.py")], tmp_path,
                       timeout=300, env=env)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    processes = of_kind(run_dir, "process")
    ranks = {e["rank"] for e in processes if e["rank"] is not None}
    assert ranks == {0, 1}, processes
    assert len({e["pid"] for e in processes}) == 2
    assert {e["world_size"] for e in processes if e["rank"] is not None} == {2}


def test_two_nodes_each_under_its_own_dlprobe(tmp_path: Path) -> None:
    port = str(free_port())
    procs = []
    for node in (0, 1):
        command = [sys.executable, "-m", "dlprobe", "run", "-q", "--out", str(tmp_path / f"node{node}"), "--",
                   sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--node-rank", str(node),
                   "--nproc-per-node", "1", "--master-addr", "127.0.0.1", "--master-port", port, DDP]  # fmt: skip
        procs.append(subprocess.Popen(command, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    outputs = [p.communicate(timeout=240) for p in procs]
    for node, (proc, (out, err)) in enumerate(zip(procs, outputs, strict=True)):
        assert proc.returncode == 0, err[-3000:]
        run_dir = tmp_path / f"node{node}"
        assert json.loads((run_dir / "meta.json").read_text())["node_rank"] == node
        (identity,) = of_kind(run_dir, "process")
        assert (identity["rank"], identity["node_rank"], identity["world_size"]) == (node, node, 2)
        assert f"rank {node}/2" in out


def test_check_gates_a_torchrun_job(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    args = ["check", "-q", "--out", str(run_dir), "--max-batches", "3", "--fail-on", "no-loader", "--"]
    proc = run_dlprobe([*args, *torchrun(DDP, "--epochs", "3")], tmp_path, timeout=240)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    check = json.loads((run_dir / "check.json").read_text())
    assert check["passed"] and check["stop"]["reason"] == "max_batches"
    # every rank stops itself after 3 batches (the limit is per process, as num_workers is per rank)
    stops = of_kind(run_dir, "stop")
    assert sorted(e["batches"] for e in stops) == [3, 3] and len({e["pid"] for e in stops}) == 2


def test_scan_and_tune_take_one_process_not_a_command(tmp_path: Path) -> None:
    for command in ("scan", "tune"):
        proc = run_dlprobe([command, "--", "torchrun", "--nproc-per-node", "2", "train.py"], tmp_path)
        assert proc.returncode == 2
        assert proc.stderr.startswith(f"error: dlprobe {command} runs one process, not a command after --")
        assert "Traceback" not in proc.stderr


def test_a_rank_that_dies_before_its_loader(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    proc = run_dlprobe(["run", "--out", str(run_dir), "--", *torchrun(DDP, "--die", "1:7")], tmp_path, timeout=240)
    assert proc.returncode == 1, proc.stderr[-3000:]  # torchrun's own code for a failed rank
    assert "exitcode  : 7" in proc.stderr  # torchrun's own summary names the rank's code
    assert_no_probe_frames(proc.stderr)  # no traceback through dlprobe's code, only torchrun's own
    assert (run_dir / "report.json").exists()
    assert {e["rank"] for e in of_kind(run_dir, "process")} <= {0}
    assert_nothing_left(run_dir, DDP)


def test_scan_takes_a_module(tmp_path: Path) -> None:
    make_package(tmp_path)
    proc = run_dlprobe(["scan", "-m", "mypkg.train", "--workers", "1"], tmp_path, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "checked 16 of 16 samples" in proc.stdout and "no bad samples" in proc.stdout
