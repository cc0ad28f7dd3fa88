"""Dead-worker findings: `worker-killed` (with the cause: oom, bus, segfault, abort, exit, unknown, ...),
`bad-sample` (a Python exception in a worker), `too-few-shards` and `shm-exhausted`, from PyTorch's messages, the
workers' in-flight slots and fatal-signal records, the memory samples, the cgroup's OOM counter and the kernel log."""

from __future__ import annotations

import re
from typing import Any, Literal, cast

from dlprobe.analysis.evidence.finding import Finding
from dlprobe.analysis.evidence.schema import Evidence, as_evidence
from dlprobe.analysis.findings.common import SHM_SPACE_FIX
from dlprobe.analysis.findings.deaths import sample_checks
from dlprobe.analysis.measures.batch_sent import in_flight_bytes
from dlprobe.analysis.measures.stack_causes import indices_text
from dlprobe.analysis.measures.stats import metric_summary
from dlprobe.analysis.measures.tracebacks import (
    collate_entry,
    exception_text,
    signal_cause,
    signal_name,
    user_frame_from_traceback,
)
from dlprobe.analysis.run.model import LoaderRecord, RunData
from dlprobe.frames import is_user_file
from dlprobe.rundir.schema import EV_EPOCH, SAMPLE_CHECK_ODD
from dlprobe.torch_text import (
    SHM_FULL,
    WORKER_EXIT_CODE,
    WORKER_KILLED,
    WORKERS_EXITED,
    caught_in_worker_process,
)
from dlprobe.units import format_bytes

# webdataset's check that a worker got at least one shard: a loader setting, not a bad sample.
_NO_SHARDS = re.compile(r"No samples found in dataset; perhaps you have fewer shards than workers")

# `worker-killed` speaks one vocabulary in `dlprobe run` (here) and `dlprobe triage` (triage/deaths.py):
#
# | evidence | value                                                                                          |
# | -------- | ---------------------------------------------------------------------------------------------- |
# | pids     | the dead workers' pids, a list (a run names one worker per finding: a list of one)             |
# | signal   | the signal's name (SIGKILL, SIGBUS, ...); None when the worker exited with a code              |
# | cause    | oom: SIGKILL from the kernel's OOM killer (run: confirmed by kernel log, cgroup count or the    |
# |          |   memory at a limit; triage: with a confidence)                                                |
# |          | external-kill: SIGKILL from something else (a scheduler, a watchdog, kill -9)                  |
# |          | bus: SIGBUS, a write to /dev/shm that could not be backed (an shm-exhausted finding names that) |
# |          |   or a memory-mapped file cut short                                                            |
# |          | segfault, abort, fpe, sigill: native code crashed (SIGSEGV, SIGABRT, SIGFPE, SIGILL)           |
# |          | signal: another signal sent from outside (SIGTERM, ...)                                        |
# |          | exit: the worker ended itself with an exit code                                                |
# |          | unknown: the worker died and nothing says how                                                  |
# | seen_by  | run only: where the death is known from, "torch" (its error named the worker), "fault-record"  |
# |          |   (the worker's own faulthandler record), "kernel-log" (an OOM kill); a death torch's error did |
# |          |   not name is still reported from the other two                                                |
# | crash_frame | run only: the user's innermost frame in the worker's fatal-signal record, or None           |
WORKER_KILLED_CAUSES = (
    "oom", "external-kill", "bus", "segfault", "abort", "fpe", "sigill", "signal", "exit", "unknown",
)  # fmt: skip


NATIVE_CRASH_FIX = (
    "Native code crashed on this sample. Re-run it alone with num_workers=0 (dataset[{index}]) under "
    "`python -X faulthandler` to see the crashing frame; PYTHONFAULTHANDLER=1 makes workers print theirs to stderr. "
    "Usual culprits: a C decoder fed a corrupt file, fork-unsafe native state created before the workers were "
    "forked (OpenCV, h5py/lmdb handles opened in __init__), mismatched library builds."
)


def _error_text(error: dict[str, Any]) -> str:
    return f"{error.get('message') or ''}\n{error.get('cause') or ''}"


