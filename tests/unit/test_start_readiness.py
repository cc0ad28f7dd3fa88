"""in_training/start_readiness.py on real DataLoaders: what forkserver and spawn would fail to pickle, named by its
attribute and reason, what a worker's copy would take, and that the check changes nothing of the training's objects."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import h5py
import lmdb
import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader, Dataset

from dlprobe.in_training import start_readiness


class Squares(Dataset):
    def __init__(self) -> None:
        self.values = list(range(10))
        self.transform = lambda x: x * x

    def __len__(self) -> int:
        return 10

    def __getitem__(self, i: int) -> Any:
        return self.transform(self.values[i])


def local_dataset() -> Dataset:
    class Local(Dataset):
        def __len__(self) -> int:
            return 4

        def __getitem__(self, i: int) -> int:
            return i

    return Local()


class H5Rows(Dataset):
    def __init__(self, path: Path) -> None:
        with h5py.File(path, "w") as f:
            f.create_dataset("x", data=np.zeros((8, 4)))
        self.meta = {"split": "train", "h5": h5py.File(path, "r")}

    def __len__(self) -> int:
        return 8


class LmdbRows(Dataset):
    def __init__(self, path: Path) -> None:
        self.env = lmdb.open(str(path))

    def __len__(self) -> int:
        return 8


class Records(Dataset):
    def __init__(self, n: int) -> None:
        self.records = [{"path": f"/data/img_{i:09d}.jpg", "label": i % 100} for i in range(n)]

    def __len__(self) -> int:
        return len(self.records)


class ClosesOnPickle(Dataset):
    """A __getstate__ with a side effect: the probe must never call it."""

    def __init__(self) -> None:
        self.closed = False
        self.values = [1, 2, 3]

    def __getstate__(self) -> dict[str, Any]:
        self.closed = True
        return dict(self.__dict__)

    def __len__(self) -> int:
        return 3


class Tensors(Dataset):
    def __init__(self) -> None:
        self.table = torch.zeros(1000)

    def __len__(self) -> int:
        return 1000


def readiness(dataset: Dataset, **kw: Any) -> dict[str, Any]:
    loader = DataLoader(dataset, num_workers=2, **kw)
    return start_readiness.readiness(loader, loader.worker_init_fn)


def blocker(event: dict[str, Any]) -> dict[str, Any]:
    assert event["picklable"] is False
    return next(o for o in event["objects"] if o["picklable"] is False)


def test_a_lambda_in_the_dataset_is_named_by_its_attribute() -> None:
    found = blocker(readiness(Squares()))
    assert (found["name"], found["attribute"], found["kind"]) == ("dataset", "self.transform", "lambda")
    assert readiness(Squares())["pickled_bytes"] is None  # not the collate_fn's bytes alone
    assert "Can't pickle local object" in found["error"] or "Can't get local object" in found["error"]  # 3.13


def test_a_lambda_as_collate_fn_and_worker_init_fn() -> None:
    event = readiness(Records(4), collate_fn=lambda b: b, worker_init_fn=lambda i: None)
    failing = {o["name"]: o["kind"] for o in event["objects"] if o["picklable"] is False}
    assert failing == {"collate_fn": "lambda", "worker_init_fn": "lambda"}


def test_a_class_defined_in_a_function() -> None:
    found = blocker(readiness(local_dataset()))
    assert (found["attribute"], found["kind"]) == ("self", "local-class")
    assert "local_dataset.<locals>.Local" in found["reason"]


def test_an_h5py_file_deep_in_the_dataset(tmp_path: Path) -> None:
    found = blocker(readiness(H5Rows(tmp_path / "x.h5")))
    assert (found["attribute"], found["kind"]) == ("self.meta['h5']", "handle")
    assert "h5py" in found["reason"]


def test_an_lmdb_environment(tmp_path: Path) -> None:
    found = blocker(readiness(LmdbRows(tmp_path / "db")))
    assert (found["attribute"], found["kind"]) == ("self.env", "handle")
    assert "lmdb.Environment" in found["reason"]


def test_a_lock(tmp_path: Path) -> None:
    dataset = Records(2)
    dataset.guard = threading.Lock()  # type: ignore[attr-defined]
    found = blocker(readiness(dataset))
    assert (found["attribute"], found["kind"]) == ("self.guard", "lock")


def test_the_copy_of_a_list_of_records_is_its_memory_not_its_pickle() -> None:
    event = readiness(Records(50_000))
    assert event["picklable"] is True
    # a dict of two keys, a 30-character path and a small int: ~250 bytes in memory, ~35 pickled
    assert 200 * 50_000 < event["copy_bytes"] < 400 * 50_000
    assert event["pickled_bytes"] < event["copy_bytes"] / 3


def test_a_memory_map_is_counted_by_length_not_read(tmp_path: Path) -> None:
    path = tmp_path / "x.npy"
    np.save(path, np.zeros(4_000_000))
    dataset = Records(1)
    dataset.table = np.load(path, mmap_mode="r")  # type: ignore[attr-defined]
    event = readiness(dataset)
    assert event["picklable"] is True
    assert event["pickled_bytes"] >= 32_000_000 and event["copy_bytes"] >= 32_000_000  # spawn copies it whole


def test_the_users_own_getstate_is_never_called() -> None:
    dataset = ClosesOnPickle()
    event = readiness(dataset)
    assert dataset.closed is False
    assert event["objects"][0]["not_run"] == [f"{__name__}.ClosesOnPickle"]


def test_a_tensor_is_not_moved_to_shared_memory() -> None:
    dataset = Tensors()
    event = readiness(dataset)
    assert not dataset.table.is_shared()
    assert (event["tensors"], event["tensor_bytes"]) == (1, 4000)


def test_the_check_stops_at_its_bound_and_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(start_readiness, "MAX_PICKLE_S", 0.0)
    event = readiness(Records(1000))
    assert event["picklable"] is None and event["pickled_bytes"] is None
    assert "pickling" in event["objects"][0]["skipped"]
    assert event["objects"][1]["picklable"] is True  # collate_fn, pickled by name, is still judged


def test_the_guard_blocks_of_a_script(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text("import os\n\ndef main():\n    pass\n\nif __name__ == '__main__':\n    main()\n    print(1)\n")
    assert start_readiness._guard_blocks(str(script)) == [(7, 8)]
    script.write_text("import os\nfor b in []:\n    pass\n")
    assert start_readiness._guard_blocks(str(script)) == []


def test_the_prediction_is_what_forkserver_really_does() -> None:
    """The lambda the check names is what a real forkserver start fails on."""
    assert blocker(readiness(Squares()))["kind"] == "lambda"
    loader = DataLoader(Squares(), num_workers=1, multiprocessing_context="forkserver")
    with pytest.raises(Exception, match="Can't (pickle|get) local object 'Squares.__init__.<locals>.<lambda>'"):
        next(iter(loader))


class LmdbDroppedOnPickle(LmdbRows):
    """The usual fix (openfold-3's): the environment is dropped in __getstate__ and reopened in each worker."""

    def __getstate__(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k != "env"}


def test_a_handle_the_users_getstate_drops_is_no_blocker(tmp_path: Path) -> None:
    event = readiness(LmdbDroppedOnPickle(tmp_path / "db"))
    assert event["picklable"] is True  # not called, so not judged: never a false "would fail"
    assert event["objects"][0]["not_run"] == [f"{__name__}.LmdbDroppedOnPickle"]


def test_a_strided_array_is_counted_not_copied() -> None:
    dataset = Records(1)
    dataset.table = np.zeros((4000, 2000))[:, ::2]  # type: ignore[attr-defined]  # 32 MiB, not contiguous
    event = readiness(dataset)
    assert event["picklable"] is True and event["pickled_bytes"] >= 32_000_000


PRELOAD_SCRIPT = """
import json, multiprocessing, os, sys

LOADED_IN = os.getpid()  # the process that ran this script's top level


def where_main_ran():
    return sys.modules["__mp_main__"].LOADED_IN != os.getpid()  # True: inherited from the fork server


if __name__ == "__main__":
    from dlprobe.in_training.start_readiness import forkserver_state

    before = forkserver_state()
    ctx = multiprocessing.get_context("forkserver")
    with ctx.Pool(1) as pool:
        inherited = pool.apply(where_main_ran)
    print(json.dumps({"before": before, "inherited": inherited, "after": forkserver_state()}))
"""


def test_the_fork_servers_preload_of_main_is_what_this_python_does(tmp_path: Path) -> None:
    """CPython before 3.14 (and 3.13.8) never imported `__main__` in the fork server (gh-126631): each worker ran
    the script's top level again. The check's reading of it agrees with a real forkserver worker of this Python."""
    import json
    import os
    import subprocess
    import sys

    script = tmp_path / "preload.py"
    script.write_text(PRELOAD_SCRIPT)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    env.pop("DLPROBE_RUN_DIR", None)
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60, env=env, check=True)
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    assert seen["before"]["preloads_main"] is seen["inherited"]
    assert seen["before"]["running"] is False and seen["after"]["running"] is True
    assert seen["before"]["preload"] == ["__main__"]


