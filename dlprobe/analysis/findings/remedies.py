"""The code a fix gives for a dataset attribute whose objects the workers copy: the dlprobe.fixes class (or numpy
array) that holds the same data without a Python object per item, written with the user's own attribute name.
cow-growth and spawn-copy both give it (findings/memory.py, findings/spawn_copy.py)."""

from __future__ import annotations

from typing import Any

_NUMBERS = ("int", "float", "bool")


def remedy_code(suspect: dict[str, Any], share: bool = False) -> tuple[str, str] | None:
    """(a line of code for the user's own attribute, the import it needs) for a suspect dlprobe.fixes or numpy can
    hold without Python objects, or None. `share`: the /dev/shm form, for spawn workers and ranks."""
    attr, kind = suspect["attribute"], str(suspect.get("type", ""))
    outer, _, inner = kind.partition("[")
    inner = inner.rstrip("]")
    key = share_key(attr)
    if outer == "pandas.DataFrame":
        lines = [code for c in object_columns(suspect) if (code := column_remedy(f"{attr}[{c['name']!r}]", c))]
        return ("; ".join(lines), "") if lines else None
    if outer == "pandas.Series":
        code = column_remedy(attr, {"item": suspect.get("item")})
        return (code, "") if code else None
    if kind == "numpy.ndarray[object]" and suspect.get("item") in _NUMBERS:  # numbers boxed one by one
        return f"{attr} = {attr}.astype({_NUMPY_DTYPES[str(suspect['item'])]!r})", ""
    if outer == "deque":  # records appended in order and read by index: a packed buffer reads the same
        return f"{attr} = PackedRecords(list({attr})" + (f", share={key!r})" if share else ")"), "PackedRecords"
    if outer == "dict":  # COCO-style annotations, JSON metadata: looked up by key through a key index
        return f"{attr} = PackedMapping({attr}" + (f", share={key!r})" if share else ")"), "PackedMapping"
    if outer in ("list", "tuple") and inner in _NUMBERS:
        # numpy picks the dtype from every item (int64 for ints, float64 if any is a float), never truncating
        array = f"np.asarray({attr})"
        return (f"{attr} = shm_array({key!r}, lambda: {array})", "shm_array") if share else (f"{attr} = {array}", "")
    if outer in ("list", "tuple") or kind == "numpy.ndarray[object]":  # records, strings: one buffer plus offsets
        return f"{attr} = PackedRecords({attr}" + (f", share={key!r})" if share else ")"), "PackedRecords"
    return None


_NUMPY_DTYPES = {"int": "int64", "float": "float64", "bool": "bool"}


def object_columns(suspect: dict[str, Any]) -> list[dict[str, Any]]:
    """A DataFrame suspect's columns that hold Python objects, the most objects first."""
    columns = [c for c in suspect.get("columns") or [] if c.get("python_objects")]
    return sorted(columns, key=lambda c: int(c.get("objects") or 0), reverse=True)


def column_remedy(target: str, column: dict[str, Any]) -> str | None:
    """One line that moves a pandas column's values out of Python objects: strings into an Arrow buffer, numbers into
    a numeric dtype; None for records (dicts, lists), which a column cannot hold without Python objects."""
    item = column.get("item")
    if item == "str":
        return f'{target} = {target}.astype("string[pyarrow]")'
    if item in _NUMBERS:
        return f"{target} = {target}.astype({_NUMPY_DTYPES[str(item)]!r})"
    return None


def frame_columns_text(suspect: dict[str, Any]) -> str:
    """Which columns of a DataFrame suspect hold the Python objects, and which are safe (numeric, Arrow-backed)."""
    columns = suspect.get("columns") or []
    held = object_columns(suspect)
    if not held:
        return ""
    text = "Its Python objects are in " + ", ".join(
        f"`{c['name']}` ({c['dtype']} of {c.get('item') or 'objects'}, {int(c.get('objects') or 0):,} objects)"
        for c in held
    )
    safe = [c for c in columns if not c.get("python_objects")]
    if safe:
        named = ", ".join(f"`{c['name']}` ({'Arrow-backed' if c.get('arrow') else c['dtype']})" for c in safe[:4])
        verbs = ("hold", "are") if len(safe) > 1 else ("holds", "is")
        text += f"; {named} {verbs[0]} no Python objects and {verbs[1]} safe"
    return text + ". "


def imports_text(names: list[str], numpy: bool) -> str:
    """The import line(s) the fix's code needs: 'from dlprobe.fixes import PackedMapping; import numpy as np'."""
    found = sorted({n for n in names if n})
    parts = [f"from dlprobe.fixes import {', '.join(found)}"] if found else []
    return "; ".join(parts + (["import numpy as np"] if numpy else []))


def share_key(attribute: str) -> str:
    """A /dev/shm cache key suggested from the attribute's name: self.train.records -> 'records-v1'."""
    name = "".join(c if c.isalnum() or c in "._-" else "-" for c in attribute.rsplit(".", 1)[-1]).strip("-.")
    return f"{name or 'records'}-v1"
