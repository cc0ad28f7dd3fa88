"""In-flight slot files damaged by someone else: the writer never dies of it (no SIGBUS), notices, stops writing and
says so once; the readers take a short, garbled or linked file for no reading."""

from __future__ import annotations

import json
import multiprocessing
import os
import time
from pathlib import Path

import pytest

from dlprobe.in_training import probe_errors
from dlprobe.in_training.inflight_slot import Slot
from dlprobe.rundir import inflight_format as fmt
from dlprobe.rundir.schema import INFLIGHT_DIR

WHERE = "inflight.slot.loader1.worker3"


def _every_update(slot: Slot) -> None:
    slot.begin(fmt.KIND_MAP, [12, 13, 14])
    slot.sample(0, 12)
    slot.set_phase(fmt.COLLATE)
    slot.set_batch_len(3)
    slot.begin(fmt.KIND_MAP, [15])  # keeps the unfinished fetch as a failure: the writes on the error path
    slot.keep_recent(1, 1.0, 2.0, 3.0, 15)
    slot.loop(fmt.WAITING, 0, 1, 2, 3)


def _damage_then_write(path: str, damage: str, out: str) -> None:
    """In a child, so that a SIGBUS kills only it: make the slot, let `damage` happen to its file, write on."""
    slot = Slot(Path(path), fmt.ROLE_WORKER, 1, 3)
    _every_update(slot)
    if damage == "truncate":
        os.truncate(path, 0)
    elif damage == "replace":
        other = Path(path).with_name("other")
        other.write_bytes(b"someone else's file")
        os.replace(other, path)
    elif damage == "symlink":
        os.symlink(Path(path).parent.parent / "outside.bin", Path(path).with_name("link"))
        os.replace(Path(path).with_name("link"), path)
    elif damage == "remove":
        os.unlink(path)
    elif damage == "overwrite":
        with open(path, "r+b") as f:
            f.write(b"\0" * 24)
    _every_update(slot)  # the store past a cut file's end was a SIGBUS through the mapping
    slot.check(time.time())
    size = os.stat(path, follow_symlinks=False).st_size if os.path.lexists(path) else None
    _every_update(slot)  # stopped: nothing more reaches the file
    slot.check(time.time())
    after = os.stat(path, follow_symlinks=False).st_size if os.path.lexists(path) else None
    Path(out).write_text(
        json.dumps(
            {
                "stopped": slot.stopped,
                "counts": probe_errors._counts,
                "info": probe_errors._info,
                "size": size,
                "after": after,
            }
        )
    )


def _run(tmp_path: Path, damage: str) -> dict:
    path = fmt.slot_path(tmp_path / "run", 4242)
    out = tmp_path / "out.json"
    child = multiprocessing.get_context("fork").Process(target=_damage_then_write, args=(str(path), damage, str(out)))
    child.start()
    child.join(60)
    assert child.exitcode == 0, f"the writer died: exit {child.exitcode}"
    return json.loads(out.read_text())


@pytest.mark.parametrize(
    ("damage", "reason"),
    [
        ("truncate", "was truncated"),
        ("replace", "was replaced by another file"),
        ("symlink", "was replaced by another file"),
        ("remove", "was removed"),
        ("overwrite", "was overwritten"),
    ],
)
def test_a_damaged_slot_file_stops_the_recording_once_and_never_the_writer(tmp_path, damage, reason):
    result = _run(tmp_path, damage)
    assert result["stopped"] is True
    assert result["counts"] == {WHERE: 1}
    exc_type, message, consequence = result["info"][WHERE]
    assert exc_type == "SlotDamaged" and reason in message and "inflight/4242.bin" in message
    assert consequence.startswith("in-flight recording stopped in worker 3 (loader 1)")
    assert result["after"] == result["size"]  # no write after the stop
    path = fmt.slot_path(tmp_path / "run", 4242)
    assert fmt.read_slot(path) is None  # what is left there is no reading
    if damage == "replace":
        assert path.read_bytes() == b"someone else's file"  # the writer kept to its own file
    if damage == "symlink":
        assert not (tmp_path / "outside.bin").exists()  # nothing written through the link


