"""Whether the sample is at fault, for an exception a worker raised on one index.

The training process loads that index again alone (in_training/sample_check.py: a `sample_check` event); here the
outcome decides the finding. Only a sample that fails alone, while a neighbour loads, is a `bad-sample`. One that
loads alone, or fails like every other index, is a `worker-error`: state the workers share or exhaust, never a sample
to skip. Without a check the report says so and blames nothing. An index outside range(len(dataset)) is the
sampler's (`sampler-out-of-range`), whatever the dataset raised.

The outcome is the typed fact `sample_alone` in the evidence of `bad-sample` and `worker-error` (fails, fails-any,
loads, unverified), for any other finding that needs to know the sample was not at fault.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dlprobe.analysis.evidence.finding import Finding
from dlprobe.analysis.evidence.schema import Evidence
from dlprobe.analysis.measures.fork_ties import shared_handles, tied_error
from dlprobe.analysis.measures.stack_causes import indices_text
from dlprobe.analysis.run.model import LoaderRecord, RunData
from dlprobe.analysis.run.text_cut import first_line as cut_line
from dlprobe.rundir.schema import (
    EV_SAMPLE_CHECK,
    SAMPLE_CHECK_ALIKE,
    SAMPLE_CHECK_FAILS,
    SAMPLE_CHECK_FAILS_ANY,
    SAMPLE_CHECK_LOADS,
    SAMPLE_CHECK_UNVERIFIED,
)
from dlprobe.torch_text import OUT_OF_DESCRIPTORS

SHARED_STATE_CAUSES = (
    "a file object, descriptor or connection opened in __init__, before the workers were forked, that every worker "
    "then reads through (they share its offset and its library's state); a library that is not safe across fork or "
    "across processes; or something the workers use up together: open files, readers, connections, memory or disk"
)
SHARED_STATE_FIX = (
    "Open files, databases and clients in each worker, not in __init__: lazily on first use in __getitem__ "
    "(`if self.h5 is None: self.h5 = h5py.File(self.path)`) or in worker_init_fn "
    "(torch.utils.data.get_worker_info().dataset); close what you open (a `with` block) so descriptors do not pile "
    "up, and compare the open-file limit (`ulimit -n`) with what the workers hold. Do not skip or drop this sample: "
    "it loads."
)


# The process ran out of descriptors (EMFILE: its own limit; ENFILE: the system's)
DESCRIPTORS_FIX = (
    "Close what __getitem__ opens (a `with` block, or np.load(path) rather than an open file kept in a list or a "
    "cache without a bound): each worker keeps every descriptor it never closes until it hits its open-file limit "
    "(`ulimit -n`). Do not skip or drop this sample: it loads."
)


def _causes(error_line: str) -> str:
    if OUT_OF_DESCRIPTORS.search(error_line):
        return (
            "the worker ran out of file descriptors (its open-file limit): files, sockets or pipes opened while "
            f"loading and never closed pile up in each worker until any load fails; or else {SHARED_STATE_CAUSES}"
        )
    return SHARED_STATE_CAUSES


def sample_check(run: RunData, loader_id: int, index: int, worker_id: Any = None) -> dict[str, Any] | None:
    """The training process's check of this index (the last one, if it was checked more than once), else its word
    that it checked none for this worker's error (thread workers, past the cap: no index, a reason)."""
    found = unindexed = None
    for ev in run.events:
        if ev.get("ev") != EV_SAMPLE_CHECK or ev.get("loader") != loader_id:
            continue
        if ev.get("index") == index:
            found = ev
        elif ev.get("index") is None and ev.get("worker_id") == worker_id:
            unindexed = ev
    return found or unindexed


def batch_check(run: RunData, loader_id: int, worker_id: Any) -> dict[str, Any] | None:
    """The comparison of the samples of the batch this worker's collate failed on (in_training/batch_compare.py)."""
    found = None
    for ev in run.events:
        if ev.get("ev") != EV_SAMPLE_CHECK or ev.get("loader") != loader_id or ev.get("worker_id") != worker_id:
            continue
        if ev.get("batch_indices") is not None:
            found = ev
    return found


