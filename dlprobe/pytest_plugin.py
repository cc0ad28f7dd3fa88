"""pytest plugin: `@pytest.mark.dlprobe(max_worker_uss_growth="100 MB")` fails a test whose loaders break a limit."""

from __future__ import annotations

import tempfile
from typing import TYPE_CHECKING, Any, cast

import pytest

if TYPE_CHECKING:
    from dlprobe.analysis.report.schema import Report

MARKER = "dlprobe"
# Bounds and baselines belong to `dlprobe check`, which runs a whole script; a marked test runs as it is.
NOT_FOR_MARKER = ("max_batches", "max_seconds", "hang_timeout", "baseline", "baseline_margin", "baseline_margins")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "dlprobe(**limits): probe every torch DataLoader the test iterates and fail the test when one breaks a "
        "limit; keys as in `dlprobe check` configs, e.g. max_worker_uss_growth='100 MB', fail_on=['cow-growth']",
    )


def _config_for(item: pytest.Item, kwargs: dict[str, Any]) -> Any:
    from dlprobe.check.config import config_from_mapping
    from dlprobe.errors import DlprobeError

    source = f"@pytest.mark.dlprobe on {item.nodeid}"
    unsupported = [key for key in kwargs if key in NOT_FOR_MARKER]
    if unsupported:
        pytest.fail(f"{source}: key '{unsupported[0]}' is for `dlprobe check` runs, not the marker; "
                    "the marker takes the memory, wait and fail_on limits", pytrace=False)  # fmt: skip
    try:
        return config_from_mapping(kwargs, source)
    except DlprobeError as exc:
        pytest.fail(f"{exc.message} ({exc.hint})", pytrace=False)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Any:
    marker = item.get_closest_marker(MARKER)
    if marker is None:
        return (yield)
    if marker.args:
        pytest.fail("@pytest.mark.dlprobe takes keyword arguments only, e.g. max_worker_uss_growth='100 MB'",
                    pytrace=False)  # fmt: skip
    from dlprobe.api import Watch
    from dlprobe.check.rules import evaluate, failed

    config = _config_for(item, dict(marker.kwargs))
    name = item.name.replace("/", "_")[:40]
    with Watch(tempfile.mkdtemp(prefix=f"dlprobe-{name}-"), name=item.nodeid) as probe:
        result = yield
    rows = evaluate(config, cast("Report", probe.report))  # the report Watch built with report_for
    item.user_properties.append(("dlprobe_run_dir", str(probe.run_dir)))
    table = "\n".join(f"{r.rule:<28} {r.threshold:<14} {r.observed:<24} {r.status.upper()}" for r in rows)
    item.add_report_section("call", "dlprobe", f"{table}\nrun: {probe.run_dir}")
    bad = failed(rows)
    if bad:
        lines = "\n".join(f"  {r.rule}: {r.message}" for r in bad)
        pytest.fail(f"the DataLoader broke dlprobe limits:\n{lines}\nrun saved in {probe.run_dir}", pytrace=False)
    return result
