"""`dlprobe run` on a hang inside a library's own thread pool after fork: named from the worker's native frames."""

from __future__ import annotations

import pytest

pytest.importorskip("tokenizers")

HANG_OPTIONS = ["--quiet", "--hang-timeout", "6", "--on-hang", "stop"]


def test_a_tokenizer_pool_used_before_fork_is_named_in_the_hang_and_the_fork_hazard(probe):
    result = probe("tokenizer_pool_at_fork.py", options=HANG_OPTIONS)
    assert result.returncode != 0  # stopped on the hang
    [hang] = result.findings("worker-hang")
    assert hang["title"].endswith(": native-wait"), hang["title"]
    assert hang["evidence"]["native_library"] == "tokenizers"
    assert "waiting inside tokenizers' native code (tokenizers." in hang["detail"]
    assert "rayon_core" in hang["evidence"]["native_function"] or "Condvar" in hang["evidence"]["native_function"]
    [hazard] = result.findings("fork-hazard")
    assert "(tokenizers: a hung worker waits in its native code)" in hazard["title"]
    assert "OpenCV" not in hazard["title"] and hazard["severity"] == "warning"


def test_a_tokenizer_without_its_pool_does_not_hang(probe):
    result = probe("tokenizer_pool_at_fork.py", "off", options=HANG_OPTIONS)
    assert result.returncode == 0, result.stderr
    assert result.findings("worker-hang") == []