def odd_samples(lo: LoaderRecord, evidence: Evidence, check: dict[str, Any], first_line: str) -> Finding:
    """bad-sample for a batch that did not collate: the samples whose structure is unlike the rest's, found by
    loading each of them again alone and comparing types, shapes and dtypes."""
    odd = check.get("odd") or []
    indices = check.get("batch_indices") or []
    common, count = check.get("common_signature"), check.get("common_count")
    worker_id = evidence.get("worker_id")
    named = indices_text([o["index"] for o in odd])
    first = odd[0] if odd else {"index": None, "signature": None}
    evidence.update({"index": first["index"], "odd_indices": [o["index"] for o in odd],
                     "odd_signature": first["signature"], "common_signature": common,
                     "isolation": check.get("isolation")})  # fmt: skip
    if check.get("undecided"):
        title = (
            f"Samples of two shapes in one batch: index {first['index']} is {first['signature']}, "
            f"{count} others are {common} (loader {lo.loader_id}, worker {worker_id})"
        )
        which = "As many samples have each structure, so which is wrong is not known: compare them."
    else:
        title = (
            f"Sample index {first['index']} does not collate with the rest of its batch: {first['signature']} where "
            f"the other {count} are {common} (loader {lo.loader_id}, worker {worker_id})"
        )
        others = f" (all {check.get('odd_count')}: {named})" if (check.get("odd_count") or 0) > 1 else ""
        which = f"{check.get('odd_count')} of the {check.get('compared')} samples differ{others}; the rest are alike."
    detail = (
        f"The collate function failed on the batch {indices_text(indices)} with '{first_line}', which names no "
        f"sample. dlprobe loaded each sample of that batch again, one by one (in a process forked from the training "
        f"process{_isolation_text(check)}), and compared their types, shapes and dtypes: {which} Each of them loads: "
        "the data is not unreadable, its shape is not the others'."
    )
    fix = (
        f"Look at sample {first['index']}: dataset[{first['index']}] is {first['signature']}. Convert every sample to "
        f"one shape in __getitem__ (for images, `.convert('RGB')` before the transform; pad or crop to one size), or "
        "pass a collate_fn that pads (torch.nn.utils.rnn.pad_sequence) or keeps them in a list."
    )
    return Finding("bad-sample", "error", title, detail, fix, evidence, lo.loader_id)


def alike_text(check: dict[str, Any] | None) -> str:
    """For a collate error whose batch's samples all have one structure: not a shape or type mismatch."""
    if not check or check.get("outcome") != SAMPLE_CHECK_ALIKE:
        return ""
    return (
        f" Loaded again one by one, the batch's {check.get('compared')} samples all have the same structure "
        f"({check.get('common_signature')}): it is not one sample of another shape or type."
    )


def failed_indices(run: RunData, lo: LoaderRecord, exc_type: str, index: int) -> list[int]:
    """Every index this loader's workers failed on with this exception in the run (checks of errors that reached
    the loop, and the first failed fetch each worker's slot kept), this one first."""
    seen = [index]
    for ev in run.events:
        if ev.get("ev") == EV_SAMPLE_CHECK and ev.get("loader") == lo.loader_id and ev.get("exception") == exc_type:
            other = ev.get("index")
            if isinstance(other, int) and other not in seen:
                seen.append(other)
    for slot in run.inflight.values():
        failed = slot.get("failed") or {}
        other = failed.get("index")
        ours = slot.get("loader_id") == lo.loader_id and failed.get("kind") in ("map", "unbatched", "getitems")
        if ours and isinstance(other, int) and failed.get("phase") == "getitem" and other not in seen:
            seen.append(other)
    return seen


def dataset_length(run: RunData, lo: LoaderRecord, index: int) -> int | None:
    check = sample_check(run, lo.loader_id, index)
    length = check.get("length") if check else None
    if not isinstance(length, int):
        length = lo.dataset.get("len")
    return length if isinstance(length, int) and not isinstance(length, bool) else None


