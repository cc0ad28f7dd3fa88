"""A loader whose samples are views of tensors decoded per sample (`return torch.randn(1_000_000)[:100]`,
batch_size=None): its workers' memory grows and each batch sends 10,000x its own bytes. The batch's storage bytes
survive the events' fold into the loader, and the workers' growth names the views with what ruled a cache out."""

from __future__ import annotations

from dlprobe.analysis.findings.memory import find_cow_growth
from dlprobe.analysis.run.model import Series, SystemSeries, loaders_from_events
from dlprobe.rundir.schema import EV_WORKER_ATTRS
from tests.unit.fakes import MiB, parent, run, worker

# the first batch of that run as the hooks recorded it
BATCH_INFO = {"ev": "batch_info", "t": 101.0, "pid": 1, "loader": 0, "epoch": 0, "bytes": 400,
              "storage_bytes": 4_000_000, "leaves": [{"path": "batch", "dtype": "torch.float32", "shape": [100],
                                                      "bytes": 400, "storage_bytes": 4_000_000}]}  # fmt: skip
LOADER = {"ev": "loader", "t": 100.0, "pid": 1, "loader": 0, "num_workers": 2, "batch_size": None,
          "prefetch_factor": 2, "dataset": {"type": "DS", "len": 400}}  # fmt: skip


def _attrs(pid: int, t: float, phase: str) -> dict:
    return {"ev": EV_WORKER_ATTRS, "t": t, "pid": pid, "loader": 0, "worker": pid - 11, "phase": phase,
            "batches": 0 if phase == "start" else 200, "attrs": {}}  # fmt: skip


def _growing(pid: int) -> Series:
    """A worker whose anonymous memory rose 10 -> 490 MiB over its 6 readings, its private pages with it."""
    mib = [10, 100, 200, 300, 400, 490]
    s = Series(t=[100.0 + i for i in range(6)], rss=[(v + 100) * MiB for v in mib], uss=[v * MiB for v in mib],
               pss=[v * MiB for v in mib], swap=[0] * 6)  # fmt: skip
    s.anon = [v * MiB for v in mib]
    s.private_dirty = [v * MiB for v in mib]
    s.pss_anon, s.pss_file, s.pss_shmem = [v * MiB for v in mib], [0] * 6, [0] * 6
    return s


def test_the_batch_s_storage_bytes_survive_the_fold_and_the_workers_growth_names_the_views():
    (loader,), _ = loaders_from_events([LOADER, BATCH_INFO])
    assert loader.batch_info is not None and loader.batch_info["storage_bytes"] == 4_000_000
    events = [
        _attrs(11, 100.5, "start"),
        _attrs(11, 105.0, "end"),
        _attrs(12, 100.5, "start"),
        _attrs(12, 105.0, "end"),
    ]
    probed = run([loader], [parent(184 * MiB), worker(11, 0, _growing(11)), worker(12, 1, _growing(12))],
                 SystemSeries(), events)  # fmt: skip
    [found] = find_cow_growth(probed)
    assert "keep allocating" in found.title and "storages 10000x larger: views of larger tensors" in found.title
    assert found.evidence["batch_views"] == {"batch_bytes": 400, "sent_bytes": 4_000_000, "storage_ratio": 10000.0}
    assert "No attribute of the dataset grew in the 2 worker(s)" in found.detail  # what ruled a cache out
    assert found.fix.startswith("Return copies, not views")
