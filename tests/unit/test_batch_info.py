"""describe_batch: a batch's tensors' own bytes, and their storages' (each once): what sharing it sends."""

from __future__ import annotations

import numpy as np
import torch

from dlprobe.in_training.batch_info import describe_batch


def test_views_are_counted_at_their_whole_storage_once_and_copies_at_their_own_bytes():
    chunk = torch.zeros(1000)
    info = describe_batch([chunk[:10], chunk[10:20], torch.ones(3)])
    assert info["bytes"] == 92 and info["storage_bytes"] == 4000 + 12  # two views of one 4000-byte storage
    assert [leaf.get("storage_bytes") for leaf in info["leaves"]] == [4000, 4000, None]
    copies = describe_batch([chunk[:10].clone(), chunk[10:20].clone()])
    assert copies["bytes"] == copies["storage_bytes"] == 80
    # numpy views pickle their own bytes only (torch.from_numpy of a view keeps only the view's extent too)
    arrays = describe_batch({"a": np.zeros(100)[1:3], "t": torch.from_numpy(np.zeros(100, dtype=np.float32)[5:9])})
    assert arrays["bytes"] == arrays["storage_bytes"] == 32