def stream_check(run: RunData, loader_id: int, worker_id: Any, position: Any) -> dict[str, Any] | None:
    """The replay of this worker's stream to this position (positions repeat across workers: the worker decides)."""
    found = None
    for ev in run.events:
        same_stream = ev.get("loader") == loader_id and ev.get("worker_id") == worker_id
        if ev.get("ev") == EV_SAMPLE_CHECK and same_stream and ev.get("index") in (position, None):
            found = ev
    return found


def replayed_text(evidence: Evidence, worker_id: Any, position: Any) -> str:
    """For a bad record of an IterableDataset: what the replay saw."""
    return (
        f" Replayed alone (worker {worker_id}'s own stream, with its worker info, seeds and worker_init_fn, in a "
        f"process forked from the training process with the workers quiet), the {position} records before it load "
        f"and the record at position {position} fails too ({evidence.get('error_alone')}): the record is at fault."
    )


def check_evidence(check: dict[str, Any] | None, indices: list[int]) -> Evidence:
    if check is None:
        return {"sample_alone": SAMPLE_CHECK_UNVERIFIED, "sample_check_reason": "no check was recorded",
                "failed_indices": indices}  # fmt: skip
    return {
        "sample_alone": check.get("outcome"),
        "sample_check_reason": check.get("reason"),
        "error_alone": check.get("error_alone"),
        "control_index": check.get("control_index") if check.get("outcome") != SAMPLE_CHECK_LOADS else None,
        "control_loads": check.get("control_loads"),
        "control_error": check.get("control_error"),
        "failed_indices": indices,
        "isolation": check.get("isolation"),
    }


def doubt_shared_handle(run: RunData, lo: LoaderRecord, evidence: Evidence, message: str) -> None:
    """A sample that failed alone does not blame the sample when its error comes of a handle the dataset held as the
    workers forked: the check's copy was forked from the training process, which holds that very handle, its offset
    and library state moved by the workers (a tar.gz archive's gzip stream: the copy fails at any member). Only the
    type of the error and where it was raised are read (an I/O error alone does not doubt a sample that fails)."""
    if evidence.get("sample_alone") != SAMPLE_CHECK_FAILS:
        return
    why = tied_error(message, str(evidence.get("exception") or ""), shared_handles(run, lo), io_errors=False)
    if why is None:
        return
    evidence["sample_alone"] = SAMPLE_CHECK_UNVERIFIED
    evidence["sample_check_reason"] = (
        f"it failed alone too ({evidence.get('error_alone')}), but {why}: the process that loaded it was forked "
        "from the training process, which holds the handle the workers shared, in the state they left it, so its "
        "failure there says nothing of the sample"
    )


def blames_the_sample(evidence: Evidence) -> bool:
    """A sample failed alone and a neighbour loaded: today's bad-sample stands."""
    return evidence.get("sample_alone") == SAMPLE_CHECK_FAILS


def verified_text(evidence: Evidence, index: int) -> str:
    """For a bad-sample: what the check saw."""
    control = evidence.get("control_index")
    after = (
        f"; index {control}, loaded just before it, loads"
        if control is not None and evidence.get("control_loads")
        else ""
    )
    return (
        f" Loaded again alone (in a process forked from the training process, with the workers quiet"
        f"{_isolation_text(evidence)}), "
        f"dataset[{index}] fails too ({evidence.get('error_alone')}){after}: the sample is at fault."
    )


def _isolation_text(evidence: Mapping[str, Any]) -> str:
    """How the copy that loaded it was kept from the training's world (in_training/sandbox.py)."""
    isolation = evidence.get("isolation")
    return "; " + "; ".join(str(x) for x in isolation) if isinstance(isolation, list) and isolation else ""


