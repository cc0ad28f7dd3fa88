"""`dlprobe run` on data that trains wrong without failing: a dataset's random generator shared by its workers, a
DistributedSampler never told its epoch. Each with its fixed twin, which gets no such finding."""

from __future__ import annotations

import pytest


@pytest.mark.parametrize(("kind", "owner"), [("numpy", "numpy.random.Generator"), ("random", "random.Random")])
def test_a_generator_made_in_init_is_named_with_the_workers_that_share_its_stream(probe, kind, owner):
    result = probe("augment_rng_in_init.py", kind)
    assert result.returncode == 0, result.stderr
    assert "64 distinct augmentations among 512 draws" in result.stdout  # the script's own count: 4 workers x 2 epochs
    [finding] = result.findings("shared-rng")
    evidence = finding["evidence"]
    assert evidence["attribute"] == "self.rng" and evidence["rng_class"] == owner
    assert evidence["worker_ids"] == [0, 1, 2, 3] and evidence["epochs"] == [0, 1]
    assert evidence["shared_starts"] == 8 and evidence["as_forked"] is True
    assert "`self.rng`" in finding["title"] and "4 workers in each of 2 epochs" in finding["title"]
    assert "get_worker_info()" in finding["fix"] and "info.dataset.rng = " in finding["fix"]


@pytest.mark.parametrize("twin", ["seeded", "unused"])
def test_a_generator_seeded_per_worker_or_never_drawn_is_not_named(probe, twin):
    result = probe("augment_rng_in_init.py", "numpy", twin)
    assert result.returncode == 0, result.stderr
    assert result.findings("shared-rng") == []


def test_a_distributed_sampler_without_set_epoch_repeats_its_order(probe):
    result = probe("sampler_without_set_epoch.py", "no-set-epoch")
    assert result.returncode == 0, result.stderr
    assert "1 distinct orders in 3 epochs" in result.stdout
    [finding] = result.findings("same-order-every-epoch")
    assert finding["evidence"]["set_epoch_missing"] is True and finding["evidence"]["epochs"] == [0, 1, 2]
    assert "set_epoch() was never called" in finding["title"]
    assert "sampler.set_epoch(epoch)" in finding["fix"]


@pytest.mark.parametrize("twin", ["set-epoch", "random-sampler", "sequential"])
def test_a_sampler_that_reshuffles_or_never_shuffles_is_not_named(probe, twin):
    result = probe("sampler_without_set_epoch.py", twin)
    assert result.returncode == 0, result.stderr
    assert result.findings("same-order-every-epoch") == []
