"""Head-of-line replay on a simulated in-order DataLoader: one slow batch holding the queue, even batches, warm-up
and batches slowed by waiting for a core."""

from __future__ import annotations

from typing import Any

import pytest

from dlprobe.analysis.measures.head_of_line import HOL_SHARE, head_of_line
from dlprobe.analysis.run.model import Epoch
from tests.unit.fakes import loader, run

T0 = 100.0


def _pipeline(
    builds: list[float], nw: int, prefetch: int = 2, queued: dict[int, float] | None = None
) -> list[dict[str, Any]]:
    """worker_batches events of torch's in-order pipeline: nw x prefetch indices sent at start, round robin, one more
    each time the loop (doing no work of its own) takes a batch; each worker builds its indices one after another.
    `queued`: batch number -> seconds of its build its worker waited for a core (its schedstat clock)."""
    free = [T0] * nw
    sent: list[float] = []
    delivered: list[float] = []
    rows: dict[int, list[list[float]]] = {w: [] for w in range(nw)}
    for k, build in enumerate(builds):
        sent.append(T0 if k < nw * prefetch else delivered[k - nw * prefetch])
        w = k % nw
        start = max(sent[k], free[w])
        free[w] = start + build
        delivered.append(max(delivered[-1] if delivered else T0, free[w]))
        rows[w].append([k, start - T0, build, 0.0, k * 8, 0.0, 0.0, (queued or {}).get(k, 0.0)])
    return [{"ev": "worker_batches", "t": T0 + 60, "pid": 10 + w, "loader": 0, "worker": w, "t0": T0, "rows": r,
             "stride": 1} for w, r in rows.items()]  # fmt: skip


def _replay(builds: list[float], nw: int = 4, queued: dict[int, float] | None = None):
    epoch = Epoch(epoch=0, t_start=T0 - 0.1, iter_s=0.01, t_end=T0 + 60)
    fake = run([loader(num_workers=nw, epochs=[epoch])], [], events=_pipeline(builds, nw, queued=queued))
    return head_of_line(fake, fake.loaders[0])


def test_one_slow_batch_in_twelve_holds_the_queue_while_the_other_workers_idle():
    hol = _replay([0.4 if k % 12 == 0 else 0.005 for k in range(120)])
    assert hol is not None and hol.share >= 0.9 > HOL_SHARE
    assert hol.holders()[0] == (0, pytest.approx(1.0, abs=0.01))  # 12 is a multiple of 4: worker 0 builds them
    evidence = hol.evidence()
    assert evidence["batch_build_max_s"] == 0.4 and evidence["batch_build_median_s"] == 0.005
    assert {b["first_index"] % 96 for b in evidence["slowest_batches"]} == {0}  # batches 12, 24, ...: index 96 k


def test_even_batches_keep_every_worker_building_so_the_order_costs_nothing():
    hol = _replay([0.035] * 120)
    assert hol is not None and hol.share < 0.05


def test_evenly_slow_workers_out_of_phase_are_not_head_of_line():
    # the others finish their batches first in each round, but go on building the next: more workers would help
    hol = _replay([0.045 if k % 4 == 0 else 0.035 for k in range(120)])
    assert hol is not None and hol.share < HOL_SHARE


def test_too_few_batches_or_one_worker_say_nothing():
    assert _replay([0.4] * 10) is None
    assert _replay([0.4 if k % 12 == 0 else 0.005 for k in range(60)], nw=1) is None


def test_a_batch_slow_because_its_worker_waited_for_a_core_is_not_the_order():
    # the same slow batches, one worker in four: built slowly by their samples, in_order=False would help; slow
    # because the worker sat queued for a core behind other work (its own clock says so), it would not
    slow = {k: 0.3 for k in range(40, 120) if k % 4 == 1}
    builds = [0.005 + slow.get(k, 0.0) for k in range(200)]
    hol = _replay(builds)
    assert hol is not None and hol.share >= HOL_SHARE
    hol = _replay(builds, queued=slow)
    assert hol is not None and hol.share < HOL_SHARE


def test_each_workers_warm_up_batches_are_not_the_order():
    # every worker's first three batches are slow (opening files, filling caches), some workers more than others
    nw = 4
    hol = _replay([0.3 * (1 + k % nw) if k < 3 * nw else 0.005 for k in range(120)], nw=nw)
    assert hol is not None and hol.share < HOL_SHARE
