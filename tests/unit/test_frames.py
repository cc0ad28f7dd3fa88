"""One predicate for "is this frame the user's code", shared by stack dumps, tracebacks, start-up and triage."""

import os
import runpy

import pytest

import dlprobe
from dlprobe import frames
from dlprobe.in_training import startup_profile, target, tracebacks
from dlprobe.supervisor.hang import stacks
from dlprobe.triage.logscan import Frame

NOT_USER = [
    os.__file__,  # the standard library
    "/usr/lib/python3.11/json/decoder.py",  # another machine's standard library, in a log
    "/opt/venv/lib/python3.12/site-packages/torch/utils/data/dataloader.py",
    "/usr/lib/python3/dist-packages/numpy/core/fromnumeric.py",
    os.path.join(os.path.dirname(dlprobe.__file__), "in_training", "hooks.py"),  # the probe itself
    "<frozen runpy>",
    "<string>",
]
# A user's project may carry dlprobe's name (a clone, ~/dlprobe, ~/work/dlprobe-exp) or sit next to the package.
NAMED_LIKE_IT = [
    "/home/u/dlprobe/train.py",
    "/home/u/work/dlprobe-exp/train.py",
    "/home/u/dlprobe/dlprobe/in_training/train.py",
    frames.PROBE_DIR.rstrip(os.sep) + "-exp/train.py",
]
USER = ["/home/u/project/train.py", "/work/data/my_dataset.py", "relative/train.py", *NAMED_LIKE_IT]


@pytest.mark.parametrize("filename", NOT_USER)
def test_library_stdlib_and_probe_frames_are_not_the_users(filename):
    assert not frames.is_user_file(filename)
    assert Frame(filename, 1, "f").is_library  # triage's tracebacks use the same predicate


@pytest.mark.parametrize("filename", USER)
def test_the_users_own_files_are(filename):
    assert frames.is_user_file(filename)
    assert not Frame(filename, 1, "f").is_library


def test_every_side_uses_the_one_predicate():
    assert stacks.is_user_file is frames.is_user_file
    assert tracebacks.is_probe_file is frames.is_probe_file is startup_profile.is_probe_file


def test_probe_files_are_dlprobe_and_runpy_only():
    assert frames.is_probe_file(target.__file__)
    assert frames.is_probe_file("<frozen runpy>") and frames.is_probe_file(runpy.__file__)
    assert not frames.is_probe_file(os.__file__) and not frames.is_probe_file("/home/u/train.py")


@pytest.mark.parametrize("filename", NAMED_LIKE_IT)
def test_a_users_file_named_like_dlprobe_is_not_the_probes(filename):
    # dlprobe's frames are known by the installed package's own directory, never by its name in a path
    assert not frames.is_probe_file(filename)


def _raised_in_the_standard_library() -> BaseException:
    import json

    try:
        json.loads("{not json")  # raises inside json/decoder.py, called from this (the user's) line
    except ValueError as exc:
        return exc
    raise AssertionError("json.loads accepted it")


def test_a_scan_entry_and_a_script_error_name_the_users_line_not_the_librarys_raise():
    from dlprobe.in_training import script_errors
    from dlprobe.in_training.scan.worker import describe_exception

    exc = _raised_in_the_standard_library()
    detail, where = describe_exception(exc)
    assert detail.startswith("JSONDecodeError: ") and where is not None
    path, _, line = where.rpartition(":")
    assert path == __file__ and int(line) == _raised_in_the_standard_library.__code__.co_firstlineno + 4
    # the script's error reads its frame through the same helper
    assert script_errors.innermost_user_frame is frames.innermost_user_frame
    assert frames.innermost_user_frame([]) is None
