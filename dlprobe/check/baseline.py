"""Baselines: a saved report.json from an earlier good run, read back with its schema checked, or written."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from dlprobe.analysis.report_schema import SCHEMA_VERSION
from dlprobe.errors import DlprobeError
from dlprobe.rundir.files import write_json

# Version 1 reports differ only where baselines do not read (job.ranks, now job.rank_count; the problem lists).
READABLE_VERSIONS = (1, SCHEMA_VERSION)


def load_baseline(path: str) -> dict[str, Any]:
    """The baseline report, or a usage error naming the file and what is wrong with it."""
    file = Path(path)
    try:
        data = json.loads(file.read_text())
    except FileNotFoundError:
        raise DlprobeError(
            f"baseline {path}: no such file",
            hint="make one from a good run with `dlprobe check --baseline FILE --update-baseline SCRIPT`",
        ) from None
    except IsADirectoryError:
        raise DlprobeError(f"baseline {path}: is a directory", hint="pass the report.json file itself") from None
    except OSError as exc:
        raise DlprobeError(
            f"baseline {path}: cannot read: {exc.strerror}", hint="check the file's permissions"
        ) from None
    except ValueError as exc:
        raise DlprobeError(
            f"baseline {path}: not valid JSON ({exc})",
            hint="pass a report.json written by dlprobe, or write a new one with --update-baseline",
        ) from None
    if not isinstance(data, dict) or "schema_version" not in data:
        raise DlprobeError(
            f"baseline {path}: key 'schema_version' missing; not a dlprobe report",
            hint="pass a report.json written by `dlprobe run` or `dlprobe check`",
        )
    if data["schema_version"] not in READABLE_VERSIONS:
        raise DlprobeError(
            f"baseline {path}: key 'schema_version' is {data['schema_version']!r}, "
            f"expected {SCHEMA_VERSION} (this dlprobe's report format)",
            hint="write a new baseline with this version: add --update-baseline to a run of a good commit",
        )
    return data


def save_baseline(path: str, report: dict[str, Any]) -> None:
    file = Path(path)
    try:
        if file.parent != Path():
            file.parent.mkdir(parents=True, exist_ok=True)
        write_json(file, report)
    except OSError as exc:
        raise DlprobeError(
            f"cannot write baseline {path}: {exc.strerror or exc}",
            hint="the run's report.json is still saved in the run directory; copy it there yourself",
        ) from None
