"""Baselines: a saved report.json from an earlier good run, read back with its schema checked, or written."""

from __future__ import annotations

import json
from pathlib import Path
from typing import cast

from dlprobe.analysis.report.schema import SCHEMA_VERSION, Report
from dlprobe.errors import DlprobeError
from dlprobe.rundir.files import write_json

# Versions 1 and 2 differ only where baselines do not read (1: job.ranks, now job.rank_count, the problem lists;
# 2: the evidence of a few finding codes).
READABLE_VERSIONS = (1, 2, 3, SCHEMA_VERSION)


def load_baseline(path: str) -> Report:
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
    return cast(Report, data)  # a report.json of a readable version: what check/metrics.py reads is in every one


def save_baseline(path: str, report: Report) -> None:
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
