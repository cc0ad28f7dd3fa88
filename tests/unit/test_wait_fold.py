"""A long run's per-batch waits folded past a size (in_training/wait_fold.py) and read back (analysis/run/model.py):
bounded on the writer's side, the same totals, percentiles and findings on the reader's."""

from __future__ import annotations

import math
import random
from typing import Any

from dlprobe.analysis import analyze
from dlprobe.analysis.measures.loop_timing import loop_timing
from dlprobe.analysis.measures.stats import wait_summary
from dlprobe.analysis.run.model import loaders_from_events
from dlprobe.in_training.wait_fold import WaitFolder
from tests.unit.fakes import cpu_series, parent, run, worker

BATCHES = 20_000
CHUNK = 25  # batches per `batches` event (the hooks' 0.25 s chunks)


def _waits(seed: int = 0) -> list[tuple[float, float]]:
    """(wait, hand-over) per batch: a loop waiting most of its time, slower in its second half."""
    rng = random.Random(seed)
    out = []
    for i in range(BATCHES):
        slow = 1.5 if i > BATCHES // 2 else 1.0
        out.append((round(rng.uniform(0.004, 0.010) * slow, 6), round(rng.uniform(0.0005, 0.0015), 6)))
    return out


def _events(cap: int | None, epochs: int = 2) -> list[dict[str, Any]]:
    """A loader's events as the hooks write them, its waits folded past `cap` kept per stride (None: never)."""
    folder = WaitFolder(cap if cap is not None else 10**12)
    events: list[dict[str, Any]] = [
        {"ev": "loader", "t": 100.0, "pid": 1, "loader": 0, "num_workers": 2, "batch_size": 8, "prefetch_factor": 2,
         "start_method": "fork", "dataset": {"type": "x.DS", "len": BATCHES * 8, "suspects": [], "est_bytes": 0}},
    ]  # fmt: skip
    t = 100.5
    for epoch in range(epochs):
        events.append({"ev": "epoch", "t": t, "pid": 1, "loader": 0, "epoch": epoch, "iter_s": 0.05,
                       "workers": [{"pid": 10 + w, "worker_id": w} for w in range(2)]})  # fmt: skip
        for i, (wait, handover) in enumerate(_waits(epoch)):
            folder.add(wait, handover, epoch_first=i == 0)
            t += wait + 0.003  # the loop's own step after each batch
            if (i + 1) % CHUNK == 0 or i == BATCHES - 1:
                chunk = folder.take()
                assert chunk is not None
                events.append({"ev": "batches", "t": t, "pid": 1, "loader": 0, "epoch": epoch, **chunk})
        events.append({"ev": "epoch_end", "t": t + 0.01, "pid": 1, "loader": 0, "epoch": epoch})
    return events


def test_the_waits_kept_grow_with_the_log_of_the_batches():
    folder = WaitFolder(kept_per_stride=100)
    kept = counted = 0
    for i in range(100_000):
        folder.add(0.001, 0.0001, epoch_first=i == 0)
        if i % 50 == 49:
            chunk = folder.take()
            assert chunk is not None
            kept += len(chunk["waits"])
            counted += chunk.get("n", len(chunk["waits"]))
            assert len(chunk["handovers"]) == len(chunk["waits"])
    assert counted == 100_000
    assert kept <= 100 * (math.log2(100_000 / 100) + 2)  # 100 at each stride 1, 2, 4, ... 512: about 1,000
    assert folder.stride == 512


def test_an_unfolded_chunk_is_written_as_before():
    folder = WaitFolder(kept_per_stride=1000)
    for _ in range(3):
        folder.add(0.0012345678, None, epoch_first=False)
    assert folder.take() == {"waits": [0.001235] * 3}  # no hand-over timed: none said, no folded totals
    assert folder.take() is None


def test_a_folded_run_gives_the_totals_percentiles_and_findings_of_the_whole_one():
    (whole,), _ = loaders_from_events(_events(cap=None))
    (folded,), _ = loaders_from_events(_events(cap=500))
    kept = sum(len(e.waits) for e in folded.epochs)
    assert kept < BATCHES // 10 and folded.epochs[0].wait_stride == folded.epochs[1].wait_stride > 1
    assert [e.batches for e in folded.epochs] == [e.batches for e in whole.epochs] == [BATCHES, BATCHES]
    a, b = wait_summary(whole), wait_summary(folded)
    for key in ("epochs", "batches", "wait_s", "wait_fraction", "first_batch_s", "max_wait_s"):
        assert math.isclose(a[key], b[key], rel_tol=1e-4), (key, a[key], b[key])
    for key in ("median_wait_s", "p95_wait_s"):  # from a uniform sample of a tenth of the waits or less
        assert math.isclose(a[key], b[key], rel_tol=0.03), (key, a[key], b[key])
    ta, tb = loop_timing(whole), loop_timing(folded)
    assert ta is not None and tb is not None
    assert ta.batches == tb.batches and math.isclose(ta.wait_s, tb.wait_s, rel_tol=1e-4)
    assert ta.handover_s is not None and tb.handover_s is not None
    assert math.isclose(ta.handover_s, tb.handover_s, rel_tol=1e-3)
    assert math.isclose(ta.wait_share, tb.wait_share, rel_tol=1e-4)
    assert math.isclose(ta.p95_wait_s, tb.p95_wait_s, rel_tol=0.03)

    def findings(loader):
        end = loader.epochs[-1].t_end
        workers = [worker(10 + w, w, cpu_series(100.5, end, cpu_share=0.9)) for w in range(2)]
        found = analyze(run([loader], [parent(300 * 1024 * 1024), *workers]))
        return {f.code: f for f in found}

    fa, fb = findings(whole), findings(folded)
    assert sorted(fa) == sorted(fb) and "input-bound" in fa, (sorted(fa), sorted(fb))
    for key in ("wait_share", "num_workers", "suggested_num_workers"):
        assert fa["input-bound"].evidence.get(key) == fb["input-bound"].evidence.get(key), key
