"""shared-rng and same-order-every-epoch on synthetic runs; the in-training parts (the generators' walk and
fingerprints, the order's running hash) on real objects."""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import pytest
import torch

from dlprobe.analysis.findings.repeats import find_same_order, find_shared_rng
from dlprobe.in_training import rng_streams, sample_order
from dlprobe.rundir.schema import EV_SAMPLE_ORDER, EV_WORKER_RNG
from tests.unit.fakes import loader, run


def _rng_event(epoch: int, worker: int, start: str, after: str, replaced: bool = False,
               parent: str = "p0") -> dict[str, Any]:  # fmt: skip
    row = {"attribute": "self.rng", "owner": "numpy.random._generator.Generator", "parent": parent, "start": start,
           "after": None if replaced else after, "replaced": replaced}  # fmt: skip
    return {"ev": EV_WORKER_RNG, "t": 1.0, "loader": 0, "epoch": epoch, "worker_id": worker, "rngs": [row]}


def _rng_run(events: list[dict[str, Any]]) -> Any:
    return run([loader(num_workers=4)], [], events=events)


def test_workers_that_start_at_one_state_and_draw_the_same_numbers_share_a_stream():
    events = [_rng_event(e, w, "p0", "a1") for e in range(2) for w in range(4)]
    [finding] = find_shared_rng(_rng_run(events))
    assert finding.code == "shared-rng" and finding.severity == "warning"
    assert "`self.rng`" in finding.title and "numpy.random.Generator" in finding.title
    assert "4 workers in each of 2 epochs" in finding.title
    assert finding.evidence["shared_starts"] == 8 and finding.evidence["worker_ids"] == [0, 1, 2, 3]
    assert finding.evidence["as_forked"] is True and finding.evidence["drew_same"] == 8
    assert "info.dataset.rng = np.random.default_rng(info.seed)" in finding.fix
    assert "persistent_workers=False" in finding.detail


@pytest.mark.parametrize(
    ("why", "events"),
    [
        ("re-seeded in worker_init_fn", [_rng_event(0, w, f"s{w}", f"a{w}") for w in range(4)]),
        ("never drawn from in the workers", [_rng_event(0, w, "p0", "p0") for w in range(4)]),
        ("replaced by the dataset in the worker", [_rng_event(0, w, "p0", "", replaced=True) for w in range(4)]),
        ("re-seeded from the index per sample", [_rng_event(0, w, "p0", f"a{w}") for w in range(4)]),
        ("one worker start alone", [_rng_event(0, 0, "p0", "a1")]),
    ],
)
def test_no_shared_stream_when(why, events):
    assert find_shared_rng(_rng_run(events)) == [], why


def test_one_worker_restarted_every_epoch_repeats_its_draws():
    events = [_rng_event(e, 0, "p0", "a1") for e in range(3)]
    [finding] = find_shared_rng(_rng_run(events))
    assert "worker 0 in each of 3 epochs" in finding.title


def _order(epoch: int, digest: str, sampler_epoch: int | None = 0, shuffle: bool | None = True,
           sampler: str = "torch.utils.data.distributed.DistributedSampler") -> dict[str, Any]:  # fmt: skip
    return {"ev": EV_SAMPLE_ORDER, "t": 1.0, "loader": 0, "epoch": epoch, "digest": digest, "batches": 16,
            "samples": 512, "sampler": sampler, "shuffle": shuffle, "sampler_epoch": sampler_epoch}  # fmt: skip


def test_a_distributed_sampler_whose_epoch_never_changed_repeats_its_order():
    [finding] = find_same_order(run([loader()], [], events=[_order(e, "d0") for e in range(3)]))
    assert finding.code == "same-order-every-epoch"
    assert "DistributedSampler gave the same order in all 3 epochs" in finding.title
    assert "set_epoch() was never called" in finding.title
    assert finding.evidence["set_epoch_missing"] is True and finding.evidence["epochs"] == [0, 1, 2]
    assert "sampler.set_epoch(epoch)" in finding.fix


def test_a_repeating_random_sampler_is_named_without_a_cause():
    events = [_order(e, "d0", None, sampler="torch.utils.data.sampler.RandomSampler") for e in range(2)]
    [finding] = find_same_order(run([loader()], [], events=events))
    assert "does not show why" in finding.detail and finding.evidence["set_epoch_missing"] is False


@pytest.mark.parametrize(
    ("why", "events"),
    [
        ("set_epoch called: a new order each epoch", [_order(e, f"d{e}", e) for e in range(3)]),
        ("a sequential sampler repeats by design", [_order(e, "d0", None, False) for e in range(3)]),
        ("one epoch only", [_order(0, "d0")]),
    ],
)
def test_no_repeated_order_when(why, events):
    assert find_same_order(run([loader()], [], events=events)) == [], why


class _Transform:
    def __init__(self) -> None:
        self.gen = torch.Generator().manual_seed(1)

    def __call__(self, x: Any) -> Any:
        return x


class _Dataset:
    def __init__(self) -> None:
        self.rng = random.Random(0)
        self.sys_rng = random.SystemRandom()  # no state of its own: not followed
        self.augs = [_Transform()]
        self.legacy = {"state": np.random.RandomState(0)}
        self.data = np.zeros(10)


def test_the_walk_finds_each_generator_with_its_path_even_inside_a_callable_transform():
    found = {r["attribute"]: r for r in rng_streams.find_rngs(_Dataset())}
    assert set(found) == {"self.rng", "self.augs[0].gen", "self.legacy['state']"}
    assert found["self.rng"]["owner"] == "random.Random"
    ds = _Dataset()
    for r in found.values():
        assert rng_streams.fingerprint(rng_streams.resolve(ds, r["steps"])) == r["state"]  # a copy: the same state


@pytest.mark.parametrize(
    "make",
    [
        lambda: random.Random(0),
        lambda: np.random.default_rng(0),
        lambda: torch.Generator().manual_seed(0),
        lambda: np.random.RandomState(0),
    ],  # fmt: skip
)
def test_a_fingerprint_is_the_state_equal_for_copies_and_changed_by_a_draw(make):
    a, b = make(), make()
    assert rng_streams.fingerprint(a) == rng_streams.fingerprint(b)
    before = rng_streams.fingerprint(a)
    if isinstance(a, torch.Generator):
        torch.rand(1, generator=a)
    else:
        a.random()
    assert rng_streams.fingerprint(a) != before


class _Iter:
    """Stands in for torch's iterator: a sampler iterator replaced at each epoch's reset."""

    def __init__(self, order: list[list[int]]) -> None:
        self.order = order
        self._sampler_iter = iter(order)

    def reset(self, order: list[list[int]]) -> None:
        self.order = order
        self._sampler_iter = iter(order)

    @sample_order.wrap_next_index
    def _next_index(self) -> Any:
        return next(self._sampler_iter)


def _epoch_order(it: _Iter) -> dict[str, Any] | None:
    got = []
    while True:
        try:
            got.append(it._next_index())
        except StopIteration:
            break
    assert got == it.order  # what the sampler yields passes unchanged
    return sample_order.take(it)


def test_the_running_hash_is_equal_for_one_order_and_differs_for_another():
    first, other = [[3, 1], [0, 2]], [[1, 3], [0, 2]]
    it = _Iter(first)
    a = _epoch_order(it)
    it.reset(first)
    b = _epoch_order(it)
    it.reset(other)
    c = _epoch_order(it)
    assert a is not None and b is not None and c is not None
    assert a["digest"] == b["digest"] != c["digest"]
    assert a["batches"] == 2 and a["samples"] == 4
