"""`straggler-rank` on synthetic jobs: which rank's data waits hold the others back, and whether it stays or moves."""

from __future__ import annotations

from typing import Any

import pytest

from dlprobe.analysis.job import straggler as job_straggler
from dlprobe.analysis.job.findings import analyze_job
from dlprobe.analysis.job.model import split_job
from tests.unit import fakes

FLAT = [300 * fakes.MiB] * 3


def wobble(wait_s: float, n: int) -> list[float]:
    """n waits around wait_s, +-10%: per-batch noise, not a constant."""
    return [wait_s * (0.9 + 0.2 * ((i * 7) % 10) / 9) for i in range(n)]


def epochs_of(pid: int, waits_per_epoch: list[list[float]], orders: list[str]) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    for epoch, (waits, digest) in enumerate(zip(waits_per_epoch, orders, strict=True)):
        t = 101.0 + 10 * epoch
        events += [
            {"ev": "epoch", "t": t, "pid": pid, "loader": 0, "epoch": epoch, "iter_s": 0.1, "workers": None},
            {"ev": "batches", "t": t + 5, "pid": pid, "loader": 0, "epoch": epoch, "waits": waits,
             "total": len(waits)},
            {"ev": "epoch_end", "t": t + 6, "pid": pid, "loader": 0, "epoch": epoch, "batches": len(waits)},
            {"ev": "sample_order", "t": t + 6, "pid": pid, "loader": 0, "epoch": epoch, "digest": digest,
             "batches": len(waits), "samples": 2 * len(waits), "sampler": "DistributedSampler", "shuffle": True},
        ]  # fmt: skip
    return events


def built(worker_pid: int, build_s: float, n: int) -> dict[str, Any]:
    """The worker's own clock of each batch it built (worker_batches): [task, start, fetch_s, collate_s, index]."""
    rows = [[i, 0.05 * i, b, 0.0, 2 * i] for i, b in enumerate(wobble(build_s, n))]
    return {"ev": "worker_batches", "t": 120.0, "pid": worker_pid, "loader": 0, "worker": 0, "t0": 101.0, "rows": rows}


def job(ranks: list[list[list[float]]], orders: list[list[str]] | None = None, nodes: list[int] | None = None,
        builds: list[float] | None = None):  # fmt: skip
    """One job; each rank's one worker builds a batch in `builds[rank]` s (default: the rank's median wait, as a
    loader that cannot keep up waits as long as it builds)."""
    events: list[dict[str, Any]] = []
    processes = []
    for rank, waits in enumerate(ranks):
        pid, workers = 10 * (rank + 1), [10 * (rank + 1) + 1]
        flat = sorted(w for e in waits for w in e)
        build_s = builds[rank] if builds else flat[len(flat) // 2]
        events.append(built(workers[0], build_s, sum(len(e) for e in waits)))
        node = nodes[rank] if nodes else 0
        head = fakes.rank_events(pid, rank, workers, batches=0, ended=False, world_size=len(ranks), node_rank=node)
        events += [e for e in head if e["ev"] != "epoch"]
        events += epochs_of(pid, waits, (orders or [[f"{rank}{e}" for e in range(len(waits))]] * len(ranks))[rank])
        processes += fakes.rank_processes(pid, workers, FLAT)
    return split_job([fakes.job_run(events, processes, usable_cores=8)])


def stragglers(the_job) -> list:
    return [f for f in analyze_job(the_job) if f.code == "straggler-rank"]


def test_the_rank_whose_waits_stand_out_is_named_with_node_and_rank():
    fast, slow = [wobble(0.002, 25)] * 2, [wobble(0.050, 25)] * 2
    [finding] = stragglers(job([fast, slow, fast]))
    assert finding.title.startswith("Node 0 rank 1's loader 0 holds the other ranks back")
    assert "it waited 50.0 ms per batch for data, the others 2.0 ms" in finding.title
    assert finding.evidence["straggler"] == "node 0 rank 1" and finding.evidence["rank"] == "rank 1"
    assert [r["steady_batches"] for r in finding.evidence["rank_waits"]] == [48, 48, 48]  # each epoch's first left out
    supply = [r["supply_s_per_batch"] for r in finding.evidence["rank_waits"]]
    assert supply == pytest.approx([0.002, 0.050, 0.002], rel=0.1)  # its one worker's own build time per batch
    # the slowest in both epochs while its samples changed: the rank or its node, not its data
    assert finding.evidence["slowest_by_epoch"] == ["node 0 rank 1"] * 2
    assert finding.evidence["slowness_follows"] == "stays" and "the rank or its node is slow" in finding.detail


def test_even_ranks_have_no_straggler():
    even = [wobble(0.020, 25)] * 2
    assert stragglers(job([even, even])) == []
    assert stragglers(job([[wobble(0.020, 25)[::-1]] * 2, even, even])) == []


def test_a_rank_behind_by_its_start_alone_is_no_straggler():
    # Measured on a busy machine with identical datasets (20 ms a sample, batches of 2): one rank waited 40 ms a
    # batch, the other 1.4 ms, their workers both 41 ms a batch. The waits single out a rank, the loaders do not.
    behind, ahead = [wobble(0.040, 25)] * 2, [wobble(0.0014, 25)] * 2
    assert stragglers(job([ahead, behind], builds=[0.041, 0.041])) == []
    assert stragglers(job([ahead, behind], builds=[0.041, 0.080])) != []  # its loader slower too: it is one


def test_under_the_floor_or_too_few_batches_is_no_straggler():
    fast = [wobble(0.002, 25)] * 2
    assert stragglers(job([fast, [wobble(0.006, 25)] * 2])) == []  # 4 ms above: under the 5 ms floor
    assert stragglers(job([fast, [wobble(0.008, 25)] * 2])) != []  # 6 ms above, 4 spreads of 0.3 ms: over it
    short = [wobble(0.002, 20)], [wobble(0.050, 20)]  # 19 steady batches per rank
    assert stragglers(job(list(short))) == []


def test_a_spread_out_rank_is_held_to_its_spread():
    noisy = [[0.002, 0.060] * 12 + [0.002]] * 2  # half its batches slow: a spread as wide as the gap
    assert stragglers(job([noisy, [wobble(0.040, 25)] * 2])) == []


def test_across_nodes_the_title_names_the_node():
    fast, slow = [wobble(0.002, 25)] * 2, [wobble(0.050, 25)] * 2
    [finding] = stragglers(job([fast, fast, slow, fast], nodes=[0, 0, 1, 1]))
    assert finding.title.startswith("Node 1 rank 2's loader 0")


def test_what_the_epochs_say():
    assert job_straggler._where("node 0 rank 1", ["node 0 rank 1"], True)[0] == "unknown"
    follows, text = job_straggler._where("node 0 rank 1", ["node 0 rank 1", "node 0 rank 0"], True)
    assert follows == "moves" and "follows the data" in text
    follows, text = job_straggler._where("node 0 rank 1", ["node 0 rank 1"] * 2, False)
    assert follows == "stays" and "cannot be told apart" in text
