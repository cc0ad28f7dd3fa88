"""Dataset summaries name the Python containers that cause copy-on-access, and only those."""

import numpy as np
import torch
from torch.utils.data import ConcatDataset, Dataset, Subset

from dlprobe.in_training.dataset_inspect import summarize_dataset


class Records(Dataset):
    def __init__(self, n):
        self.records = [{"path": f"/d/{i}.jpg", "label": i} for i in range(n)]
        self.labels = np.arange(n)
        self.mean = 0.5

    def __len__(self):
        return len(self.records)

    def __getitem__(self, i):
        return self.records[i]


def test_list_of_dicts_is_the_suspect_and_numpy_is_not():
    summary = summarize_dataset(Records(50_000))
    assert summary["len"] == 50_000 and summary["iterable"] is False
    [suspect] = summary["suspects"]
    assert suspect["attribute"] == "self.records"
    assert suspect["type"] == "list[dict]"
    assert suspect["items"] == 50_000
    assert suspect["objects"] > 100_000  # each dict holds a str and an int
    # the estimate is of the right order: a small dict + str + int is a few hundred bytes
    assert 5_000_000 < suspect["est_bytes"] < 40_000_000
    assert summary["est_bytes"] >= suspect["est_bytes"] + 50_000 * 8


def test_wrapped_datasets_are_followed():
    inner = Records(20_000)
    summary = summarize_dataset(ConcatDataset([Subset(inner, list(range(10))), inner]))
    attributes = [s["attribute"] for s in summary["suspects"]]
    assert "self.datasets[1].records" in attributes
    assert "self.datasets[0].dataset.records" in attributes


def test_tensor_only_dataset_has_no_suspects():
    summary = summarize_dataset(torch.utils.data.TensorDataset(torch.zeros(1000, 3)))
    assert summary["suspects"] == []
    assert 1000 * 3 * 4 <= summary["est_bytes"] < 1000 * 3 * 4 + 200  # the tensor plus its tuple


class TensorAttribute(Dataset):
    """A tensor held directly: its `size` is a method, not a count."""

    def __init__(self):
        self.features = torch.zeros(100, 4)

    def __len__(self):
        return 100

    def __getitem__(self, i):
        return self.features[i]


def test_a_tensor_attribute_is_counted_by_its_elements():
    summarize_dataset(TensorAttribute())  # raised TypeError: int() argument must be ... 'builtin_function_or_method'
    [features] = [a for a in _attributes(TensorAttribute()) if a["attribute"] == "self.features"]
    assert features["items"] == 400 and features["type"] == "torch.Tensor[torch.float32]"


def test_a_huggingface_streaming_dataset_is_summarized():
    datasets = __import__("pytest").importorskip("datasets")
    rows = datasets.Dataset.from_dict({"x": [[1.0] * 4] * 32, "y": list(range(32))})
    stream = rows.to_iterable_dataset(num_shards=4).with_format("torch")
    summary = summarize_dataset(stream)  # raised TypeError: int() argument must be ... 'builtin_function_or_method'
    assert summary["type"] == "datasets.iterable_dataset.IterableDataset" and summary["iterable"] is True


def _attributes(dataset):
    """Every attribute the summary measured (suspects are only the large ones)."""
    from dlprobe.in_training import dataset_inspect

    out: list[dict] = []
    dataset_inspect._walk(dataset, "self", 0, out)
    return out


def test_a_dataset_summary_that_raises_keeps_the_loaders_settings(monkeypatch):
    from dlprobe.in_training import loader_start, probe_errors

    def broken(dataset):
        raise TypeError("odd dataset")

    monkeypatch.setattr(loader_start, "summarize_dataset", broken)
    recorded = []
    monkeypatch.setattr(probe_errors, "record", lambda where, exc, consequence: recorded.append(where))
    loader = torch.utils.data.DataLoader(TensorAttribute(), batch_size=4, num_workers=2)
    config = loader_start.loader_config(loader, 0)
    assert (config["num_workers"], config["batch_size"]) == (2, 4)
    assert config["dataset"] == {"type": f"{__name__}.TensorAttribute"}
    assert recorded == ["hooks.dataset_summary"]


class Holder(Dataset):
    def __init__(self, **attrs):
        self.__dict__.update(attrs)

    def __len__(self):
        return 1

    def __getitem__(self, i):
        return i


class Record:
    def __init__(self, i):
        self.path = f"/d/{i}.jpg"
        self.label = i


def test_a_dataframe_is_a_suspect_by_its_object_columns_and_arrow_or_numeric_columns_are_safe():
    import pandas as pd

    n = 20_000
    frame = pd.DataFrame({"path": pd.Series([f"/d/{i}.jpg" for i in range(n)], dtype=object), "label": np.arange(n)})
    frame["caption"] = pd.Series([f"photo {i}" for i in range(n)]).astype("string[pyarrow]")
    [suspect] = summarize_dataset(Holder(frame=frame))["suspects"]
    assert suspect["attribute"] == "self.frame" and suspect["type"] == "pandas.DataFrame"
    assert suspect["items"] == n and suspect["objects"] == n + 1
    columns = {c["name"]: c for c in suspect["columns"]}
    assert columns["path"]["python_objects"] and columns["path"]["item"] == "str" and columns["path"]["objects"] == n
    assert not columns["label"]["python_objects"] and columns["label"]["dtype"] == "int64"
    assert not columns["caption"]["python_objects"] and columns["caption"]["arrow"]
    # the same frame with its strings in Arrow holds no Python objects: no suspect
    frame["path"] = frame["path"].astype("string[pyarrow]")
    assert summarize_dataset(Holder(frame=frame))["suspects"] == []


def test_object_arrays_tuples_sets_deques_series_and_record_classes_are_counted():
    import collections

    import pandas as pd

    n = 20_000
    holder = Holder(
        boxed=np.array(list(range(n)), dtype=object),
        names=tuple(f"n{i}" for i in range(n)),
        seen=set(range(n)),
        queue=collections.deque({"i": i} for i in range(n)),
        series=pd.Series([f"s{i}" for i in range(n)], dtype=object),
    )
    found = {s["attribute"]: s for s in summarize_dataset(holder)["suspects"]}
    assert set(found) == {"self.boxed", "self.names", "self.seen", "self.queue", "self.series"}
    assert found["self.boxed"]["item"] == "int" and found["self.series"]["item"] == "str"
    assert found["self.queue"]["type"] == "deque[dict]" and found["self.queue"]["objects"] > 2 * n
    [records] = summarize_dataset(Holder(records=[Record(i) for i in range(n)]))["suspects"]
    assert records["type"] == "list[Record]" and records["objects"] > 2 * n  # each record's attributes counted
