"""Unit tests for the scan's pure parts: sample signatures, majority comparison, paths, grouping, exclude files."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch.utils.data import ConcatDataset, DataLoader, Subset

from dlprobe.exclude import ExcludeIndices, SkipIndicesSampler, load_excluded, write_excluded
from dlprobe.in_training.scan.paths import path_for
from dlprobe.in_training.scan.sample_check import check_sample, compare
from dlprobe.scan.result import group_by_reason


def test_signature_sees_shape_and_dtype_and_can_leave_shapes_out():
    a, _ = check_sample((torch.zeros(3, 4), 1), shapes=True)
    b, _ = check_sample((torch.zeros(3, 5), 1), shapes=True)
    c, _ = check_sample((torch.zeros(3, 4, dtype=torch.float64), 1), shapes=True)
    assert compare(b, a) == ("shape", "sample[0] has shape [3, 5], expected [3, 4]")
    assert compare(c, a) == ("dtype", "sample[0] has dtype float64, expected float32")
    loose_a, _ = check_sample((torch.zeros(3, 4), 1), shapes=False)
    loose_b, _ = check_sample((torch.zeros(3, 5), 1), shapes=False)
    assert compare(loose_b, loose_a) is None


def test_structure_difference_is_a_shape_problem():
    a, _ = check_sample({"x": np.zeros(2, dtype=np.float32), "y": 1}, shapes=True)
    b, _ = check_sample({"x": np.zeros(2, dtype=np.float32)}, shapes=True)
    kind, detail = compare(b, a)
    assert kind == "shape" and detail.startswith("structure {'x': ndarray[2] float32}")


@pytest.mark.parametrize(
    ("sample", "kind", "detail"),
    [
        (None, "none", "sample is None"),
        ((torch.zeros(2), None), "none", "sample[1] is None"),
        (torch.tensor([1.0, float("nan"), float("inf")]), "nan", "sample has 1 NaN and 1 Inf of 3 values"),
        ({"v": np.array([np.nan], dtype=np.float16)}, "nan", "sample['v'] has 1 NaN of 1 values"),
        ([0.5, float("inf")], "nan", "sample[1] is inf"),
    ],
)
def test_none_and_non_finite_values_are_found(sample, kind, detail):
    _, issue = check_sample(sample, shapes=True)
    assert issue is not None and (issue.kind, issue.detail) == (kind, detail)


def test_a_large_finite_sum_is_not_mistaken_for_inf():
    _, issue = check_sample(torch.full((4,), 60000.0, dtype=torch.float16), shapes=True)
    assert issue is None


class _Files(torch.utils.data.Dataset):
    def __init__(self, n):
        self.samples = [(f"/data/{i}.png", 0) for i in range(n)]

    def __len__(self):
        return len(self.samples)

    def __getitem__(self, i):
        return i


def test_path_follows_subset_and_concat_and_falls_back_to_the_message():
    base = _Files(10)
    assert path_for(base, 3) == "/data/3.png"
    assert path_for(Subset(base, [7, 8]), 1) == "/data/8.png"
    assert path_for(ConcatDataset([_Files(2), base]), 4) == "/data/2.png"
    assert path_for(object(), 0, "cannot identify image file '/x/y.jpg'") == "/x/y.jpg"
    assert path_for(object(), 0, "ValueError: bad value 3") is None


def test_grouping_merges_details_that_differ_only_in_numbers_and_paths():
    bad = [
        {"index": 1, "kind": "exception", "detail": "OSError: cannot identify image file '/a/1.png'"},
        {"index": 2, "kind": "crash", "detail": "worker killed by SIGSEGV (Segmentation fault)"},
        {"index": 4, "kind": "exception", "detail": "OSError: cannot identify image file '/a/4.png'"},
    ]
    groups = group_by_reason(bad)
    assert [(kind, [e["index"] for e in entries]) for kind, _, entries in groups] == [
        ("exception", [1, 4]),
        ("crash", [2]),
    ]
    assert groups[0][1].endswith("(and similar)")


def test_exclude_file_round_trip_and_helpers_skip_those_indices(tmp_path):
    path = tmp_path / "bad.txt"
    write_excluded(path, [{"index": 2, "kind": "nan"}, {"index": 5, "kind": "crash"}], "index", "MyDataset")
    assert load_excluded(path) == {2, 5}
    dataset = list(range(8))
    view = ExcludeIndices(dataset, load_excluded(path))
    assert [view[i] for i in range(len(view))] == [0, 1, 3, 4, 6, 7]
    sampler = SkipIndicesSampler(dataset, {2, 5}, shuffle=True, seed=0)
    assert sorted(sampler) == [0, 1, 3, 4, 6, 7] and len(sampler) == 6
    batches = list(DataLoader(dataset, batch_size=3, sampler=SkipIndicesSampler(dataset, {2, 5})))
    assert [b.tolist() for b in batches] == [[0, 1, 3], [4, 6, 7]]


def test_exclude_file_with_garbage_names_the_line(tmp_path):
    path = tmp_path / "bad.txt"
    path.write_text("# comment\n3\nseven\n")
    with pytest.raises(ValueError, match="bad.txt:3: not an index: 'seven'"):
        load_excluded(path)
