"""stacks.txt as speedscope's sampled-profile format: shared frames, one profile per process named by role."""

from __future__ import annotations

from dlprobe.analysis.report.speedscope import build_speedscope
from dlprobe.analysis.run.stackfile import StackProfile, parse_stacks
from tests.unit.fakes import loader, run, series, worker

RAW = """\
process 10:"python train.py";main (train.py:9);step (train.py:4) 30
process 10:"python train.py";process 11:"python train.py";_worker_loop (torch/worker.py:300);__getitem__ (ds.py:7) 50
process 10:"python train.py";process 11:"python train.py";_worker_loop (torch/worker.py:300);collate (c.py:2) 20
"""


def test_one_sampled_profile_per_process_over_shared_frames():
    probe_run = run([loader()], [worker(11, 0, series([1], [1]))])
    probe_run.stacks = StackProfile(rate=100, stacks=parse_stacks(RAW))
    doc = build_speedscope(probe_run)
    assert doc is not None and doc["$schema"].endswith("file-format-schema.json")
    frames = doc["shared"]["frames"]
    assert frames[0] == {"name": "main", "file": "train.py", "line": 9}
    assert [p["name"] for p in doc["profiles"]] == ["loader 0 / worker 0 (pid 11): 70 samples at 100 Hz",
                                                    "pid 10: 30 samples at 100 Hz"]  # fmt: skip
    worker_profile = doc["profiles"][0]
    assert worker_profile["type"] == "sampled" and worker_profile["weights"] == [50, 20]
    assert worker_profile["endValue"] == 70
    names = [[frames[i]["name"] for i in sample] for sample in worker_profile["samples"]]
    assert names == [["_worker_loop", "__getitem__"], ["_worker_loop", "collate"]]  # outermost first


def test_no_stacks_no_file():
    assert build_speedscope(run([loader()], [])) is None
