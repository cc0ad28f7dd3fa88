"""Human units: bytes and durations, both ways."""

from __future__ import annotations

import re

_BYTE_UNITS = {
    "": 1, "b": 1,
    "k": 1000, "kb": 1000, "m": 1000**2, "mb": 1000**2, "g": 1000**3, "gb": 1000**3, "t": 1000**4, "tb": 1000**4,
    "kib": 1024, "mib": 1024**2, "gib": 1024**3, "tib": 1024**4,
}  # fmt: skip
MiB = 1024 * 1024  # the unit every memory chart and threshold is drawn in
_DURATION_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0}


NOT_READ = "not read"  # a reading the probe was refused (a non-dumpable process): unknown, and why is reported
NOT_MEASURED = "not measured"  # what a missing reading reads as: never a "-" a reader must decode


def format_bytes(n: float | None) -> str:
    """1536 -> '1.5 KiB'; binary units because that is what the kernel counts in."""
    if n is None:
        return NOT_MEASURED
    sign = "-" if n < 0 else ""
    value = abs(float(n))
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            if unit == "B":
                return f"{sign}{int(value)} B"
            return f"{sign}{value:.1f} {unit}"
        value /= 1024
    return f"{sign}{value:.1f} TiB"


def parse_bytes(text: str) -> int:
    """'200 MB' -> 200000000, '1.5GiB' -> 1610612736. Raises ValueError on a bare or negative number."""
    match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([a-zA-Z]*)\s*", str(text))
    if not match:
        raise ValueError(f"not a size: {text!r} (expected e.g. '200 MB' or '1.5 GiB')")
    number, unit = float(match.group(1)), match.group(2).lower()
    if unit == "" or unit not in _BYTE_UNITS:
        raise ValueError(f"size needs a unit: {text!r} (one of B, KB, MB, GB, KiB, MiB, GiB)")
    return int(number * _BYTE_UNITS[unit])


def parse_duration(text: str) -> float:
    """'90s' -> 90.0, '2m' -> 120.0, '500ms' -> 0.5."""
    match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([a-zA-Z]*)\s*", str(text))
    if not match or match.group(2).lower() not in _DURATION_UNITS:
        raise ValueError(f"not a duration: {text!r} (expected e.g. '90s', '2m' or '500ms')")
    return float(match.group(1)) * _DURATION_UNITS[match.group(2).lower()]
