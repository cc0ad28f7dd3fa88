"""analysis/advice_agreement.py: two findings whose fixes point opposite ways are each told of the other."""

from __future__ import annotations

from dlprobe.analysis.advice_agreement import agree
from dlprobe.analysis.evidence.finding import Finding
from dlprobe.analysis.findings.start_method import KEEP_FORK

LEAVE = "start threads after the workers exist; or multiprocessing_context='forkserver'/'spawn'."
HAZARD = Finding("fork-hazard", "error", "Loader 0 forked its workers with 1 Python thread running", "d", LEAVE, {}, 0)
START = Finding("start-method", "warning", "Loader 0's workers start only under fork", "d",
                "`self.transform`: define it at the module's top level." + KEEP_FORK,
                {"blockers": [{"what": "dataset", "attribute": "self.transform", "kind": "lambda"}]}, 0)  # fmt: skip


def test_the_way_to_spawn_goes_through_the_start_method_changes_and_fork_is_not_forced_while_it_hangs():
    hazard, start = agree([HAZARD, START])
    assert "would not start under forkserver or spawn as it is (start-method: self.transform (lambda))" in hazard.fix
    assert KEEP_FORK not in start.fix and "Forcing fork keeps this run's fork-hazard" in start.fix
    assert (hazard.code, start.code) == ("fork-hazard", "start-method")


def test_findings_that_do_not_contradict_are_left_as_they_are():
    other_loader = Finding("fork-hazard", "error", "t", "d", HAZARD.fix, {}, 1)
    assert agree([other_loader, START]) == [other_loader, START]
    assert agree([START]) == [START]
