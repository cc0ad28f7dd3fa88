"""Which of the dataset's attributes grew inside the workers, and whether each epoch's workers kept it.

Read from the workers' EV_WORKER_ATTRS events (in_training/worker_attrs.py: each data attribute's item count at the
worker's start, when a count changed, and at its normal exit). A measure, not a finding: cow-growth's allocation
story names the attribute with it (`self.cache` grew from 0 to 384 items in each of the 6 workers) and picks the fix
that fits what happens to it at the epoch's end. Nothing here where no attribute grew (the growth is in a C library,
in a decoder's own buffers): the finding then says nothing about attributes."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dlprobe.analysis.run.model import LoaderRecord, RunData
from dlprobe.rundir.schema import EV_WORKER_ATTRS

# An attribute grew in a worker when its last reading holds this many more items than its start: a counter, a few
# bookkeeping entries or a list of epochs seen stay under it; a cache of decoded samples passes it in its first
# seconds.
ATTR_MIN_ITEMS = 32
NAMED_MAX = 3  # attributes named, the largest growth first
# The fate of a grown attribute at the epoch's end (evidence "fate"):
THROWN_AWAY = "thrown_away"  # workers restarted each epoch and each epoch's began it again from its start
ENDS_WITH_EPOCH = "ends_with_epoch"  # one epoch's workers seen, not persistent: it goes when they stop
KEPT = "kept"  # persistent workers: the same processes keep it from epoch to epoch
FATES = (THROWN_AWAY, ENDS_WITH_EPOCH, KEPT)


@dataclass
class _Worker:
    pid: int
    start: dict[str, int] | None = None  # its "start" reading
    last: dict[str, int] | None = None  # its latest reading
    last_t: float = float("-inf")
    batches: int = 0


def _workers(run: RunData, loader_id: int) -> dict[int, _Worker]:
    out: dict[int, _Worker] = {}
    for ev in run.events:
        if ev.get("ev") != EV_WORKER_ATTRS or ev.get("loader") != loader_id:
            continue
        w = out.setdefault(int(ev["pid"]), _Worker(int(ev["pid"])))
        attrs = {str(k): int(v) for k, v in ev["attrs"].items()}
        if ev["phase"] == "start" and w.start is None:
            w.start = attrs
        if float(ev["t"]) >= w.last_t:
            w.last, w.last_t, w.batches = attrs, float(ev["t"]), int(ev["batches"])
    return {pid: w for pid, w in out.items() if w.start is not None and w.last is not None}


def _epochs_of(loader: LoaderRecord) -> dict[int, set[int]]:
    """worker pid -> the epochs whose events listed it (a persistent worker: every epoch's)."""
    out: dict[int, set[int]] = {}
    for e in loader.epochs:
        for pid in e.worker_pids:
            out.setdefault(pid, set()).add(e.epoch)
    return out


def _fate(loader: LoaderRecord, path: str, grown: list[_Worker], epoch_of: dict[int, int]) -> str | None:
    """What happens to the attribute at an epoch's end, as this run shows it; None where it shows nothing sure."""
    if loader.config.get("persistent_workers"):
        return KEPT
    by_epoch: dict[int, list[_Worker]] = {}
    for w in grown:
        if w.pid in epoch_of:
            by_epoch.setdefault(epoch_of[w.pid], []).append(w)
    epochs = sorted(by_epoch)
    if len(epochs) == 1:
        return ENDS_WITH_EPOCH
    if len(epochs) < 2:
        return None
    for before, after in zip(epochs, epochs[1:], strict=False):
        reached = max((w.last or {}).get(path, 0) for w in by_epoch[before])
        began = max((w.start or {}).get(path, 0) for w in by_epoch[after])
        if began >= reached:  # the new workers did not begin it again: this run does not show it thrown away
            return None
    return THROWN_AWAY


def watched_workers(run: RunData, loader: LoaderRecord) -> int:
    """How many of the loader's workers had their dataset's attributes read at their start and later: none grew in
    them, where grown_attributes is empty, rules a growing cache out; 0 where none was read (nothing ruled out)."""
    return len(_workers(run, loader.loader_id))


def grown_attributes(run: RunData, loader: LoaderRecord) -> list[dict[str, Any]]:
    """The loader's dataset attributes that grew by ATTR_MIN_ITEMS or more in at least one worker, the largest
    total growth first (NAMED_MAX at most): JSON-ready rows for cow-growth's evidence ("growing_attributes")."""
    workers = _workers(run, loader.loader_id)
    if not workers:
        return []
    epochs_of = _epochs_of(loader)
    epoch_of = {pid: min(epochs) for pid, epochs in epochs_of.items()}  # the epoch that started it
    batch_size = loader.config.get("batch_size")
    paths = sorted({p for w in workers.values() for p in (w.last or {})})
    rows: list[dict[str, Any]] = []
    for path in paths:
        grown = [w for w in workers.values() if _growth(w, path) >= ATTR_MIN_ITEMS]
        if not grown:
            continue
        growth = [_growth(w, path) for w in grown]
        samples = sum(w.batches for w in grown) * batch_size if isinstance(batch_size, int) else None
        ends = [(w.last or {}).get(path, 0) for w in grown]
        starts = [(w.start or {}).get(path, 0) for w in grown]
        rows.append({
            "attribute": path,
            "workers": len(workers),
            "grown_workers": len(grown),
            "start_items_min": min(starts),
            "start_items_max": max(starts),
            "end_items_min": min(ends),
            "end_items_max": max(ends),
            "grown_items": sum(growth),
            "samples_fetched": samples,
            "items_per_sample": round(sum(growth) / samples, 3) if samples else None,
            "epochs": _served(loader, grown, epochs_of),
            "fate": _fate(loader, path, grown, epoch_of),
        })  # fmt: skip
    rows.sort(key=lambda r: int(r["grown_items"]), reverse=True)
    return rows[:NAMED_MAX]


def _served(loader: LoaderRecord, grown: list[_Worker], epochs_of: dict[int, set[int]]) -> int:
    """How many epochs the grown workers served: those whose events listed them and, for persistent workers (an
    epoch's event lists the workers it started, none after the first), every later epoch begun before their last
    reading."""
    served: set[int] = set().union(*(epochs_of.get(w.pid, set()) for w in grown))
    if served and loader.config.get("persistent_workers"):
        last = max(w.last_t for w in grown)
        served |= {e.epoch for e in loader.epochs if e.epoch > min(served) and e.t_start <= last}
    return len(served)


def _growth(w: _Worker, path: str) -> int:
    return (w.last or {}).get(path, 0) - (w.start or {}).get(path, 0)


def _span(low: int, high: int) -> str:
    return f"{low:,}" if low == high else f"{low:,}-{high:,}"


def growth_text(rows: list[dict[str, Any]]) -> str:
    """One sentence per grown attribute (the first with its fate), for the finding's detail; "" for none."""
    if not rows:
        return ""
    parts = []
    for i, r in enumerate(rows):
        every = r["grown_workers"] == r["workers"]
        who = f"each of the {r['workers']} workers" if every else f"{r['grown_workers']} of the {r['workers']} workers"
        if r["workers"] == 1:
            who = "the worker"
        text = (
            f"`{r['attribute']}` grew from {_span(r['start_items_min'], r['start_items_max'])} to "
            f"{_span(r['end_items_min'], r['end_items_max'])} items in {who}"
        )
        per = r["items_per_sample"]
        if per is not None and i == 0:
            text += f" ({_per_sample(per)})"
        if i == 0 and (fate := _fate_text(r)):
            text += f"; {fate}"
        parts.append(text)
    return " ".join(p + "." for p in parts)


def _per_sample(per: float) -> str:
    if 0.9 <= per <= 1.1:
        return "1 per sample fetched"
    if per >= 1:
        return f"{per:.2g} per sample fetched"
    return f"1 per {1 / per:.2g} samples fetched"


def _fate_text(row: dict[str, Any]) -> str:
    name = row["attribute"].rsplit(".", 1)[-1]
    if row["fate"] == THROWN_AWAY:
        return (
            f"each epoch's new workers begin it again: a worker's {name} is thrown away at each epoch's end "
            "(persistent_workers=False), so every epoch pays to fill it once per worker"
        )
    if row["fate"] == ENDS_WITH_EPOCH:
        return (
            f"a worker's {name} goes with it when its epoch ends (persistent_workers=False): a next epoch's "
            "workers would begin it again"
        )
    if row["fate"] == KEPT:
        return f"the workers are persistent, so each keeps its own {name} from epoch to epoch, one copy per worker"
    return ""


def growth_fix(rows: list[dict[str, Any]]) -> str:
    """The fix for the attribute that grew most, fitted to its fate; "" for none."""
    if not rows:
        return ""
    top = rows[0]
    attr = top["attribute"]
    shared = (
        f"Fill `{attr}` in the parent before the DataLoader is built (every sample decoded once), so the forked "
        "workers share it read-only instead of each filling its own"
    )
    outside = "or keep the cache outside the process (decoded samples in files or an np.memmap that every worker maps)"
    if top["fate"] == KEPT:
        return (
            f"Bound `{attr}` (an LRU of a fixed size: functools.lru_cache(maxsize=N) or an OrderedDict trimmed in "
            f"__getitem__): each persistent worker holds its own copy. {shared}, {outside}."
        )
    return (
        f"{shared}; or set persistent_workers=True and bound `{attr}` (an LRU of a fixed size), so each worker keeps "
        f"what it filled across epochs within a known budget; {outside}."
    )
