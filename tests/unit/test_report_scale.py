"""`dlprobe report` stays linear in the run's batches: the loaders are folded from the events once per report, and
an epoch's per-batch lists grow in place as its chunks are read (a new list per chunk was quadratic). Operation
counts and structure, not timings: the times are benchmarks/report_scale.py's."""

from __future__ import annotations

import shutil
from pathlib import Path

from dlprobe.analysis.job import model as job
from dlprobe.analysis.run import model
from dlprobe.analysis.run.model import loaders_from_events
from dlprobe.commands.outputs import write_outputs

FIXTURES = Path(__file__).parent.parent / "fixtures" / "rundirs"


def test_a_report_folds_the_loaders_from_the_events_once(tmp_path, monkeypatch):
    run_dir = tmp_path / "run"
    shutil.copytree(FIXTURES / "leaky_list", run_dir)
    calls = []

    def counted(events):
        calls.append(len(events))
        return loaders_from_events(events)

    monkeypatch.setattr(model, "loaders_from_events", counted)
    monkeypatch.setattr(job, "loaders_from_events", counted)
    report = write_outputs(run_dir, None)  # report.json, report.html, trace.json, the plot
    assert report["loaders"] and (run_dir / "trace.json").exists()
    assert len(calls) == 1, calls


def _events(chunks: int) -> list[dict]:
    events: list[dict] = [
        {"ev": "loader", "t": 1.0, "pid": 10, "loader": 0, "num_workers": 2},
        {"ev": "epoch", "t": 2.0, "pid": 10, "loader": 0, "epoch": 0, "iter_s": 0.1, "workers": []},
    ]
    for i in range(chunks):
        waits = [0.001 * (i + 1)] * 4
        events.append(
            {"ev": "batches", "t": 3.0 + i, "pid": 10, "loader": 0, "epoch": 0, "waits": waits, "handovers": waits}
        )
    return events


def test_an_epochs_waits_and_handovers_grow_in_place_chunk_by_chunk(monkeypatch):
    made: list[model.Epoch] = []

    class RecordedEpoch(model.Epoch):
        def __init__(self, *args, **kwargs) -> None:
            super().__init__(*args, **kwargs)
            made.append(self)

    monkeypatch.setattr(model, "Epoch", RecordedEpoch)
    lists: list[tuple[int, int]] = []  # (id of the epoch's waits, id of its handovers) after each event

    def fed(events):
        for event in events:
            yield event
            if made:
                lists.append((id(made[0].waits), id(made[0].handovers)))

    (loader,), _ = loaders_from_events(fed(_events(50)))  # type: ignore[arg-type]
    epoch = loader.epochs[0]
    assert epoch.batches == 200 and len(epoch.waits) == 200 and epoch.handovers == epoch.waits
    # the list each chunk extends is the one the epoch started with: no copy of the whole epoch per chunk
    assert len(set(lists)) == 1, f"{len(set(lists))} lists for 50 chunks"
