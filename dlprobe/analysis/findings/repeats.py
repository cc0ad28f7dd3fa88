"""Data that trains wrong without failing: the same random draws or the same order, again and again.

Two symptoms, each named with the cause this run's own records show:
- shared-rng: a random generator the dataset holds started at one same state in several workers (or epochs) and drew
  the same numbers there (in_training/rng_streams.py: its state as the workers forked, as each started after the
  script's worker_init_fn, and after its first batch).
- same-order-every-epoch: a shuffling sampler gave the same index order in several complete epochs
  (in_training/sample_order.py: one running hash per epoch), with a DistributedSampler whose `epoch` never changed
  named as the cause (set_epoch not called)."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from dlprobe.analysis.evidence.finding import Finding
from dlprobe.analysis.measures.loop_timing import events_of
from dlprobe.analysis.run.model import RunData
from dlprobe.rundir.schema import EV_SAMPLE_ORDER, EV_WORKER_RNG

MIN_SHARED_STARTS = 2  # worker starts that drew the same stream: two are already one stream too many
MIN_ORDER_SAMPLES = 8  # a shuffle of fewer indices repeats by chance often enough (1 in 8! = 40,320 for 8)

# The names users write for the classes the hooks record by their module
_OWNER_NAMES = {
    "numpy.random._generator.Generator": "numpy.random.Generator",
    "numpy.random.mtrand.RandomState": "numpy.random.RandomState",
    "torch._C.Generator": "torch.Generator",
}
# What makes a fresh generator of the same class from the worker's seed
_RESEED = {
    "numpy.random.Generator": "np.random.default_rng(info.seed)",
    "numpy.random.RandomState": "np.random.RandomState(info.seed % 2**32)",
    "random.Random": "random.Random(info.seed)",
    "torch.Generator": "torch.Generator().manual_seed(info.seed)",
}


def owner_name(owner: str) -> str:
    return _OWNER_NAMES.get(owner, owner)


def _shared_stream(rows: list[tuple[int, int, dict[str, Any]]]) -> list[tuple[int, int, dict[str, Any]]]:
    """The largest set of worker starts (epoch, worker, row) that began at one state and, after their first batch,
    were at one same later state again: they drew the same numbers. Empty when none did."""
    by_start: dict[str, list[tuple[int, int, dict[str, Any]]]] = defaultdict(list)
    for epoch, worker, row in rows:
        if row.get("start") and row.get("after") and not row.get("replaced"):
            by_start[row["start"]].append((epoch, worker, row))
    best: list[tuple[int, int, dict[str, Any]]] = []
    for group in by_start.values():
        by_after: dict[str, list[tuple[int, int, dict[str, Any]]]] = defaultdict(list)
        for entry in group:
            if entry[2]["after"] != entry[2]["start"]:  # the worker drew from it
                by_after[entry[2]["after"]].append(entry)
        drew_same = max(by_after.values(), key=len, default=[])
        if len(drew_same) >= MIN_SHARED_STARTS and len(group) > len(best):
            best = group
    return best


def _fix_text(attribute: str, owner: str) -> str:
    target = "info.dataset" + attribute.removeprefix("self")
    fresh = _RESEED.get(owner, "a new generator seeded with info.seed")
    return (
        f"Give every worker its own stream: seed it from the worker's seed in worker_init_fn, "
        f"`def worker_init_fn(worker_id): info = torch.utils.data.get_worker_info(); {target} = {fresh}`, and pass "
        "`DataLoader(..., worker_init_fn=worker_init_fn)` (torch draws a new info.seed for every worker and every "
        f"epoch). Or make the generator in the worker, lazily: `{attribute} = None` in __init__, and in "
        f"__getitem__ `if {attribute} is None: {attribute} = {fresh.replace('info.seed', 'get_worker_info().seed')}`."
    )


def find_shared_rng(run: RunData) -> list[Finding]:
    findings = []
    for loader in run.loaders:
        rows: dict[str, list[tuple[int, int, dict[str, Any]]]] = defaultdict(list)
        owners: dict[str, str] = {}
        for ev in events_of(run, EV_WORKER_RNG, loader.loader_id):
            for row in ev.get("rngs") or []:
                if isinstance(row, dict) and isinstance(row.get("attribute"), str):
                    rows[row["attribute"]].append((int(ev["epoch"]), int(ev["worker_id"]), row))
                    owners[row["attribute"]] = owner_name(str(row.get("owner") or "?"))
        for attribute, seen in rows.items():
            shared = _shared_stream(seen)
            if not shared:
                continue
            owner = owners[attribute]
            workers = sorted({w for _, w, _ in shared})
            epochs = sorted({e for e, _, _ in shared})
            drew_same = max(
                (sum(1 for _, _, r in shared if r["after"] == after) for after in {r["after"] for _, _, r in shared}),
                default=0,
            )
            as_forked = all(r.get("parent") == r["start"] for _, _, r in shared)
            persistent = bool(loader.config.get("persistent_workers"))
            across = f"{len(workers)} workers" + (f" in each of {len(epochs)} epochs" if len(epochs) > 1 else "")
            if len(workers) == 1:
                across = f"worker {workers[0]} in each of {len(epochs)} epochs"
            restart = (
                f" The workers restart every epoch (persistent_workers=False), so every epoch repeats the draws of "
                f"the one before: {len(epochs)} epochs here."
                if len(epochs) > 1 and not persistent
                else ""
            )
            findings.append(
                Finding(
                    code="shared-rng",
                    severity="warning",
                    title=(
                        f"Loader {loader.loader_id}'s {across} drew the same random numbers from `{attribute}` "
                        f"({owner}): {len(shared)} worker starts began at one state"
                    ),
                    detail=(
                        f"`{attribute}` is a {owner} that the dataset holds, so each worker gets a copy of it with "
                        "the dataset (by fork, or pickled under spawn), all at the same state: torch seeds only the "
                        "global generators (random, torch, numpy's np.random) per worker, never one an object "
                        f"holds. In this run {len(shared)} worker starts found it at one same state after "
                        "worker_init_fn"
                        + (", the state it had in the main process as the workers started" if as_forked else "")
                        + f", and {drew_same} of them were at one same state again after their first batch: they "
                        "drew the same numbers, so the augmentation repeats across workers and the model sees "
                        f"fewer distinct samples than it is shown.{restart}"
                    ),
                    fix=_fix_text(attribute, owner),
                    evidence={
                        "attribute": attribute,
                        "rng_class": owner,
                        "num_workers": loader.num_workers,
                        "persistent_workers": persistent,
                        "shared_starts": len(shared),
                        "worker_starts": len(seen),
                        "distinct_starts": len({r.get("start") for _, _, r in seen}),
                        "worker_ids": workers,
                        "epochs": epochs,
                        "drew_same": drew_same,
                        "as_forked": as_forked,
                    },
                    loader_id=loader.loader_id,
                )
            )
    return findings


SET_EPOCH_FIX = (
    "Call `sampler.set_epoch(epoch)` at the start of every epoch, before `for batch in loader:` (a DistributedSampler "
    "shuffles with seed + epoch, so without it every epoch gets epoch 0's order). PyTorch Lightning and HF Trainer "
    "do this for the samplers they make; a sampler of your own needs the call."
)


def find_same_order(run: RunData) -> list[Finding]:
    findings = []
    for loader in run.loaders:
        per_epoch: dict[int, dict[str, Any]] = {}
        for ev in events_of(run, EV_SAMPLE_ORDER, loader.loader_id):
            per_epoch[int(ev["epoch"])] = ev
        if len(per_epoch) < 2:
            continue
        groups: dict[tuple[str, int], list[dict[str, Any]]] = defaultdict(list)
        for ev in per_epoch.values():
            if ev.get("shuffle") is True and int(ev.get("samples") or 0) >= MIN_ORDER_SAMPLES:
                groups[(str(ev["digest"]), int(ev["samples"]))].append(ev)
        same = max(groups.values(), key=len, default=[])
        if len(same) < 2:
            continue
        epochs = sorted(int(e["epoch"]) for e in same)
        sampler = str(same[0].get("sampler") or "the sampler")
        short = sampler.rsplit(".", 1)[-1]
        sampler_epochs = [e.get("sampler_epoch") for e in same]
        set_epoch_missing = all(isinstance(v, int) for v in sampler_epochs) and len(set(sampler_epochs)) == 1
        of = "all" if len(same) == len(per_epoch) else f"{len(same)} of the"
        if set_epoch_missing:
            value = sampler_epochs[0]
            cause = (
                "its set_epoch() was never called"
                if value == 0
                else f"its set_epoch() was given the same value ({value}) each time"
            )
            title = (
                f"Loader {loader.loader_id}'s {short} gave the same order in {of} {len(per_epoch)} epochs: {cause} "
                f"(its epoch was {value} in each)"
            )
            samples = int(same[0]["samples"])
            detail = (
                f"{sampler} shuffles with its seed plus its `epoch` attribute, which only set_epoch() changes. Its "
                f"epoch was {value} as each of epochs {', '.join(map(str, epochs))} began, and the {samples:,} "
                "indices came in one identical order each time: every epoch shows the model the same batches in the "
                "same sequence, which shuffling is there to prevent."
            )
            fix = SET_EPOCH_FIX
        else:
            title = (
                f"Loader {loader.loader_id}'s {short} shuffles, yet gave the same order in {of} {len(per_epoch)} epochs"
            )
            detail = (
                f"The {same[0]['samples']:,} indices of epochs {', '.join(map(str, epochs))} came in one identical "
                f"order. {sampler} is a shuffling sampler; this run does not show why it repeats (most often its "
                "generator is seeded to the same value before each epoch, or the sampler is made anew each epoch "
                "with one fixed seed)."
            )
            fix = (
                "Seed the sampler's generator once, before the first epoch (a torch.Generator passed as "
                "`generator=` advances by itself from one epoch to the next), and keep one sampler for the whole "
                "run; for a DistributedSampler call `sampler.set_epoch(epoch)` each epoch."
            )
        findings.append(
            Finding(
                code="same-order-every-epoch",
                severity="warning",
                title=title,
                detail=detail,
                fix=fix,
                evidence={
                    "sampler": sampler,
                    "epochs": epochs,
                    "epochs_seen": len(per_epoch),
                    "samples": int(same[0]["samples"]),
                    "sampler_epochs": sampler_epochs,
                    "set_epoch_missing": set_epoch_missing,
                    "digest": str(same[0]["digest"]),
                },
                loader_id=loader.loader_id,
            )
        )
    return findings