def not_the_sample(lo: LoaderRecord, evidence: Evidence, error_line: str, exc_type: str) -> Finding:
    """worker-error: the index loads alone, fails like every other, or could not be checked."""
    index, worker_id = evidence.get("index"), evidence.get("worker_id")
    outcome = evidence.get("sample_alone")
    indices = [i for i in evidence.get("failed_indices") or [] if i != index]
    many = (
        f" Errors of this kind hit {len(indices) + 1} different indices in this run "
        f"({indices_text([index, *indices])}): not one sample."
        if indices
        else ""
    )
    raised = f"Worker {worker_id} raised {exc_type} on index {index}" + (
        f" in {evidence['raised_in']}" if evidence.get("raised_in") else ""
    )
    error = cut_line(error_line)
    fix = SHARED_STATE_FIX
    if OUT_OF_DESCRIPTORS.search(error_line):  # EMFILE, ENFILE: the descriptors ran out, whatever opened them
        fix = DESCRIPTORS_FIX
    if outcome == SAMPLE_CHECK_LOADS:
        title = (
            f"{error} in worker {worker_id} on index {index}, which loads alone: not the sample (loader {lo.loader_id})"
        )
        detail = (
            f"{raised}. dlprobe loaded dataset[{index}] again alone, in a process forked from the training process "
            f"once the workers were quiet{_isolation_text(evidence)}, and it loaded.{many} So the error comes from "
            f"the workers loading together, not from the data: {_causes(error_line)}."
        )
    elif outcome == SAMPLE_CHECK_FAILS_ANY:
        control = evidence.get("control_index")
        title = (
            f"{error} in worker {worker_id} on index {index}, and on index {control} too: not the sample "
            f"(loader {lo.loader_id})"
        )
        detail = (
            f"{raised}. Loaded again alone in a process forked from the training process, dataset[{index}] fails, "
            f"and so does dataset[{control}], which the worker had loaded fine just before, with the same error "
            f"({evidence.get('control_error') or evidence.get('error_alone')}).{many} Every load fails in a forked "
            "process: the dataset holds state from before the fork that a forked process cannot use "
            f"({_causes(error_line)})."
        )
    else:
        reason = evidence.get("sample_check_reason") or "no reason recorded"
        title = f"{error} in worker {worker_id} on index {index} (loader {lo.loader_id}); the sample was not checked"
        detail = (
            f"{raised}. dlprobe could not load dataset[{index}] again alone ({reason}), so it does not know whether "
            f"the sample is at fault.{many} If it loads alone, the error comes from what the workers share or use up "
            f"together: {_causes(error_line)}."
        )
        fix = (
            f"Load dataset[{index}] alone (num_workers=0, or in a Python shell). If it fails, fix that sample or the "
            f"code that reads it; if it loads, do not skip it: {fix}"
        )
    return Finding("worker-error", "error", title, detail, fix, evidence, lo.loader_id)


