"""The run-directory schema: every name defined once and distinct, and older or newer runs told apart."""

from __future__ import annotations

import json

import pytest

from dlprobe.errors import DlprobeError
from dlprobe.rundir import schema
from dlprobe.rundir.files import open_run_dir


def _constants(prefix: str = "", suffixes: tuple[str, ...] = ()) -> dict[str, str]:
    return {
        name: value
        for name, value in vars(schema).items()
        if name.isupper() and isinstance(value, str) and name.startswith(prefix) and name.endswith(suffixes or "")
    }


@pytest.mark.parametrize(
    "group",
    [
        _constants(suffixes=("_FILE", "_DIR")),
        _constants(suffixes=("_ENV",)),
        _constants(prefix="EV_"),
        _constants(prefix="SAMPLE_"),
    ],
    ids=["files", "env", "events", "samples"],
)
def test_each_name_is_defined_once_and_distinct(group):
    assert len(group) >= 3
    assert len(set(group.values())) == len(group), group


def test_every_file_constant_is_listed_as_a_run_dir_name():
    assert sorted(_constants(suffixes=("_FILE", "_DIR")).values()) == sorted(schema.RUN_DIR_NAMES)


def test_env_vars_are_dlprobe_names():
    assert all(v.startswith("DLPROBE_") for v in _constants(suffixes=("_ENV",)).values())


def test_numbered_names():
    assert schema.hang_record_name(3) == "hang-3.json"
    assert schema.hang_stack_name(3, 1234) == "hang3-1234.json"
    assert schema.inflight_slot_name(1234) == "1234.bin"


def _run_dir(tmp_path, meta):
    (tmp_path / schema.META_FILE).write_text(json.dumps(meta))
    return str(tmp_path)


def test_a_run_without_schema_version_is_version_1_and_opens(tmp_path):
    assert schema.run_schema_version({}) == schema.LEGACY_RUN_SCHEMA_VERSION == 1
    assert open_run_dir(_run_dir(tmp_path, {"dlprobe_version": "0.1"})) == tmp_path


def test_a_run_of_this_version_opens(tmp_path):
    assert open_run_dir(_run_dir(tmp_path, {"schema_version": schema.RUN_SCHEMA_VERSION})) == tmp_path


def test_a_newer_run_is_a_user_error_with_an_upgrade_hint(tmp_path):
    with pytest.raises(DlprobeError) as caught:
        open_run_dir(_run_dir(tmp_path, {"schema_version": schema.RUN_SCHEMA_VERSION + 1}))
    assert "newer dlprobe" in caught.value.message
    assert "upgrade dlprobe" in caught.value.hint
    assert caught.value.exit_code == 2
