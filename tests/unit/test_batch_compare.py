"""in_training/batch_compare.py: samples described by structure, never values, and the odd ones named."""

from __future__ import annotations

import numpy as np
import torch

from dlprobe.in_training.batch_compare import odd_ones, signature


def test_a_sample_is_described_by_its_types_shapes_and_dtypes_not_its_values():
    sample = {"image": torch.zeros(3, 8, 8), "mask": np.zeros((8, 8), dtype=np.uint8), "label": 3, "name": "x"}
    assert signature(sample) == "{image: Tensor(3, 8, 8) float32, label: int, mask: ndarray(8, 8) uint8, name: str}"
    assert signature((torch.ones(2), 7)) == signature((torch.zeros(2), 9))


def test_the_odd_sample_is_named_and_the_rest_described():
    found = odd_ones({i: "Tensor(1, 4) float32" if i == 5 else "Tensor(3, 4) float32" for i in range(8)})
    assert found["outcome"] == "odd" and found["odd"] == [{"index": 5, "signature": "Tensor(1, 4) float32"}]
    assert found["common_signature"] == "Tensor(3, 4) float32" and found["common_count"] == 7
    assert not found["undecided"]


def test_two_structures_held_alike_are_undecided_and_a_batch_of_one_structure_is_alike():
    assert odd_ones({0: "a", 1: "b"})["undecided"] is True
    assert odd_ones({0: "a", 1: "a", 2: "a"}) == {"outcome": "alike", "common_signature": "a", "compared": 3}
