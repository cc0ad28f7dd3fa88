"""Usable cores: one function for run, tune and scan, capping the affinity mask by the cgroup CPU quota."""

import os

import pytest

from dlprobe.analysis.measures.loop_timing import recorded_usable_cores
from dlprobe.in_training.scan import plan
from dlprobe.system import cpus
from tests.unit.fakes import run


@pytest.mark.parametrize(("quota", "expected"), [(None, 8), (1.5, 2), (0.2, 1), (32.0, 8)])
def test_usable_cores_caps_the_affinity_by_the_quota(monkeypatch, quota, expected):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(8)))
    monkeypatch.setattr(cpus, "cgroup_cpu_quota", lambda pid="self": quota)
    assert cpus.usable_cores() == expected
    assert cpus.cpu_facts()["usable_cores"] == expected


def test_scan_uses_the_same_count(monkeypatch):
    """scan used to count the affinity mask only, so a 1-core container quota still got 8 readers."""
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(8)))
    monkeypatch.setattr(cpus, "cgroup_cpu_quota", lambda pid="self": 1.0)
    assert plan.usable_cores is cpus.usable_cores
    assert plan.usable_cores() == 1


def test_analysis_reads_the_recorded_count_not_the_live_machine():
    r = run([], [])
    r.meta["machine"] = {"usable_cores": 3, "cpu_affinity": 64, "cpu_count": 64}
    assert recorded_usable_cores(r) == 3
    r.meta["machine"] = {"cpu_affinity": 5}  # older runs recorded only the affinity
    assert recorded_usable_cores(r) == 5