def iterable_error(lo: LoaderRecord, evidence: Evidence, error_line: str, exc_type: str, position: Any) -> Finding:
    """worker-error for an IterableDataset: no index names the record, so none is loaded alone and none is blamed.
    What can be checked is the worker's own share of the stream, replayed alone up to the position it failed at."""
    worker_id = evidence.get("worker_id")
    n = lo.num_workers
    at = f" at position {position} of its stream" if isinstance(position, int) else ""
    evidence.setdefault("sample_alone", SAMPLE_CHECK_UNVERIFIED)
    evidence.setdefault("sample_check_reason", "no replay was recorded")
    evidence["stream_position"] = position
    evidence.pop("index", None)
    outcome = evidence.get("sample_alone")
    share = f"worker {worker_id} of {n}" if n else f"worker {worker_id}"
    raised = f"Worker {worker_id} raised {exc_type}{at}" + (
        f" in {evidence['raised_in']}" if evidence.get("raised_in") else ""
    )
    replayed = (
        f"dlprobe replayed {share}'s own stream alone (its worker info, seeds and worker_init_fn, in a process "
        "forked from the training process once the workers were quiet)"
    )
    own_fix = DESCRIPTORS_FIX if OUT_OF_DESCRIPTORS.search(error_line) else SHARED_STATE_FIX
    own_fix += " For an IterableDataset, open them in `__iter__`, so each worker has its own."
    if outcome == SAMPLE_CHECK_LOADS:
        title = (
            f"{cut_line(error_line)} in worker {worker_id}{at}, which loads when that stream is replayed alone: not "
            f"the record (loader {lo.loader_id})"
        )
        detail = (
            f"{raised}. {replayed}, and it ran past position {position}: the error comes from the workers loading "
            f"together, not from the data: {_causes(error_line)}."
        )
        return Finding("worker-error", "error", title, detail, own_fix, evidence, lo.loader_id)
    if outcome == SAMPLE_CHECK_FAILS_ANY:
        earlier = evidence.get("control_index")
        title = (
            f"{cut_line(error_line)} in worker {worker_id}{at}, and at position {earlier} too when that stream is "
            f"replayed alone: not one record (loader {lo.loader_id})"
        )
        detail = (
            f"{raised}. {replayed}, and it failed already at position {earlier}, a record the worker had loaded fine "
            f"({evidence.get('control_error') or evidence.get('error_alone')}): every record fails in a forked "
            f"process, so the dataset holds state from before the fork that a forked process cannot use "
            f"({_causes(error_line)})."
        )
        return Finding("worker-error", "error", title, detail, own_fix, evidence, lo.loader_id)
    reason = evidence.get("sample_check_reason") or "no reason recorded"
    title = (
        f"{cut_line(error_line)} in worker {worker_id}{at} (loader {lo.loader_id}, an IterableDataset: the record "
        "was not checked)"
    )
    detail = (
        f"{raised}. An IterableDataset yields records from its own iterator, so there is no index that names the "
        f"record, and the worker's stream could not be replayed alone ({reason}): dlprobe blames no record. What "
        f"can be checked is the worker's share: iterate the dataset as {share} (its shard) alone, without the other "
        "workers. If it fails at the same place, the record there is bad; if it runs past it, the error comes from "
        f"what the workers share or use up together: {_causes(error_line)}."
    )
    fix = (
        f"Replay {share}'s share alone (num_workers=0 with the same sharding, or a loop over `iter(dataset)` with "
        "`get_worker_info()` standing in for that worker) and see whether it fails at the same record. Open files, "
        "archives and connections in `__iter__`, not in `__init__`, so each worker has its own."
    )
    return Finding("worker-error", "error", title, detail, fix, evidence, lo.loader_id)


def sampler_out_of_range(lo: LoaderRecord, evidence: Evidence, error_line: str, exc_type: str, length: int) -> Finding:
    index, worker_id = evidence.get("index"), evidence.get("worker_id")
    custom_batches = bool(lo.config.get("custom_batch_sampler"))
    sampler = lo.config.get("batch_sampler" if custom_batches else "sampler")
    role = "batch sampler (batch_sampler=)" if custom_batches else "sampler"
    name = sampler.rsplit(".", 1)[-1] if isinstance(sampler, str) else None
    evidence.update({"sampler": sampler, "dataset_len": length})
    who = f"the {role} {name}" if name else f"the loader's {role}"
    title = (
        f"The {role.split(' (')[0]} {name or ''} yielded index {index}, outside the dataset's {length} samples "
        f"(loader {lo.loader_id})"
    ).replace("  ", " ")
    off_by_one = f" Index {index} is len(dataset) itself: an off-by-one." if index == length else ""
    torch_own = isinstance(sampler, str) and sampler.startswith("torch.")
    why = (
        " It is torch's own sampler, which draws from range(len(dataset)) as it was when the epoch began: the "
        "dataset's length changed while the epoch ran."
        if torch_own
        else ""
    )
    detail = (
        f"Worker {worker_id} raised {exc_type} ({cut_line(error_line)}) on index {index}, but len(dataset) is "
        f"{length}: "
        f"valid indices are 0 to {length - 1}.{off_by_one} The indices come from {who}, so it is at fault, not the "
        f"dataset.{why}"
    )
    fix = (
        f"Make {name or 'the sampler'} yield indices in range(len(dataset)) (0 to {length - 1})"
        + ("; build the sampler and the DataLoader again after the dataset changes" if torch_own else "")
        + ". Do not catch the error in __getitem__: that would hide the sampler's bug and drop samples silently."
    )
    return Finding("sampler-out-of-range", "error", title, detail, fix, evidence, lo.loader_id)
