"""Prometheus' text exposition format (version 0.0.4), written by hand: dlprobe adds no runtime dependency for it.
The tests read what this writes with the official parser (prometheus_client.parser)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
GAUGE, COUNTER = "gauge", "counter"

Labels = dict[str, str]


@dataclass
class Family:
    """One metric: its name (units in it, `_total` for a counter), type, help line and its series."""

    name: str
    kind: str
    help: str
    samples: list[tuple[Labels, float]] = field(default_factory=list)

    def add(self, labels: Labels, value: float | None) -> None:
        if value is not None:  # a reading not taken yet is no series, never a 0 that an alert would read
            self.samples.append((labels, value))


def _escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def _escape_label(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def format_value(value: float) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, int):
        return str(value)
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(float(value))


def _labels(labels: Labels) -> str:
    # An empty value means "no such label" to Prometheus: left out, so a run without ranks has no rank="".
    parts = [f'{key}="{_escape_label(value)}"' for key, value in labels.items() if value != ""]
    return "{" + ",".join(parts) + "}" if parts else ""


def render(families: list[Family]) -> str:
    """The exposition text: HELP and TYPE for every family (an empty one too: the metric exists, it has no series
    now), then one line per series."""
    lines: list[str] = []
    for family in families:
        lines.append(f"# HELP {family.name} {_escape_help(family.help)}")
        lines.append(f"# TYPE {family.name} {family.kind}")
        lines.extend(f"{family.name}{_labels(labels)} {format_value(value)}" for labels, value in family.samples)
    return "\n".join(lines) + "\n"