def _last_line(message: str) -> str:
    lines = [line.strip() for line in message.strip().splitlines() if line.strip()]
    return lines[-1] if lines else ""


def _worker_pids(run: RunData, loader_id: int) -> dict[int, dict[int, int]]:
    """epoch -> {worker_id: pid}; a later epoch of persistent workers keeps the last known pids."""
    out: dict[int, dict[int, int]] = {}
    last: dict[int, int] = {}
    for ev in run.events:
        if ev.get("ev") == EV_EPOCH and ev.get("loader") == loader_id:
            if ev.get("workers"):
                last = {int(w["worker_id"]): int(w["pid"]) for w in ev["workers"]}
            out[int(ev.get("epoch", 0))] = dict(last)
    return out


def _slot_for(
    run: RunData, loader_id: int, epoch: int | None, worker_id: int | None, pid: int | None
) -> dict[str, Any]:
    if pid is None and worker_id is not None:
        by_epoch = _worker_pids(run, loader_id)
        pid = (by_epoch.get(epoch if epoch is not None else -1) or {}).get(worker_id)
        if pid is None:
            candidates = [
                s for s in run.inflight.values() if s.get("loader_id") == loader_id and s.get("worker_id") == worker_id
            ]
            if candidates:
                return max(candidates, key=lambda s: s.get("t_fetch") or 0)
    return run.inflight.get(pid, {}) if pid is not None else {}


def _held(slot: dict[str, Any], prefer_failed: bool) -> dict[str, Any]:
    """The batch a worker was on when it failed: its first failed fetch, else the fetch in progress."""
    failed = slot.get("failed")
    if prefer_failed and failed:
        return cast(dict[str, Any], failed)
    if slot.get("phase") in ("getitem", "collate", "worker_init_fn"):
        return slot
    return failed or {}


def _memory(run: RunData, pid: int) -> Evidence:
    proc = next((p for p in run.processes if p.pid == pid), None)
    if proc is None:
        return {}
    out: dict[str, Any] = {}  # last_/peak_ rss, uss, pss: WorkerKilledEvidence's
    for metric in ("rss", "uss", "pss"):
        summary = metric_summary(proc.series, metric)
        out[f"last_{metric}_bytes"] = summary["end"]
        out[f"peak_{metric}_bytes"] = summary["peak"]
    return as_evidence(out)


def _oom_evidence(run: RunData, pid: int) -> Evidence:
    evidence: Evidence = {}
    kills = [k for k in (run.kernel.get("kills") or []) if k.get("pid") == pid]
    if kills:
        evidence["kernel_log"] = kills[0].get("line")
    counts = [c for c in run.system.cgroup_oom_kills if c is not None]
    if counts and max(counts) > counts[0]:
        evidence["cgroup_oom_kills"] = max(counts) - counts[0]
    usage = [u for u in run.system.cgroup_usage if u is not None]
    limit = run.system.cgroup_limit
    if limit and usage and max(usage) >= 0.95 * limit:
        evidence["cgroup_peak_bytes"] = max(usage)
        evidence["cgroup_limit_bytes"] = limit
    available = [a for a in run.system.available if a is not None]
    total = (run.meta.get("machine") or {}).get("mem_total")
    if total and available and min(available) <= 0.03 * total:
        evidence["available_min_bytes"] = min(available)
    return evidence


def _shm_numbers(run: RunData, lo: LoaderRecord | None) -> Evidence:
    used = [u for u in run.system.shm_used if u is not None]
    numbers: Evidence = {"shm_total_bytes": run.system.shm_total, "shm_peak_bytes": max(used) if used else None}
    if lo is not None:
        batch_bytes = (lo.batch_info or {}).get("bytes")
        numbers["batch_bytes"] = batch_bytes
        numbers["num_workers"] = lo.num_workers
        numbers["prefetch_factor"] = lo.config.get("prefetch_factor")
        numbers["in_flight_estimate_bytes"] = (
            in_flight_bytes(lo.num_workers, lo.config.get("prefetch_factor"), batch_bytes) or None
        )
    return numbers


