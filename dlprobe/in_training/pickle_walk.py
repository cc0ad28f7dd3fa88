"""The walk down an object pickle refuses, to the attribute that refuses on its own: one walk for start readiness
(before the workers start, in_training/start_readiness.py) and for a worker start that failed
(in_training/start_failures.py), so both name the same attribute of the same object.

pickle's message names a type ("Can't pickle local object 'build.<locals>.<lambda>'"), not where it sits. From an
object that refuses, each part pickle would send next (items, attributes, slots, a bound method's object, a partial's
function and arguments) is pickled alone, by the caller's own pickler; the first that refuses is descended into, until
none of its parts refuses: that object is the culprit, at its path (dataset.transform, collate_fn.__self__.env).
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from typing import Any, TypeVar

Refusal = TypeVar("Refusal")  # what the caller's pickler says of an object it refuses (an exception, a message)

# Parts that cannot refuse: never pickled alone
_PLAIN = (str, bytes, int, float, bool, type(None))


def children(obj: Any, limit: int) -> list[tuple[str, Any]]:
    """(path suffix, part) of what pickling obj would pickle next, at most `limit` of each kind."""
    if isinstance(obj, dict):
        return [(f"[{k!r}]", v) for k, v in list(obj.items())[:limit]]
    if isinstance(obj, (list, tuple, set, frozenset)):
        return [(f"[{i}]", v) for i, v in enumerate(list(obj)[:limit])]
    kind = type(obj).__name__
    if kind == "method":
        return [(".__self__", obj.__self__)]
    if isinstance(obj, functools.partial):
        return [(".func", obj.func), *((f".args[{i}]", a) for i, a in enumerate(obj.args)),
                *((f".keywords[{k!r}]", v) for k, v in (obj.keywords or {}).items())]  # fmt: skip
    if kind in ("function", "builtin_function_or_method") or isinstance(obj, type):
        return []  # pickled by name: it refuses itself, or not at all
    attrs = getattr(obj, "__dict__", None)
    items = [(f".{k}", v) for k, v in list(attrs.items())[:limit] if isinstance(k, str)] if isinstance(
        attrs, dict) else []  # fmt: skip
    slots = getattr(type(obj), "__slots__", ())
    for slot in [slots] if isinstance(slots, str) else list(slots)[:limit]:
        if isinstance(slot, str) and hasattr(obj, slot):
            items.append((f".{slot}", getattr(obj, slot)))
    return items


def deepest_refusal(
    path: str,
    obj: Any,
    refusal: Refusal,
    refuses: Callable[[Any], Refusal | None],
    *,
    limit: int,
    deadline: float,
    max_depth: int | None = None,
    budget: int | None = None,
) -> tuple[str, Any, Refusal]:
    """From `obj` at `path`, which refuses with `refusal`: the deepest part that refuses alone although none of its
    own parts does, its path and what `refuses` said of it. Bounded by `deadline` (time.perf_counter), `max_depth`
    levels and `budget` parts pickled; at a bound, the deepest found so far. An object already on the path (a cycle)
    is never entered again."""
    on_path = {id(obj)}
    depth = 0
    while max_depth is None or depth < max_depth:
        for suffix, child in children(obj, limit):
            if (budget is not None and budget <= 0) or time.perf_counter() > deadline:
                return path, obj, refusal
            if id(child) in on_path or isinstance(child, _PLAIN):
                continue
            if budget is not None:
                budget -= 1
            found = refuses(child)
            if found is not None:
                path, obj, refusal = path + suffix, child, found
                on_path.add(id(child))
                depth += 1
                break
        else:
            return path, obj, refusal
    return path, obj, refusal
