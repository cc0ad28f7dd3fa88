"""Findings from what the batches contain: wider dtypes than needed, and repeated IterableDataset samples."""

from __future__ import annotations

from typing import Any

from dlprobe.analysis.evidence.finding import Finding
from dlprobe.analysis.measures.loop_timing import events_of
from dlprobe.analysis.run.model import RunData
from dlprobe.rundir.schema import EV_DUPES
from dlprobe.units import format_bytes

MIN_SAVED_BYTES = 16 * 1024  # per batch; below this a narrower dtype is not worth a finding
MIN_SAMPLE_ELEMENTS = 16  # integer leaves with fewer elements per sample are labels/ids, not pixels
DUPLICATE_SHARE = 0.2  # unsharded replicas repeat (n-1)/n of the samples; real data rarely repeats this much
MIN_DUPLICATES = 8

_ITEMSIZE = {"float64": 8, "float32": 4, "int64": 8, "int32": 4, "int16": 2, "int8": 1, "uint8": 1, "uint16": 2,
             "uint32": 4, "uint64": 8}  # fmt: skip
_NARROW_INTS = (("uint8", 0, 255), ("int8", -128, 127), ("int16", -(2**15), 2**15 - 1),
                ("int32", -(2**31), 2**31 - 1))  # fmt: skip


def _base_dtype(dtype: str) -> str:
    return dtype.removeprefix("torch.")


def _narrower(leaf: dict[str, Any]) -> tuple[str, str] | None:
    """(suggested dtype, why) for one batch leaf, or None when it is as narrow as it should be."""
    dtype = _base_dtype(str(leaf.get("dtype")))
    shape = leaf.get("shape") or []
    if dtype in ("float64", "double"):
        return "float32", "float64 values; models train in float32 (or lower)"
    if dtype in _ITEMSIZE and dtype.startswith(("int", "uint")) and "min" in leaf and "max" in leaf:
        per_sample = 1
        for d in shape[1:]:
            per_sample *= d
        if len(shape) < 2 or per_sample < MIN_SAMPLE_ELEMENTS:
            return None
        for name, low, high in _NARROW_INTS:
            if low <= leaf["min"] and leaf["max"] <= high and _ITEMSIZE[name] < _ITEMSIZE[dtype]:
                return name, f"{dtype} values between {leaf['min']} and {leaf['max']}"
    return None


def _cast_hint(path: str, dtype: str) -> str:
    if dtype == "float32":
        return f"{path}: build it as float32 (`x.astype(np.float32)` or `torch.from_numpy(x).float()`)"
    if dtype == "uint8":
        return (
            f"{path}: keep it as uint8 (`img.astype(np.uint8)`, or don't widen the decoded image) and convert "
            "after the copy (`x.to(device).float().div_(255)`)"
        )
    return f"{path}: store it as {dtype} (`.astype(np.{dtype})`) and widen it on the device if the model needs to"