def test_an_intact_slot_file_keeps_recording(tmp_path):
    slot = Slot(fmt.slot_path(tmp_path, 4242), fmt.ROLE_WORKER, 1, 3)
    _every_update(slot)
    slot.check(time.time())
    assert not slot.stopped
    read = fmt.read_slot(fmt.slot_path(tmp_path, 4242))
    assert read is not None and read["indices"] == [15] and read["failed"]["indices"] == [12, 13, 14]
    assert read["batch_len"] == 1 and read["phase"] == "done" and read["recent"] == [[1, 1.0, 2.0, 3.0, 15]]
    assert read["loop"] is None and read["faulthandler_signal"] is None


# --- the reader ---------------------------------------------------------------------------------------------------


def _good_slot(tmp_path: Path, pid: int = 4242, role: int = fmt.ROLE_WORKER) -> tuple[Path, bytes]:
    path = fmt.slot_path(tmp_path, pid)
    slot = Slot(path, role, 0, 1)
    slot.begin(fmt.KIND_MAP, [7, 8])
    slot.sample(1, 8)
    data = path.read_bytes()
    assert fmt.read_slot(path)["index"] == 8
    return path, data


@pytest.mark.parametrize("size", [0, 20, 80, fmt.SLOT_SIZE - 1])
def test_a_slot_file_cut_short_is_no_reading(tmp_path, size):
    path, data = _good_slot(tmp_path)
    path.write_bytes(data[:size])
    assert fmt.read_slot(path) is None
    assert fmt.read_all(tmp_path) == {}


def _patched(data: bytes, offset: int, value: bytes) -> bytes:
    return data[:offset] + value + data[offset + len(value) :]


@pytest.mark.parametrize(
    ("offset", "value"),
    [
        (6, (9).to_bytes(2, "little")),  # role
        (8, (0).to_bytes(4, "little", signed=True)),  # pid
        (fmt.OFF_FETCH, (77).to_bytes(4, "little")),  # phase
        (fmt.OFF_FETCH + 4, (12).to_bytes(4, "little")),  # kind
        (fmt.OFF_FETCH + 8, (-5).to_bytes(8, "little", signed=True)),  # fetches
        (fmt.OFF_BATCH_LEN, (-3).to_bytes(4, "little", signed=True)),  # batch length
        # a failure record (fetch 1) with a phase no writer stores
        (fmt.OFF_FAILED, (99).to_bytes(4, "little") + b"\0" * 4 + (1).to_bytes(8, "little")),
    ],
)
def test_a_garbled_slot_is_no_reading(tmp_path, offset, value):
    path, data = _good_slot(tmp_path)
    path.write_bytes(_patched(data, offset, value))
    assert fmt.read_slot(path) is None


def test_a_main_slot_with_a_garbled_loop_state_is_no_reading(tmp_path):
    path, data = _good_slot(tmp_path, role=fmt.ROLE_MAIN)
    path.write_bytes(_patched(data, fmt.OFF_LOOP, (50).to_bytes(4, "little")))
    assert fmt.read_slot(path) is None


def test_a_huge_iterable_batch_length_keeps_the_first_positions_only(tmp_path):
    path = fmt.slot_path(tmp_path, 4242)
    slot = Slot(path, fmt.ROLE_WORKER, 0, 1)
    slot.begin(fmt.KIND_ITERABLE, None, 100)
    slot.set_batch_len(10**6)  # or a garbled length up to 2**31: never a list that long
    read = fmt.read_slot(path)
    assert read["batch_len"] == 10**6 and read["indices"] == list(range(100, 100 + fmt.MAX_INDICES))


def test_a_slot_name_that_is_a_link_a_folder_or_a_fifo_is_no_reading(tmp_path):
    real, _data = _good_slot(tmp_path / "elsewhere")
    folder = tmp_path / INFLIGHT_DIR
    folder.mkdir()
    os.symlink(real, folder / "11.bin")  # someone's os.replace of a link over a slot: nothing followed out of it
    (folder / "12.bin").mkdir()
    os.mkfifo(folder / "13.bin")  # a FIFO must not block the reader
    for pid in (11, 12, 13):
        assert fmt.read_slot(fmt.slot_path(tmp_path, pid)) is None
    assert fmt.read_all(tmp_path) == {}