class Holder:
    """A bound method's object holds the lambda: pickle sends the method as (its object, its name)."""

    def __init__(self) -> None:
        self.cycle = self  # a walk that entered an object already on its path would go round
        self.transform = lambda x: x

    def apply(self, x: Any) -> Any:
        return self.transform(x)


class ViaMethod(Dataset):
    def __init__(self) -> None:
        self.fn = Holder().apply

    def __len__(self) -> int:
        return 2

    def __getitem__(self, i: int) -> Any:
        return self.fn(i)


def test_readiness_and_a_failed_start_name_the_same_attribute_by_one_walk() -> None:
    from dlprobe.in_training.start_failures import blame

    found = blocker(readiness(ViaMethod()))
    assert (found["attribute"], found["kind"]) == ("self.fn.__self__.transform", "lambda")
    failed = blame([("dataset", ViaMethod())])
    assert failed is not None and failed.path == "dataset.fn.__self__.transform"
    assert failed.reason == "a lambda (defined in Holder.__init__)"


def test_the_top_level_split_resolves_each_file_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The start-up profile's stacks repeat the same few files (torch's imports: dozens of `<module>` frames a stack);
    each is resolved once, whatever the number of stacks, and the split is the same as resolving every frame."""
    script = tmp_path / "train.py"
    script.write_text('import torch\nif __name__ == "__main__":\n    pass\n')
    main_file = str(script)
    blocks = start_readiness._guard_blocks(main_file) or []
    imports = [(f"/lib/mod{i}.py", "<module>", 1) for i in range(20)] + [("<frozen importlib._bootstrap>", "x", 1)]
    profile: list[tuple[Any, float]] = [(tuple(imports), 0.01)] * 300  # cut above the script: its imports too
    profile += [(((main_file, "<module>", 1), *imports), 0.02)] * 100  # its top-level import
    profile += [(((main_file, "<module>", 3),), 0.5)]  # inside the guard
    calls: list[str] = []
    real = start_readiness.os.path.realpath
    monkeypatch.setattr(start_readiness.os.path, "realpath", lambda p: calls.append(p) or real(p))
    split = start_readiness._top_level_split(profile, main_file, blocks, {})
    assert len(calls) == len(set(calls)) == 21
    assert split == pytest.approx({"imports": 5.0, "work": 0.0, "guarded": 0.5, "all_imports": 5.0})
