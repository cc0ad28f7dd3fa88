"""`straggler-rank` on real torchrun jobs (gloo on CPU, an all_reduce every step as DDP does): one rank whose
dataset sleeps 15 times longer per sample is named, even ranks are not."""

from __future__ import annotations

from pathlib import Path

from tests.integration.test_job_report import run_job


def test_the_rank_with_the_slow_reads_is_the_straggler(tmp_path: Path) -> None:
    result = run_job(tmp_path, "ddp_straggler.py", "--slow-rank", "1", "--slow-s", "0.03", "--fast-s", "0.002")
    assert result.returncode == 0, result.stderr[-3000:]
    [finding] = result.findings("straggler-rank")
    assert finding["title"].startswith("Node 0 rank 1's loader 0 holds the other ranks back"), finding["title"]
    evidence = finding["evidence"]
    assert evidence["straggler"] == "node 0 rank 1" and evidence["rank"] == "rank 1"
    waits = {row["rank"]: row for row in evidence["rank_waits"]}
    assert waits["node 0 rank 1"]["median_wait_s"] > waits["node 0 rank 0"]["median_wait_s"]
    assert all(row["steady_batches"] >= 20 for row in waits.values())
    # Its reads sleep: the workers wait, they do not compute; shuffled each epoch, and still the slow one
    assert evidence["worker_bound"] == "I/O-bound"
    assert evidence["slowest_by_epoch"] == ["node 0 rank 1", "node 0 rank 1"]
    assert evidence["slowness_follows"] == "stays" and "the rank or its node is slow" in finding["detail"]


def test_even_ranks_have_no_straggler(tmp_path: Path) -> None:
    # Both ranks wait for their data (20 ms a sample, one worker each): waits of the same size, no straggler.
    result = run_job(tmp_path, "ddp_straggler.py", "--fast-s", "0.02")
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.findings("straggler-rank") == []
    assert len(result.report["ranks"]) == 2  # both ranks were seen, with their waits
