"""One job report across ranks and nodes: real torchrun (gloo on CPU, 2 ranks x 2 workers) under `dlprobe run --`."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

from tests.conftest import (
    SCRIPTS,
    DlprobeResult,
    assert_no_probe_frames,
    memory_cgroup,
    orphan_torch_shm_removed,
    run_dlprobe,
)

MiB = 1024 * 1024


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def torchrun_command(*args: str) -> list[str]:
    """The torchrun that ships with torch: the console script next to this Python."""
    exe = Path(sys.executable).with_name("torchrun")
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "torch.distributed.run"]


def run_job(tmp_path: Path, script: str, *script_args: str, options: list[str] | None = None,
            name: str = "run") -> DlprobeResult:  # fmt: skip
    run_dir = tmp_path / name
    command = [*torchrun_command(), "--nproc-per-node", "2", "--master-addr", "127.0.0.1",
               "--master-port", str(free_port()), str(SCRIPTS / script), *script_args]  # fmt: skip
    args = ["run", "--out", str(run_dir), *(options or []), "--", *command]
    return DlprobeResult(run_dlprobe(args, tmp_path, timeout=300), run_dir)


def test_leaky_list_on_both_ranks_is_one_cow_growth_with_the_node_total(ddp_leaky_list_job):
    result = ddp_leaky_list_job
    assert result.returncode == 0, result.stderr
    assert "rank 0 checksum" in result.stdout and "rank 1 checksum" in result.stdout  # the ranks' output, unchanged
    report = result.report
    assert [(r["label"], r["workers"]) for r in report["ranks"]] == [("rank 0", 2), ("rank 1", 2)]
    [cow] = result.findings("cow-growth")
    assert cow["title"].startswith("Loader 0 on ranks 0-1: every worker copied up to ")
    assert "; node total " in cow["title"]
    assert [r["rank"] for r in cow["evidence"]["ranks"]] == ["rank 0", "rank 1"]
    node = report["job"]["nodes"][0]
    # the node total counts all 4 workers and both ranks: more than either rank's own peak
    assert node["pss_peak"] > max(r["pss_peak"] for r in report["ranks"])
    assert node["worker_processes"] == 4
    assert "Node total PSS peak" in result.stderr and "Ranks" in result.stderr
    assert result.findings("rank-duplicates") == []  # DistributedSampler: every rank its own share


def test_numpy_twin_has_no_cow_growth(tmp_path):
    result = run_job(tmp_path, "ddp_numpy_twin.py")
    assert result.returncode == 0, result.stderr
    assert result.findings("cow-growth") == []
    assert len(result.report["ranks"]) == 2


def test_a_worker_stuck_on_one_rank_is_one_hang_with_the_other_rank_in_a_collective(tmp_path):
    result = run_job(tmp_path, "ddp_rank_worker_hangs.py", options=["--hang-timeout", "8", "--on-hang", "stop"])
    assert result.returncode != 0
    hangs = result.findings("worker-hang") + result.findings("main-hang")
    [hang] = hangs  # one finding for the job, not one per rank
    assert hang["title"].startswith("Rank 1: Loader 0 worker ")
    assert "hangs on index 37" in hang["title"]
    assert hang["title"].endswith("rank 0 waits for it in all_reduce")
    [waiting] = hang["evidence"]["waiting_ranks"]
    assert waiting["rank"] == "rank 0" and waiting["collective"].startswith("all_reduce (distributed_c10d.py")
    assert "ddp_rank_worker_hangs.py" in waiting["collective"]  # the user's line that called it


def test_a_bad_sample_on_one_rank_names_the_rank_and_keeps_torchruns_exit_code(tmp_path):
    result = run_job(tmp_path, "ddp_rank_bad_sample.py")
    assert result.returncode == 1  # torchrun's own exit code
    assert "ChildFailedError" in result.stderr
    [bad] = result.findings("bad-sample")
    assert bad["title"].startswith("Rank 1: Sample index 37 raises ValueError")
    assert bad["evidence"]["index"] == 37
    assert bad["evidence"]["launcher"]["rank"] == 1 and bad["evidence"]["launcher"]["exit_code"] == 1
    assert result.findings("rank-failed") == []  # explained by bad-sample
    assert result.findings("rank-duplicates") == []  # distinct samples, DistributedSampler


def test_too_few_shards_leave_one_rank_without_batches(tmp_path):
    result = run_job(tmp_path, "ddp_uneven_shards.py")
    assert result.returncode == 0, result.stderr
    [uneven] = result.findings("uneven-ranks")
    assert uneven["evidence"]["batches_per_epoch"] == {"rank 0": 100, "rank 1": 0}
    assert uneven["title"].startswith("Loader 0 gives rank 1 no batches")
    # the same cause seen from rank 1's workers: none got a shard (2 shards for 2 ranks x 2 workers)
    [idle] = result.findings("idle-workers")
    assert idle["title"].startswith("Rank 1: Workers 0, 1 of loader 0 delivered no batch in epoch")
    assert "one of 2 ranks" in idle["detail"] and idle["fix"].startswith("Use at least 4 shards")


def test_ranks_without_a_distributed_sampler_read_the_same_samples(tmp_path):
    result = run_job(tmp_path, "ddp_same_samples.py")
    assert result.returncode == 0, result.stderr
    [dupes] = result.findings("rank-duplicates")
    assert dupes["title"].startswith("Loader 0 feeds the same samples to ranks 0-1")


def test_two_nodes_merge_into_one_job_report(tmp_path):
    port = str(free_port())
    procs = []
    for node in (0, 1):
        command = [*torchrun_command(), "--nnodes", "2", "--nproc-per-node", "1", "--node-rank", str(node),
                   "--master-addr", "127.0.0.1", "--master-port", port, str(SCRIPTS / "ddp_leaky_list.py")]  # fmt: skip
        args = [sys.executable, "-m", "dlprobe", "run", "-q", "--out", str(tmp_path / f"node{node}"), "--", *command]
        env = {**os.environ, "COLUMNS": "120"}
        procs.append(subprocess.Popen(args, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                      text=True))  # fmt: skip
    outputs = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outputs
    merged = run_dlprobe(["report", str(tmp_path / "node0"), str(tmp_path / "node1"), "--json", "job.json"], tmp_path)
    assert merged.returncode == 0, merged.stderr
    report = json.loads((tmp_path / "job.json").read_text())
    assert [r["label"] for r in report["ranks"]] == ["node 0 rank 0", "node 1 rank 1"]
    assert [n["node_rank"] for n in report["job"]["nodes"]] == [0, 1]
    [cow] = [f for f in report["findings"] if f["code"] == "cow-growth"]
    assert cow["title"].startswith("Loader 0 on node 0 rank 0, node 1 rank 1: every worker copied")
    assert "node 0 total" in cow["title"] and "node 1 total" in cow["title"]
    assert "node 0 rank 0" in merged.stdout and "Node 1 total PSS peak" in merged.stdout  # report prints to stdout
    # each node's own report is its part of the job: its one rank
    own = json.loads((tmp_path / "node1" / "report.json").read_text())
    assert [r["label"] for r in own["ranks"]] == ["rank 1"] and own["job"]["nodes"][0]["node_rank"] == 1


def test_report_of_a_directory_that_is_not_a_run(tmp_path):
    (tmp_path / "empty").mkdir()
    result = run_dlprobe(["report", str(tmp_path), str(tmp_path / "empty")], tmp_path)
    assert result.returncode == 2
    assert result.stderr.count("error:") == 1 and "Traceback" not in result.stderr


def test_lightning_ddp_ranks_are_one_job_report(tmp_path):
    import pytest

    pytest.importorskip("lightning")
    run_dir = tmp_path / "run"
    proc = run_dlprobe(["run", "--out", str(run_dir), str(SCRIPTS / "lightning_ddp.py")], tmp_path, timeout=300)
    assert proc.returncode == 0, proc.stderr
    report = json.loads((run_dir / "report.json").read_text())
    # rank 1 is rank 0's child (Lightning re-launches the script): each rank keeps only its own worker
    assert [(r["label"], r["workers"], r["batches"]) for r in report["ranks"]] == [("rank 0", 1, 4), ("rank 1", 1, 4)]
    assert "Ranks" in proc.stderr


def test_a_lightning_rank_raising_in_training_step_is_named_with_its_error(tmp_path):
    import pytest

    pytest.importorskip("lightning")
    script = str(SCRIPTS / "lightning_ddp.py")
    with orphan_torch_shm_removed():
        plain = subprocess.run([sys.executable, script, "--raise-on-rank", "1"], cwd=tmp_path, capture_output=True,
                               text=True, timeout=300)  # fmt: skip
        result = DlprobeResult(
            run_dlprobe(["run", "--out", str(tmp_path / "run"), script, "--raise-on-rank", "1"], tmp_path, timeout=300),
            tmp_path / "run",
        )
    # Lightning's _ChildProcessObserver (rank 0) polls its re-launched ranks every 5 s and SIGKILLs rank 0 once one
    # of them failed: rank 0 exits 1 if its own error ends it first, dies of SIGKILL if the poll comes first. Plain
    # python runs the same race, so each run's code is one of the two, and never 0.
    ends = (1, -signal.SIGKILL)
    assert plain.returncode in ends and result.returncode in ends, (plain.returncode, result.returncode)
    assert "ValueError: loss is nan on rank 1" in result.stderr
    assert_no_probe_frames(result.stderr)
    errors = result.findings("script-error")
    assert (
        errors[0]["severity"] == "error"
        and errors[0]["title"] == "Rank 1: The script raised ValueError: loss is nan on rank 1"
    )
    # rank 0, if it raised at all before Lightning stopped it, lost its peer in a collective: a consequence
    assert all(e["severity"] == "warning" and "after rank 1 failed" in e["title"] for e in errors[1:])


def test_a_rank_that_dies_before_its_loader_is_named_from_torchruns_summary(tmp_path):
    result = run_job(tmp_path, "ddp_torchrun.py", "--die", "1:7")
    assert result.returncode == 1  # torchrun's own code for a failed rank
    [failed] = result.findings("rank-failed")
    assert failed["title"].startswith("Rank 1 (pid ") and "with exit code 7" in failed["title"]
    assert "never built a DataLoader" in failed["detail"]
    assert [r["label"] for r in result.report["ranks"]] == ["rank 0"]


def test_a_rank_that_raises_before_its_loader_is_named_with_its_error(tmp_path):
    # No DataLoader yet, so only the rank's own excepthook can say what ended it; torchrun's summary has no
    # traceback (the script does not use @record), so without it the report would say "exit code 1".
    result = run_job(tmp_path, "ddp_torchrun.py", "--raise-early", "1")
    assert result.returncode == 1
    assert "RuntimeError: no shard for rank 1" in result.stderr  # the rank's own traceback still comes through
    assert_no_probe_frames(result.stderr)
    [error] = [f for f in result.findings("script-error") if f["severity"] == "error"]
    assert error["title"].startswith("Rank 1 (pid ") and "RuntimeError: no shard for rank 1" in error["title"]
    assert error["evidence"]["file"].endswith("ddp_torchrun.py")
    assert error["evidence"]["launcher"]["rank"] == 1
    assert result.findings("rank-failed") == []  # explained by the rank's own error
    for later in result.findings("script-error"):  # rank 0, if torchrun had not stopped it yet: gloo lost its peer
        assert later == error or (later["severity"] == "warning" and "after rank 1 failed" in later["title"])


def test_a_ranks_worker_killed_by_the_oom_killer_is_named_with_its_rank(tmp_path: Path):
    # Issue 21: the analysis of this job ended in a TypeError (node-oversubscribed's evidence "ranks" was a count).
    run_dir = tmp_path / "run"
    torchrun = [*torchrun_command(), "--nproc-per-node", "2", "--master-addr", "127.0.0.1", "--master-port",
                str(free_port()), str(SCRIPTS / "ddp_torchrun.py"), "--oom", "1:7"]  # fmt: skip
    with memory_cgroup(1536 * MiB) as group:
        command = (
            f"echo $$ > {group}/cgroup.procs && exec {sys.executable} -m dlprobe run --quiet --out {run_dir} -- "
            + " ".join(torchrun)
        )
        proc = subprocess.run(["sh", "-c", command], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert proc.returncode != 0
    assert "dlprobe/analysis" not in proc.stderr, proc.stderr[-3000:]  # no traceback of dlprobe's own
    report = json.loads((run_dir / "report.json").read_text())
    [killed] = [f for f in report["findings"] if f["code"] == "worker-killed"]
    assert killed["evidence"]["cause"] == "oom" and killed["evidence"]["rank"] == "rank 1", killed
    assert killed["evidence"]["index"] == 7
    assert (run_dir / "report.html").exists()