def _batch_evidence(held: dict[str, Any]) -> Evidence:
    return {
        # in collate the whole batch is at fault, not the last sample fetched
        "index": held.get("index") if held.get("phase") != "collate" else None,
        "batch_indices": held.get("indices"),
        "position_in_batch": held.get("pos") if held.get("phase") != "collate" else None,
        "phase": held.get("phase"),
        "index_kind": held.get("kind"),
    }


def _kernel_kill(run: RunData, pid: int) -> dict[str, Any] | None:
    return next((k for k in (run.kernel.get("kills") or []) if k.get("pid") == pid), None)


def _seen_by(run: RunData, pid: int, torch_named: bool) -> list[str]:
    """Where this death is known from: torch's error, the worker's own fatal-signal record, the kernel's OOM log."""
    return (
        (["torch"] if torch_named else [])
        + (["fault-record"] if pid in run.faults else [])
        + (["kernel-log"] if _kernel_kill(run, pid) else [])
    )


def _own_how(run: RunData, pid: int) -> str | None:
    """The signal a worker died of by the probe's own evidence, in torch's words: its fatal-signal record, else the
    kernel's OOM kill (SIGKILL); None when neither has it."""
    fault = run.faults.get(pid)
    if fault is not None:
        return fault.signal
    return "Killed" if _kernel_kill(run, pid) else None


def _crash_frame(run: RunData, pid: int) -> str | None:
    """The innermost frame of the user's code in the worker's fatal-signal record."""
    fault = run.faults.get(pid)
    for frame in fault.frames if fault else []:
        func, _, where = frame.partition(" (")
        path, _, line = where.rstrip(")").rpartition(":")
        if is_user_file(path):
            return f"{func} ({path.rsplit('/', 1)[-1]}:{line})"
    return None


def _killed(run: RunData, lo: LoaderRecord, error: dict[str, Any], pid: int, how: str, code: int | None) -> Finding:
    torch_named = how != ""  # "": no error of torch's names this worker; "unknown": one did, but not how it died
    torch_said_how = code is not None or how not in ("unknown", "")
    if not torch_said_how:
        # torch saw only that the worker was gone ("exited unexpectedly": always under forkserver, whose workers
        # are not the training process's children) or raised something else first: the worker's own record or the
        # kernel's says how it died.
        how = _own_how(run, pid) or "unknown"
    slot = _slot_for(run, lo.loader_id, error.get("epoch"), None, pid)
    held = _held(slot, prefer_failed=False)
    worker_id = slot.get("worker_id")
    if worker_id is None:
        proc = next((p for p in run.processes if p.pid == pid), None)
        worker_id = proc.worker_id if proc else None
    oom = _oom_evidence(run, pid)
    if code is not None:
        cause, status = "exit", f"exit code {code}"
    elif how == "unknown":
        cause, status = "unknown", "exited unexpectedly"
    else:
        cause, status = signal_cause(how), f"signal {how}"
        if cause == "oom" and not oom:
            cause = "unknown"
    index = held.get("index")
    on = f" while on index {index}" if index is not None else ""
    title = f"Loader {lo.loader_id} worker {worker_id} (pid {pid}) was killed ({status}): {cause}{on}"
    detail, fix = _killed_text(cause, how, code, oom, held)
    evidence: Evidence = {
        "pids": [pid],
        "worker_id": worker_id,
        "cause": cause,
        "signal": signal_name(how) if code is None and how != "unknown" else None,
        "exit_code": code,
        **_batch_evidence(held),
        **_memory(run, pid),
        **oom,
        "message": _last_line(error.get("cause") or error.get("message") or ""),
        "seen_by": _seen_by(run, pid, torch_named),
        "crash_frame": _crash_frame(run, pid),
    }
    if not torch_said_how and how != "unknown":
        detail += (
            " The error the script saw did not say how the worker died"
            + (f" ({evidence['message']})" if evidence["message"] else "")
            + "; "
            + ("its own fatal-signal record did." if pid in run.faults else "the kernel's log did.")
        )
    if evidence["crash_frame"]:
        detail += f" It crashed in {evidence['crash_frame']}."
    if cause == "bus":
        evidence.update(_shm_numbers(run, lo))
    return Finding("worker-killed", "error", title, detail, fix, evidence, lo.loader_id)


