"""The Prometheus exposition (dlprobe/supervisor/prom/): the text dlprobe writes by hand, read back by the official
parser; the families built from the watch's state, whose series follow the live processes only."""

from __future__ import annotations

import io
import os
import re
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from dlprobe.supervisor.prom.exposition import COUNTER, GAUGE, Family, render
from dlprobe.supervisor.prom.metrics import MAX_LOADERS_PER_PROCESS, JobLabels, LiveState, families
from dlprobe.supervisor.run_watch import Progress
from dlprobe.supervisor.sampler import Sampler

MiB = 1 << 20


def parsed(text: str) -> dict[str, Any]:
    """The official parser's families by name (a counter's name without `_total`, as the parser gives it)."""
    return {family.name: family for family in text_string_to_metric_families(text)}


def test_what_it_writes_is_what_the_official_parser_reads() -> None:
    odd = 'a "quoted" \\ back\nslash'
    gauge = Family("dlprobe_x_bytes", GAUGE, "Help with a \\ and a\nnewline.")
    gauge.add({"job": odd, "rank": ""}, 3 * MiB)
    gauge.add({"job": "j"}, 1.5)
    gauge.add({"job": "k"}, None)  # not read yet: no series
    counter = Family("dlprobe_y_total", COUNTER, "A counter.")
    counter.add({}, 7)
    empty = Family("dlprobe_z_seconds", GAUGE, "Nothing now.")
    got = parsed(render([gauge, counter, empty]))
    assert got["dlprobe_x_bytes"].type == "gauge"
    assert got["dlprobe_x_bytes"].documentation == "Help with a \\ and a\nnewline."
    assert [(s.labels, s.value) for s in got["dlprobe_x_bytes"].samples] == [
        ({"job": odd}, 3 * MiB),
        ({"job": "j"}, 1.5),
    ]
    assert got["dlprobe_y"].type == "counter" and got["dlprobe_y"].samples[0].name == "dlprobe_y_total"
    assert got["dlprobe_z_seconds"].samples == []


def _state(progress: Progress, sampler: Sampler, **kw: Any) -> LiveState:
    return LiveState(progress, sampler, kw.get("target", 100), 1000.0, kw.get("hangs", 0), kw.get("problems", 0))


def _job_of_two_ranks() -> tuple[Progress, Sampler]:
    progress = Progress()
    sampler = Sampler(os.getpid(), io.StringIO(), None)
    progress.feed(
        [
            {"ev": "process", "pid": 101, "rank": 0, "local_rank": 0, "host": "node-a"},
            {"ev": "process", "pid": 102, "rank": 1, "local_rank": 1, "host": "node-a"},
            {"ev": "loader", "pid": 101, "loader": 0, "start_method": None},
            {"ev": "start_method", "pid": 101, "loader": 0, "start_method": "fork"},
            {
                "ev": "epoch",
                "pid": 101,
                "loader": 0,
                "workers": [{"pid": 201, "worker_id": 0}, {"pid": 202, "worker_id": 1}],
            },
            {"ev": "epoch", "pid": 102, "loader": 0, "workers": [{"pid": 203, "worker_id": 0}]},
            {"ev": "batches", "pid": 101, "t": 1005.0, "loader": 0, "waits": [0.5, 0.25], "total": 2},
            {"ev": "batches", "pid": 102, "t": 1006.0, "loader": 0, "n": 4, "wait_s": 2.0, "waits": [1.0], "total": 4},
        ],
        sampler,
    )
    for pid, uss in ((101, 300), (102, 310), (201, 40), (202, 50), (203, 60)):
        sampler.last[pid] = {"rss": 2 * uss * MiB, "uss": uss * MiB, "pss": (uss + 100) * MiB, "pss_anon": uss * MiB,
                             "private_dirty": uss * MiB, "anon": uss * MiB, "cpu": 1.5, "fd": 12}  # fmt: skip
    sampler.last_system = {"shm": {"used": 5 * MiB, "total": 64 * MiB}, "avail": 8 << 30}
    return progress, sampler


def test_every_worker_of_every_rank_has_its_series_with_the_labels() -> None:
    progress, sampler = _job_of_two_ranks()
    got = parsed(render(families(JobLabels("job-7", "here"), _state(progress, sampler, hangs=1))))
    uss = {s.labels["pid"]: s for s in got["dlprobe_worker_uss_bytes"].samples}
    assert set(uss) == {"201", "202", "203"}
    assert uss["202"].labels == {"job": "job-7", "host": "node-a", "rank": "0", "local_rank": "0", "loader": "0",
                                 "worker": "1", "pid": "202", "start_method": "fork"}  # fmt: skip
    assert uss["202"].value == 50 * MiB and uss["203"].labels["rank"] == "1"
    assert "start_method" not in uss["203"].labels  # not known yet: left out, never a guess
    kinds = {(s.labels["pid"], s.labels["kind"]) for s in got["dlprobe_worker_pss_kind_bytes"].samples}
    assert ("201", "anon") in kinds and ("201", "file") not in kinds  # a kind the kernel did not give: no series
    assert {s.labels["pid"] for s in got["dlprobe_main_uss_bytes"].samples} == {"101", "102"}
    waits = {s.labels["rank"]: s.value for s in got["dlprobe_loader_data_wait_seconds"].samples}
    assert waits == {"0": 0.75, "1": 2.0}
    batches = {s.labels["rank"]: s.value for s in got["dlprobe_loader_batches"].samples}
    assert batches == {"0": 2, "1": 4}
    assert got["dlprobe_shm_used_bytes"].samples[0].value == 5 * MiB
    assert got["dlprobe_hangs"].samples[0].value == 1
    assert got["dlprobe_tree_pss_bytes"].samples[0].value == (400 + 410 + 140 + 150 + 160) * MiB
    assert got["dlprobe_worker_open_fds"].samples[0].value == 12


