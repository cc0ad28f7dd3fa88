"""dlprobe: find out why a PyTorch DataLoader is slow, hangs, eats memory or gets killed."""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"

_API = ("watch", "probe_loader", "Watch", "LimitExceeded")


def __getattr__(name: str) -> Any:
    # `from dlprobe import watch` without importing the API (and torch) when only the CLI is used
    if name in _API:
        from dlprobe import api

        return getattr(api, name)
    raise AttributeError(f"module 'dlprobe' has no attribute {name!r}")
