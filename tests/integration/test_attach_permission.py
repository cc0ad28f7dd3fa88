"""`dlprobe attach` by another user: the kernel refuses to show it the training's memory maps, and the refusal is
said as a permission problem, with the user who may attach, never as "no process that has loaded torch"."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from dlprobe.errors import DlprobeError
from dlprobe.supervisor import attach_tree

OTHER_UID = 65534


def _resolve_as(uid: int, pid: int) -> dict[str, str]:
    """attach_tree.resolve(pid) in a forked child that gave up root for uid (a real second user for /proc)."""
    read_end, write_end = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover - ends in os._exit
        try:
            os.setgroups([])
            os.setresgid(uid, uid, uid)
            os.setresuid(uid, uid, uid)
            try:
                attach_tree.resolve(pid)
                answer = {"resolved": "yes"}
            except DlprobeError as exc:
                answer = {"message": exc.message, "hint": exc.hint or ""}
            os.write(write_end, json.dumps(answer).encode())
        finally:
            os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as f:
        data = f.read()
    os.waitpid(child, 0)
    return json.loads(data)


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to start a training as root and attach as uid 65534")
def test_attach_by_another_user_is_refused_as_a_permission_problem(tmp_path):
    training = subprocess.Popen(
        [sys.executable, "-c", "import torch, sys, time; print('ready', flush=True); time.sleep(120)"],
        stdout=subprocess.PIPE, text=True, cwd=tmp_path,
    )  # fmt: skip
    try:
        assert training.stdout is not None and training.stdout.readline().strip() == "ready"
        answer = _resolve_as(OTHER_UID, training.pid)
        assert "has no process that has loaded torch" not in answer.get("message", ""), answer
        assert f"pid {training.pid} belongs to uid 0, and this user (uid {OTHER_UID}) may not read" in answer["message"]
        assert "as the user who runs the job, or as root" in answer["hint"]
        own = _resolve_as(0, training.pid)  # its own user attaches
        assert own == {"resolved": "yes"}, own
    finally:
        training.kill()
        training.wait(timeout=30)