def test_a_worker_that_exited_is_dropped_from_the_next_exposition() -> None:
    progress, sampler = _job_of_two_ranks()
    job = JobLabels("j", "h")
    before = parsed(render(families(job, _state(progress, sampler))))
    sampler.gone |= {201, 102}  # a worker of rank 0 ends; rank 1 exits (its worker and loader with it)
    after = parsed(render(families(job, _state(progress, sampler))))
    assert len(before["dlprobe_worker_uss_bytes"].samples) == 3
    assert {s.labels["pid"] for s in after["dlprobe_worker_uss_bytes"].samples} == {"202", "203"}
    assert {s.labels["pid"] for s in after["dlprobe_loader_batches"].samples} == {"101"}
    assert {s.labels["pid"] for s in after["dlprobe_main_uss_bytes"].samples} == {"101"}
    assert after["dlprobe_loader_workers"].samples[0].value == 1


def test_a_process_building_a_loader_per_epoch_exports_its_latest_loaders_only() -> None:
    progress = Progress()
    sampler = Sampler(os.getpid(), io.StringIO(), None)
    events = [{"ev": "batches", "pid": 100, "loader": i, "waits": [0.1], "total": 1} for i in range(50)]
    progress.feed(events, sampler)
    sampler.known.add(100)
    got = parsed(render(families(JobLabels("j", "h"), _state(progress, sampler))))
    loaders = sorted(int(s.labels["loader"]) for s in got["dlprobe_loader_batches"].samples)
    assert loaders == list(range(50 - MAX_LOADERS_PER_PROCESS, 50))


def test_a_single_process_run_has_no_rank_labels() -> None:
    progress = Progress()
    sampler = Sampler(os.getpid(), io.StringIO(), None)
    progress.feed([{"ev": "epoch", "pid": 100, "loader": 0, "workers": [{"pid": 200, "worker_id": 0}]}], sampler)
    sampler.known |= {100, 200}
    sampler.last = {100: {"uss": 1}, 200: {"uss": 2}}
    got = parsed(render(families(JobLabels("j", "h"), _state(progress, sampler, target=100))))
    assert got["dlprobe_worker_uss_bytes"].samples[0].labels == {"job": "j", "host": "h", "loader": "0",
                                                                 "worker": "0", "pid": "200"}  # fmt: skip
    assert got["dlprobe_main_uss_bytes"].samples[0].labels == {"job": "j", "host": "h", "pid": "100"}


@pytest.mark.parametrize("name", ["dlprobe_worker_uss_bytes", "dlprobe_loader_batches_total"])
def test_every_family_is_named_with_its_unit_and_documented(name: str) -> None:
    progress, sampler = _job_of_two_ranks()
    text = render(families(JobLabels("j", "h"), _state(progress, sampler)))
    names = [line.split()[2] for line in text.splitlines() if line.startswith("# TYPE")]
    assert name in names and len(names) == len(set(names))
    for line in text.splitlines():
        if line.startswith("# TYPE"):
            _, _, metric, kind = line.split()
            assert metric.startswith("dlprobe_")
            assert metric.endswith("_total") == (kind == "counter"), line


def test_docs_fleet_lists_every_metric_and_no_other() -> None:
    progress, sampler = _job_of_two_ranks()
    defined = {family.name for family in families(JobLabels("j", "h"), _state(progress, sampler))}
    page = (Path(__file__).resolve().parents[2] / "docs" / "fleet.md").read_text()
    named = set(re.findall(r"\bdlprobe_[a-z_]+[a-z]", page))
    assert defined - named == set(), "metrics docs/fleet.md does not list"
    assert named - defined == set(), "metrics docs/fleet.md names that the exporter does not have"


def test_an_error_of_the_exporters_own_is_recorded_and_the_next_refresh_tries_again(tmp_path: Path) -> None:
    from dlprobe.supervisor.problems import Problems
    from dlprobe.supervisor.prom.exporter import EXPOSITION_WHERE, Exporter
    from dlprobe.supervisor.prom.setup import PromSetup

    progress, sampler = _job_of_two_ranks()
    problems = Problems()
    exporter = Exporter(PromSetup(tmp_path, None), tmp_path / "run-1", problems, 1000.0, 100)
    sampler.last_system = {"shm": 5}  # a reading of a shape the exporter does not expect: its own bug
    exporter.refresh(1.0, progress, sampler, 0)
    assert [(p["where"], p["type"]) for p in problems.as_list()] == [(EXPOSITION_WHERE, "AttributeError")]
    assert not exporter.textfile.path.exists()  # type: ignore[union-attr]
    sampler.last_system = {}
    exporter.refresh(1.1, progress, sampler, 0)  # within the refresh interval: not yet
    exporter.refresh(2.0, progress, sampler, 0)
    text = exporter.textfile.path.read_text()  # type: ignore[union-attr]
    assert parsed(text)["dlprobe_probe_problems"].samples[0].value == 1  # the exposition says so itself
    exporter.close()
    assert list(tmp_path.iterdir()) == []
