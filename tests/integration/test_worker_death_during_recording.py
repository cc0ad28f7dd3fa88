"""A DataLoader worker that dies while the probe records the script's error: torch's SIGCHLD handler runs then."""

from __future__ import annotations

from tests.conftest import assert_no_probe_frames


def test_a_worker_dying_while_the_error_is_recorded_leaves_the_users_traceback_and_the_finding(probe):
    # The script's exception kills a worker the first time its text is read, which under dlprobe is inside the
    # probe's record of it: what torch 2.15.0 did in one run of three when a worker segfaulted (issue 21).
    result = probe("worker_dies_as_the_error_is_printed.py")
    assert result.returncode == 1, result.stderr
    assert_no_probe_frames(result.stderr)
    assert "BatchRejected: batch 0 rejected by the training step" in result.stderr
    assert "During handling of the above exception" not in result.stderr
    assert "is killed by signal" not in result.stderr
    (finding,) = result.findings("script-error")
    assert finding["evidence"]["type"] == "BatchRejected"
    assert finding["evidence"]["line"] == 43