def _killed_text(cause: str, how: str, code: int | None, oom: Evidence, held: dict[str, Any]) -> tuple[str, str]:
    index = held.get("index")
    if cause == "oom":
        seen = ", ".join(sorted(oom))
        return (
            f"The kernel's OOM killer ended the worker (SIGKILL) when memory ran out (seen: {seen}).",
            "Lower what each worker holds: fix any cow-growth finding, lower num_workers, prefetch_factor or the "
            "batch size, bound caches in the dataset, or raise the memory limit (docker --memory, Kubernetes "
            "limits, SLURM --mem).",
        )
    if cause == "bus":
        return (
            "A bus error in a worker means a write to a shared-memory page of /dev/shm that could not be backed: "
            "/dev/shm is full.",
            SHM_SPACE_FIX,
        )
    if cause in ("segfault", "abort", "fpe", "sigill"):
        return (f"The worker died from {how}: a crash in native code.", NATIVE_CRASH_FIX.format(index=index))
    if cause == "exit":
        return (
            f"The worker ended itself with exit code {code} (os._exit or a C library's exit), so no Python "
            "traceback was sent.",
            f"Find what calls exit on this sample: run dataset[{index}] with num_workers=0, or "
            "strace -f -e trace=exit_group.",
        )
    if cause == "signal":
        return (
            f"Something sent the worker {signal_name(how)}.",
            "Look for a job scheduler or watchdog that ends processes.",
        )
    return (
        f"The worker died ({how if code is None else f'exit code {code}'}) and no OOM-kill was seen (no cgroup "
        "OOM count, no kernel log line, memory not at a limit): something outside sent the signal.",
        "Check the job scheduler's logs (memory enforcement outside this cgroup, preemption) and `dmesg` on the host.",
    )