def find_dtype_waste(run: RunData) -> list[Finding]:
    findings = []
    for loader in run.loaders:
        info = loader.batch_info or {}
        batch_bytes = info.get("bytes") or 0
        rows = []
        for leaf in info.get("leaves") or []:
            narrower = _narrower(leaf)
            if narrower is None:
                continue
            dtype, why = narrower
            current = _ITEMSIZE.get(_base_dtype(str(leaf["dtype"])), 8)
            new_bytes = leaf["bytes"] * _ITEMSIZE[dtype] // current
            rows.append({"path": leaf["path"], "dtype": _base_dtype(str(leaf["dtype"])), "shape": leaf.get("shape"),
                         "suggested_dtype": dtype, "why": why, "bytes": leaf["bytes"],
                         "saved_bytes": leaf["bytes"] - new_bytes})  # fmt: skip
        saved = sum(r["saved_bytes"] for r in rows)
        if saved < MIN_SAVED_BYTES:
            continue
        batches = sum(e.batches for e in loader.epochs)
        in_flight = loader.num_workers * (loader.config.get("prefetch_factor") or 2) * saved
        findings.append(
            Finding(
                code="dtype-waste",
                severity="warning",
                title=(
                    f"Loader {loader.loader_id}'s batches could be {format_bytes(saved)} smaller "
                    f"({100 * saved / batch_bytes:.0f}% of {format_bytes(batch_bytes)}): "
                    + ", ".join(f"{r['path']} is {r['dtype']}, {r['suggested_dtype']} holds it" for r in rows)
                ),
                detail=(
                    "Every batch is built, copied through /dev/shm from the workers, (pinned and) copied to the "
                    f"device at its full width. Over the {batches:,} batches of this run that is "
                    f"{format_bytes(saved * batches)} of copying that narrower dtypes avoid"
                    + (
                        f", and {format_bytes(in_flight)} less /dev/shm for the batches in flight."
                        if in_flight
                        else "."
                    )
                    + " numpy and Python floats collate to float64 by default."
                ),
                fix="Cast where the sample is built, in __getitem__: "
                + "; ".join(_cast_hint(r["path"], r["suggested_dtype"]) for r in rows)
                + ".",
                evidence={
                    "batch_bytes": batch_bytes,
                    "saved_bytes_per_batch": saved,
                    "leaves": rows,
                    "batches": batches,
                    "saved_bytes_total": saved * batches,
                },  # fmt: skip
                loader_id=loader.loader_id,
            )
        )
    return findings


SHARDING_FIX = (
    "Shard the stream by worker in __iter__: `info = torch.utils.data.get_worker_info()`; "
    "`wid, n = (info.id, info.num_workers) if info else (0, 1)`; then yield only items `i` with "
    "`i % n == wid` (better: give each worker its own files, `files[wid::n]`). Under DDP shard by rank too. "
    "For a `path label` index file, `from dlprobe.fixes import ShardedLineStream`, "
    '`ShardedLineStream("train.txt", drop_last=True)` does both: every line once per epoch across ranks and '
    "workers, `set_epoch(e)` to reshuffle."
)


def find_iterable_duplicates(run: RunData) -> list[Finding]:
    findings = []
    for loader in run.loaders:
        nw = loader.num_workers
        if not loader.dataset.get("iterable") or nw < 2:
            continue
        per_epoch: dict[int, dict[str, Any]] = {}
        for ev in events_of(run, EV_DUPES, loader.loader_id):
            per_epoch[ev["epoch"]] = ev  # the last summary of each epoch holds its totals
        worst = max(per_epoch.values(), key=lambda e: e["duplicates"], default=None)
        if worst is None or worst["duplicates"] < MIN_DUPLICATES:
            continue
        if worst["duplicates"] < DUPLICATE_SHARE * worst["samples"]:
            continue
        copies = worst["samples"] / worst["unique"] if worst["unique"] else 0.0
        length = loader.dataset.get("len")
        findings.append(
            Finding(
                code="iterable-duplicates",
                severity="error",
                title=(
                    f"Loader {loader.loader_id}'s IterableDataset yields each sample about {copies:.1f} times per "
                    f"epoch: {worst['duplicates']:,} of {worst['samples']:,} samples in epoch {worst['epoch']} were "
                    f"repeats, with {nw} workers"
                ),
                detail=(
                    "Every worker gets its own copy of an IterableDataset and runs __iter__ from the start, so "
                    "without sharding each of the num_workers workers yields the whole stream: the model sees "
                    "every sample num_workers times and the epoch takes that much longer. PyTorch's 'Length of "
                    "IterableDataset ... was reported to be' warning compares batches with len(dataset), so it "
                    "rarely fires."
                ),
                fix=SHARDING_FIX,
                evidence={
                    "num_workers": nw,
                    "epoch": worst["epoch"],
                    "samples": worst["samples"],
                    "unique": worst["unique"],
                    "duplicates": worst["duplicates"],
                    "copies_per_sample": round(copies, 2),
                    "dataset_len": length,
                    "first_duplicate_at": worst.get("first_duplicate_at"),
                },  # fmt: skip
                loader_id=loader.loader_id,
            )
        )
    return findings
