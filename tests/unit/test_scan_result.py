"""The scan's result folded from events: each loader keeps its own samples, and unchecked loaders are said."""

from __future__ import annotations

from dlprobe.scan.result import ScanResult

SANITY = "Lightning's sanity-check validation loader"


def _start(loader, total, role=None, others=()):
    fields = {"dataset_type": "m.Records", "total": total, "selected": total, "iterable": False, "workers": 2}
    return {"t": 1.0, "ev": "scan_start", "loader": loader, "start_method": "fork", "role": role,
            "other_loaders": list(others), **fields}  # fmt: skip


def _bad(index, kind, detail):
    return {"t": 1.0, "ev": "scan_bad", "index": index, "kind": kind, "detail": detail}


def _end(scanned):
    return {"t": 1.0, "ev": "scan_end", "scanned": scanned, "duration_s": 0.1, "interrupted": False}


def test_a_damaged_scan_event_is_skipped_as_load_run_skips_it():
    result = ScanResult("train.py", [], 0)
    result.feed([_start(0, 16), {"t": 1.0, "ev": "scan_bad", "index": "3", "kind": "nan"}, _end(16)])
    assert result.bad == [] and result.to_json()["scanned"] == 16


def test_two_loaders_keep_their_own_bad_indices_and_every_one_counts():
    result = ScanResult("train.py", [], None)
    result.feed([_start(0, 16, SANITY), _bad(3, "nan", "NaN"), _end(16)])
    result.feed([_start(1, 64), _bad(3, "exception", "bad"), _end(64)])
    assert [(e["loader"], e["index"], e["kind"]) for e in result.bad] == [(0, 3, "nan"), (1, 3, "exception")]
    data = result.to_json()
    assert data["scanned"] == 80 and data["loaders_checked"] == [0, 1] and result.complete
    assert result.unchecked_note() is None and result.exit_code() == 1


def test_a_lone_validation_loader_never_reads_as_clean_data():
    result = ScanResult("train.py", ["--fast"], 0)
    result.feed([_start(0, 2000, SANITY), _end(2000)])
    note = result.unchecked_note()
    assert note is not None and "only loader 0 (m.Records, 2,000 samples: " + SANITY + ") was checked" in note
    assert "training loader" in note and note.endswith("dlprobe scan --loader 1 train.py --fast")
    assert result.to_json()["only_some_loaders_checked"] and result.exit_code() == 0


def test_other_loaders_alive_at_the_scan_are_listed():
    result = ScanResult("train.py", [], 0)
    result.feed([_start(0, 16, others=[{"dataset_type": "m.Train", "total": 64}]), _end(16)])
    assert "1 other DataLoader(s), not checked: m.Train (64 samples)" in (result.unchecked_note() or "")