def _exception(run: RunData, lo: LoaderRecord, error: dict[str, Any], exc_type: str, worker_id: int) -> Finding:
    slot = _slot_for(run, lo.loader_id, error.get("epoch"), worker_id, None)
    held = _held(slot, prefer_failed=True)
    message = error.get("message") or ""
    text = exception_text(message)
    first_line = text.splitlines()[0] if text else exc_type
    where = user_frame_from_traceback(message)
    evidence: Evidence = {
        "pid": slot.get("pid"),
        "worker_id": worker_id,
        "cause": "exception",
        "exception": exc_type,
        "error": text,
        "raised_in": where,
        **_batch_evidence(held),
    }
    if SHM_FULL.search(message):
        evidence["cause"] = "shm"
        evidence.update(_shm_numbers(run, lo))
        return _shm_exhausted(run, lo, evidence, first_line)
    if _NO_SHARDS.search(message):
        return _no_shards(lo, evidence, text)
    entry = collate_entry(message) if held.get("phase") == "collate" else None
    indices = held.get("indices") or []
    if entry is not None and entry["entry"] < len(indices) and indices[entry["entry"]] is not None:
        return _collate_mismatch(lo, evidence, held, entry, first_line)
    verified = ""
    if held.get("phase") == "collate":  # no entry named: the batch's samples, loaded again and compared
        compared = sample_checks.batch_check(run, lo.loader_id, worker_id)
        if compared is not None and compared.get("outcome") == SAMPLE_CHECK_ODD and compared.get("odd"):
            return sample_checks.odd_samples(lo, evidence, compared, first_line)
        verified = sample_checks.alike_text(compared)
    # in collate the whole batch is at fault, not the last index fetched
    index = held.get("index") if held.get("phase") != "collate" else None
    if isinstance(index, int) and held.get("kind") != "iterable" and held.get("phase") != "collate":
        # Blame the sample only once it failed alone; an index outside the dataset is the sampler's.
        length = sample_checks.dataset_length(run, lo, index)
        if length is not None and not 0 <= index < length:
            return sample_checks.sampler_out_of_range(lo, evidence, first_line, exc_type, length)
        indices_failed = sample_checks.failed_indices(run, lo, exc_type, index)
        check = sample_checks.sample_check(run, lo.loader_id, index, worker_id)
        evidence.update(sample_checks.check_evidence(check, indices_failed))
        sample_checks.doubt_shared_handle(run, lo, evidence, message)
        if not sample_checks.blames_the_sample(evidence):
            return sample_checks.not_the_sample(lo, evidence, first_line, exc_type)
        verified = sample_checks.verified_text(evidence, index)
        others = [i for i in indices_failed if i != index]
        if others:
            verified += f" Other indices failed with {exc_type} too: {indices_text(others)}."
    if held.get("kind") == "iterable" and held.get("phase") != "collate":
        # No index to load alone: the worker's own stream was replayed alone to the position; only a record that
        # fails again there, after the ones before it loaded, is blamed.
        check = sample_checks.stream_check(run, lo.loader_id, worker_id, index)
        evidence.update(sample_checks.check_evidence(check, []))
        evidence.pop("failed_indices", None)
        sample_checks.doubt_shared_handle(run, lo, evidence, message)
        if not sample_checks.blames_the_sample(evidence):
            return sample_checks.iterable_error(lo, evidence, first_line, exc_type, index)
        evidence["stream_position"] = index
        verified = sample_checks.replayed_text(evidence, worker_id, index)
    what = "stream position" if held.get("kind") == "iterable" else "index"
    title = f"Sample {what} {index} raises {first_line} (loader {lo.loader_id}, worker {worker_id})"
    if index is None and indices:
        # A batched fetch (__getitems__) where no index raised on its own, or a collate error that names no
        # entry: name the batch, not a guess.
        many = "stream positions" if held.get("kind") == "iterable" else "indices"
        during = "batched fetch" if held.get("kind") == "getitems" else held.get("phase")
        title = (
            f"One of the {len(indices)} {many} {indices_text(indices)} raises {first_line} "
            f"(loader {lo.loader_id}, worker {worker_id}, {during})"
        )
    on = f"{what} {index} (position {held.get('pos')} of the batch " if index is not None else "the batch ("
    detail = (
        f"Worker {worker_id} raised {exc_type} on {on}{indices_text(indices)}, during {held.get('phase')})"
        + (f" in {where}" if where else "")
        + f"; PyTorch re-raised it in the training loop as 'Caught {exc_type} in DataLoader worker process "
        f"{worker_id}.', which does not say which sample it was." + verified
    )
    look = (
        f"Look at sample {index}: reproduce with dataset[{index}]"
        if index is not None
        else f"Fetch the batch's samples one at a time (dataset[i] for i in {indices_text(indices)})"
    )
    fix = (
        f"{look} in a plain Python shell and fix the data or the code; if bad samples are expected, catch the "
        "error in __getitem__, return None, and drop Nones in a collate_fn."
    )
    if held.get("kind") == "iterable" and index is not None:
        fix = (
            f"Look at the record worker {worker_id} reads at position {index} of its stream: reproduce with "
            f"`itertools.islice(iter(dataset), {index}, {index + 1})` under that worker's `get_worker_info()` (or "
            "num_workers=0 with the same sharding) and fix the data or the code; if bad records are expected, catch "
            "the error in `__iter__` and skip the record there."
        )
    return Finding("bad-sample", "error", title, detail, fix, evidence, lo.loader_id)


