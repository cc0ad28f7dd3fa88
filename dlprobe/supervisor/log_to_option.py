"""`--log-to wandb|mlflow`, repeatable or comma-separated: checked before the script starts, so a bad value is one
`error:` line and exit code 2, not a training run without the logs asked for."""

from __future__ import annotations

from collections.abc import Iterable

from dlprobe.errors import DlprobeError
from dlprobe.rundir.schema import LOG_TO_CHOICES

HINT = (
    f"--log-to takes {' or '.join(LOG_TO_CHOICES)} (repeat it, or give both as wandb,mlflow): dlprobe's numbers go "
    "into the runs the script itself logs to (docs/fleet.md)"
)


def parse_log_to(values: Iterable[str]) -> tuple[str, ...]:
    """The libraries asked for, each once, in the order given; DlprobeError for a name dlprobe has no sink for."""
    out: list[str] = []
    for value in values:
        for word in value.split(","):
            name = word.strip().lower()
            if name not in LOG_TO_CHOICES:
                raise DlprobeError(f"--log-to {value!r}: no sink named {word.strip()!r}", hint=HINT)
            if name not in out:
                out.append(name)
    return tuple(out)
