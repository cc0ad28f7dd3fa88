"""Inside the target: which loader the scan took over (its role under Lightning) and which other loaders exist."""

from __future__ import annotations

import gc
import sys
from typing import Any

from dlprobe.in_training.scan.plan import dataset_type_of

# Trainer flags in the order Lightning sets them; the first one set names the stage the loader belongs to.
_STAGES = (
    ("sanity_checking", "Lightning's sanity-check validation loader"),
    ("training", "Lightning's training loader"),
    ("validating", "Lightning's validation loader"),
    ("testing", "Lightning's test loader"),
    ("predicting", "Lightning's predict loader"),
)


def _lightning_trainer() -> Any:
    """The Lightning Trainer on the call stack, if the loader is being iterated inside one."""
    frame = sys._getframe(1)
    while frame is not None:
        for name in ("self", "trainer"):
            value = frame.f_locals.get(name)
            cls = type(value)
            if cls.__name__ == "Trainer" and cls.__module__.startswith(("lightning", "pytorch_lightning")):
                return value
        frame = frame.f_back  # type: ignore[assignment]
    return None


def lightning_role() -> str | None:
    trainer = _lightning_trainer()
    if trainer is None:
        return None
    for flag, role in _STAGES:
        if getattr(trainer, flag, False):
            return role
    return "a loader Lightning iterates"


def _length(dataset: Any) -> int | None:
    try:
        return int(len(dataset))
    except Exception:  # a stream without a length: listed without one
        return None


def other_loaders(loader: Any) -> list[dict[str, Any]]:
    """DataLoaders alive besides `loader` (already built, not yet iterated or iterated before), by dataset."""
    from torch.utils.data import DataLoader

    seen = {id(loader.dataset)}
    others = []
    for obj in gc.get_objects():
        # type(), not isinstance(): isinstance asks lazy proxies for __class__, which may import or warn
        if issubclass(type(obj), DataLoader) and obj is not loader and id(obj.dataset) not in seen:
            seen.add(id(obj.dataset))
            others.append({"dataset_type": dataset_type_of(obj.dataset), "total": _length(obj.dataset)})
    return others