def _collate_mismatch(
    lo: LoaderRecord, evidence: Evidence, held: dict[str, Any], entry: dict[str, Any], first_line: str
) -> Finding:
    """A collate error naming entry K of the batch, the first unlike entry 0: the sample there is the odd one
    (entries 1..K-1 are like entry 0); for K = 1 the message cannot tell which of the two is, so both are named."""
    k = entry["entry"]
    indices = held.get("indices") or []
    index, first = indices[k], indices[0]
    what = "stream position" if held.get("kind") == "iterable" else "index"
    worker_id = evidence["worker_id"]
    evidence.update({"index": index, "position_in_batch": k, "collate_entry": k,
                     "entry_0_index": first, "entry_0": entry.get("first"), "entry_k": entry.get("other")})  # fmt: skip
    shape = "size" if entry.get("first") else "type"
    theirs = entry.get("other")
    mine = f" where entry 0 ({what} {first}) has {entry['first']}" if entry.get("first") else ""
    title = (
        f"Sample {what} {index} does not collate with the rest of its batch: {shape} {theirs}{mine} "
        f"(loader {lo.loader_id}, worker {worker_id})"
    )
    which = (
        f" Entries 1 to {k - 1} are like entry 0, so {what} {index} is the odd one."
        if k > 1
        else " The first entry unlike entry 0 is entry 1, so either of the two may be the odd one: compare them."
    )
    detail = (
        f"The collate function failed on the batch {indices_text(indices)} with '{first_line}': entry {k} of the "
        f"batch is {what} {index}.{which} PyTorch's message names entries, not samples."
    )
    if held.get("kind") == "iterable":
        look = f"Look at the sample worker {worker_id}'s stream yields at position {index} (counting from 0)"
    else:
        look = f"Look at sample {index}: reproduce with dataset[{index}]" + (
            f" and compare it with dataset[{first}]" if k == 1 else ""
        )
    fix = (
        f"{look}. If samples of different {shape}s are expected, pad or crop them to one {shape} in the dataset, "
        "or pass a collate_fn that pads (torch.nn.utils.rnn.pad_sequence) or keeps them in a list."
    )
    return Finding("bad-sample", "error", title, detail, fix, evidence, lo.loader_id)


def _no_shards(lo: LoaderRecord, evidence: Evidence, text: str) -> Finding:
    workers = lo.num_workers
    no_sample: tuple[Literal["index", "batch_indices", "position_in_batch"], ...] = ("index", "batch_indices",
                                                                                  "position_in_batch")  # fmt: skip
    for key in no_sample:  # no sample is at fault: name none
        evidence.pop(key, None)
    evidence.update({"cause": "no-shards", "num_workers": workers})
    title = f"A worker of loader {lo.loader_id} got no shards: the WebDataset has fewer shards than " + (
        f"the {workers} workers" if workers else "workers"
    )
    detail = (
        "webdataset splits the shards between the DataLoader's workers; a worker left without one yields no "
        f"sample and webdataset raises instead of ending its epoch empty:\n{text}\nNo sample is at fault."
    )
    fix = (
        "Use no more workers than shards (DataLoader(..., num_workers=<number of shards>)), split the data "
        "into more shards, or let workers without a shard end empty with WebDataset(..., empty_check=False)."
    )
    return Finding("too-few-shards", "error", title, detail, fix, evidence, lo.loader_id)


def _shm_exhausted(run: RunData, lo: LoaderRecord, evidence: Evidence, message: str) -> Finding:
    total = evidence.get("shm_total_bytes")
    batch = evidence.get("batch_bytes")
    title = (
        f"Out of shared memory: /dev/shm ({format_bytes(total)}) could not hold the batches of loader {lo.loader_id}"
        if total
        else f"Out of shared memory in loader {lo.loader_id}"
    )
    detail = (
        "Workers hand each batch to the training process through a file in /dev/shm; "
        f"worker {evidence.get('worker_id')} could not allocate one for the batch "
        f"{indices_text(evidence.get('batch_indices'))} "
        f"({message or evidence.get('signal')})."
    )
    if batch:
        estimate = evidence.get("in_flight_estimate_bytes")
        waiting = f", ~{format_bytes(estimate)}." if estimate is not None else "."
        detail += f" A batch is {format_bytes(batch)}; up to num_workers x prefetch_factor of them wait in /dev/shm"
        detail += waiting
    return Finding("shm-exhausted", "error", title, detail, SHM_SPACE_FIX, evidence, lo.loader_id)


