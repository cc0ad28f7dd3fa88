"""What `dlprobe attach` will watch: never PID 1 or a kernel thread; other users' processes in the tree are named."""

from __future__ import annotations

import os

import pytest

from dlprobe.errors import DlprobeError
from dlprobe.supervisor.attach_tree import ROLE_MAIN, ROLE_OTHER, Proc, other_users, refuse_machine_wide


def _proc(pid: int, uid: int | None, role: str, env: dict[str, str] | None) -> Proc:
    proc = Proc(pid, 1, "python", ["python", "train.py"], True, None, role=role, env=env)
    proc.uid = uid
    return proc


def test_another_users_process_is_named_with_what_could_not_be_read() -> None:
    me = os.geteuid()
    other = me + 1
    notes = other_users([
        _proc(10, me, ROLE_MAIN, None),  # ours: nothing to say
        _proc(11, other, ROLE_MAIN, None),  # its environment refused: its rank is unknown
        _proc(12, other, ROLE_MAIN, {"RANK": "0"}),
        _proc(13, other, ROLE_OTHER, None),
        _proc(14, None, ROLE_OTHER, None),  # gone before its owner was read
    ])  # fmt: skip
    assert notes == [
        f"pid 11 (python) in the tree belongs to another user (uid {other}); its environment may not be read by "
        "this user, so its rank is not known",
        f"pid 12 (python) in the tree belongs to another user (uid {other})",
        f"pid 13 (python) in the tree belongs to another user (uid {other})",
    ]


@pytest.mark.parametrize("pid", [1, 2])
def test_init_and_kthreadd_are_refused(pid: int) -> None:
    with pytest.raises(DlprobeError) as raised:
        refuse_machine_wide(pid)
    assert raised.value.hint


def test_an_ordinary_process_is_not_refused() -> None:
    refuse_machine_wide(os.getpid())
