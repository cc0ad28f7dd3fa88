"""The replay of an IterableDataset worker's stream that the sample check loads in its child (in_training)."""

from __future__ import annotations

import pytest
from torch.utils.data import IterableDataset, get_worker_info

from dlprobe.in_training.sample_check import _EarlierRecord, _Stream, _StreamEnded


class Shards(IterableDataset):
    """Worker k of n reads records k, k+n, ...; record 9 is bad, record 3 bad when `three` is set."""

    def __init__(self, three: bool = False) -> None:
        self.three = three
        self.init_calls: list[int] = []

    def __iter__(self):
        info = get_worker_info()
        for record in range(info.id, 20, info.num_workers):
            if record == 9 or (self.three and record == 3):
                raise ValueError(f"record {record} is bad")
            yield record


@pytest.fixture(autouse=True)
def _no_worker_info_left():
    """The replay sets torch's worker info, as in the child it runs in: this test process gets its own back."""
    import torch.utils.data._utils.worker as torch_worker

    yield
    torch_worker._worker_info = None


def test_the_replay_is_the_workers_own_share_with_its_worker_init_fn():
    dataset = Shards()
    stream = _Stream(dataset, 1, 2, 1234, lambda worker_id: dataset.init_calls.append(worker_id))
    assert stream[0] == 1 and stream[3] == 7  # worker 1 of 2: records 1, 3, 5, 7
    assert dataset.init_calls == [1, 1]
    with pytest.raises(ValueError, match="record 9 is bad"):
        stream[4]  # the record the worker failed on fails again, after the four before it loaded


def test_a_replay_that_fails_earlier_or_ends_first_says_so():
    with pytest.raises(_EarlierRecord) as earlier:
        _Stream(Shards(three=True), 1, 2, None, None)[4]
    assert earlier.value.at == 1 and "record 3 is bad" in str(earlier.value)
    with pytest.raises(_StreamEnded) as ended:
        _Stream(Shards(), 0, 2, None, None)[11]  # worker 0 of 2 has ten records: 0, 2, ... 18
    assert ended.value.at == 10


def test_a_replay_that_cannot_start_or_runs_out_at_the_position_checks_nothing():
    from dlprobe.in_training.sample_check import _ReplayNotStarted

    def init_fails(worker_id: int) -> None:
        raise RuntimeError("Cannot re-initialize CUDA in forked subprocess")

    with pytest.raises(_ReplayNotStarted, match="re-initialize CUDA"):
        _Stream(Shards(), 1, 2, None, init_fails)[3]
    with pytest.raises(_StreamEnded) as ended:
        _Stream(Shards(), 0, 2, None, None)[10]  # worker 0's ten records end exactly there
    assert ended.value.at == 10


def test_the_users_worker_init_fn_is_replayed_without_dlprobes_wrapper_also_inside_a_partial():
    import functools

    from dlprobe.in_training.inflight import InflightInit
    from dlprobe.in_training.sample_check import _users_init_fn

    def users(worker_id: int) -> None:
        pass

    wrapped = InflightInit(users, "/nonexistent", 0)
    assert _users_init_fn(wrapped) is users and _users_init_fn(users) is users and _users_init_fn(None) is None
    sharded = _users_init_fn(functools.partial(print, wrapped, 2, 0))  # torch's _sharding_worker_init_fn partial
    assert sharded.func is print and sharded.args == (users, 2, 0)