def _findings_for_error(run: RunData, lo: LoaderRecord, error: dict[str, Any]) -> list[Finding]:
    text = _error_text(error)
    caught = caught_in_worker_process(text)
    if caught:
        return [_exception(run, lo, error, *caught)]
    found: list[Finding] = []
    for match in WORKER_KILLED.finditer(text):
        finding = _killed(run, lo, error, int(match["pid"]), match["signal"].strip(), None)
        found.append(finding)
        if finding.evidence["cause"] == "bus":
            found.append(_shm_exhausted(run, lo, {**finding.evidence, "cause": "shm"}, f"signal {match['signal']}"))
    for match in WORKER_EXIT_CODE.finditer(text):
        found.append(_killed(run, lo, error, int(match["pid"]), "exit", int(match["exit_code"])))
    if not found:
        exited = WORKERS_EXITED.search(text)
        for pid_text in exited["pids"].split(",") if exited else []:
            found.append(_killed(run, lo, error, int(pid_text), "unknown", None))
    return found


def _loader_of_pids(run: RunData, text: str) -> LoaderRecord | None:
    """The loader a worker pid named in an error belonged to."""
    for match in re.finditer(r"pid(?:\(s\))? ([\d, ]+)\)", text):
        for pid_text in match.group(1).split(","):
            pid = int(pid_text)
            slot = run.inflight.get(pid) or {}
            proc = next((p for p in run.processes if p.pid == pid), None)
            loader_id = slot.get("loader_id") if slot else (proc.loader_id if proc else None)
            if loader_id is not None:
                return run.loader(loader_id)
    return None


def _errors(run: RunData) -> list[tuple[LoaderRecord, dict[str, Any]]]:
    """Loader errors, plus the script's own error when PyTorch raised it outside next() (its SIGCHLD handler
    can fire anywhere in the training loop)."""
    errors = [(lo, error) for lo in run.loaders for error in lo.errors]
    if run.script_error is not None:
        script_error: dict[str, Any] = dict(run.script_error)  # folded in with the loaders' own error records
        text = _error_text(script_error)
        lo = _loader_of_pids(run, text) or (run.loaders[0] if len(run.loaders) == 1 else None)
        if lo is not None and (
            WORKER_KILLED.search(text) or WORKER_EXIT_CODE.search(text) or WORKERS_EXITED.search(text)
        ):
            errors.append((lo, script_error))
    return errors


def _loader_of_pid(run: RunData, pid: int) -> LoaderRecord | None:
    slot = run.inflight.get(pid) or {}
    proc = next((p for p in run.processes if p.pid == pid), None)
    loader_id = slot.get("loader_id") if slot.get("loader_id") is not None else (proc.loader_id if proc else None)
    return run.loader(loader_id) if loader_id is not None else None


def _deaths_torch_did_not_name(run: RunData, named: set[int]) -> list[Finding]:
    """Workers that died of a signal by the probe's own evidence (their fatal-signal record, the kernel's OOM kill)
    that no error of torch's named: torch raised something else first (torch 2.15's ConnectionResetError, a
    wrapper's own error), or nothing reached the script at all."""
    kills = {k.get("pid") for k in (run.kernel.get("kills") or [])}
    found = []
    for pid in sorted(set(run.faults) | {p for p in kills if isinstance(p, int)}):
        lo = None if pid in named else _loader_of_pid(run, pid)
        if lo is not None:
            found.append(_killed(run, lo, dict(run.script_error or {}), pid, "", None))
    return found


def find_worker_deaths(run: RunData) -> list[Finding]:
    findings: list[Finding] = []
    seen: set[tuple[str, Any, Any]] = set()
    for lo, error in _errors(run):
        for finding in _findings_for_error(run, lo, error):
            pid = finding.evidence.get("pid") or tuple(finding.evidence.get("pids") or ())
            key = (finding.code, pid, finding.evidence.get("index"))
            if key not in seen:  # the same death can be re-raised by later next() calls
                seen.add(key)
                findings.append(finding)
    named = {pid for f in findings if f.code == "worker-killed" for pid in f.evidence.get("pids") or ()}
    return findings + _deaths_torch_did_not_name(run, named)
