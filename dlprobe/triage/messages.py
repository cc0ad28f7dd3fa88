"""Causes that the log's messages name: errors raised in a worker, collate errors, known library failures,
timeouts and torch's warnings."""

from __future__ import annotations

import re
from typing import cast

from dlprobe.analysis.evidence.finding import Finding
from dlprobe.analysis.evidence.schema import Evidence
from dlprobe.torch_text import KEPT_BATCHES_CAUSE, KEPT_BATCHES_FIX
from dlprobe.triage import scores as S
from dlprobe.triage.candidate import CONFIRMED, FIX_HANG, FIX_SHM, LIKELY, Candidate, first, make_finding
from dlprobe.triage.facts import shm_facts, shm_here
from dlprobe.triage.logscan import LogScan
from dlprobe.triage.machine import MachineFacts
from dlprobe.triage.patterns import Match, match_line
from dlprobe.triage.shared_state import alike_key, shared_state_candidate

INDEX_IN_MESSAGE = re.compile(r"\b(?:index|idx|sample)\b\D{0,3}?(\d+)", re.IGNORECASE)


def _wrappers_for(scan: LogScan, ids: tuple[str, ...]) -> list[Match]:
    """The `Caught X in DataLoader worker` messages whose original error is one of these patterns."""
    out = []
    for m in scan.of("S9", "S10"):
        original = m.fields.get("original_message")
        if original and any(o.id in ids for o in match_line(original)):
            out.append(m)
    return out


def _worker_ids(wrappers: list[Match]) -> list[int]:
    return sorted({int(w.fields["worker_id"]) for w in wrappers if "worker_id" in w.fields})


def shm_alloc_candidates(scan: LogScan, machine: MachineFacts) -> list[Candidate]:
    matches = scan.of("S19", "S20")
    if not matches:
        return []
    m = first(matches)
    wrappers = _wrappers_for(scan, ("S19", "S20"))
    detail = ("A worker could not create the shared-memory file for a batch (torch allocates every batch a worker "
              f"returns in /dev/shm): {m.fields.get('error') or m.text}." + shm_here(machine))  # fmt: skip
    finding = make_finding("shm-exhausted", "/dev/shm ran out of space for the workers' batches", detail, FIX_SHM,
                       CONFIRMED, cause="shm", worker_ids=_worker_ids(wrappers), file=m.fields.get("file"),
                       error=m.fields.get("error"), line=m.line, messages=[m.text], **shm_facts(machine))  # fmt: skip
    return [Candidate(S.SHM_ALLOCATION_FAILED, m.line, finding)]


COLLATE = {
    "S14": ("unsupported-type", "default_collate got a sample element it cannot batch ({found})",
            "return tensors, numpy arrays, numbers, dicts or lists from `__getitem__`: convert strings/objects, "
            "and never return None (or use a `collate_fn` that drops None samples)."),
    "none-sample": ("none-sample", "A sample was None when the batch was collated",
                    "`__getitem__` returned None (often a `try/except: return None` skip): fix or skip the sample, "
                    "or use a `collate_fn` that filters out None and accepts smaller batches."),
    "S15": ("ragged-list", "List samples of different lengths in one batch",
            "make every sample's lists the same length, or pad/keep them ragged in a custom `collate_fn`."),
    "S16": ("shape-mismatch", "Samples of different shapes in one batch ({first} vs {other} at entry {entry})",
            "resize/crop or pad in the transform (e.g. `.convert('RGB')` for grayscale images) or pad in a custom "
            "`collate_fn`; bucket sequences by length."),
    "S17": ("shape-mismatch", "Samples of different shapes in one batch (\"Trying to resize storage that is not "
            "resizable\" is how a shape mismatch reads inside a worker)",
            "resize/crop or pad in the transform (e.g. `.convert('RGB')` for grayscale images) or pad in a custom "
            "`collate_fn`; rerun with `num_workers=0` to see the two shapes."),
}  # fmt: skip


def collate_candidates(scan: LogScan) -> list[Candidate]:
    out = []
    for pid, (cause, title, fix) in COLLATE.items():
        matches = scan.of(pid)
        if not matches:
            continue
        m = first(matches)
        wrappers = _wrappers_for(scan, (pid,))
        frame = next((w.fields["frame"] for w in wrappers if "frame" in w.fields), None)
        finding = make_finding(
            "collate-error", title.format(**{k: m.fields.get(k, "?") for k in ("found", "first", "other", "entry")}),
            "Batching failed in `collate_fn`: the samples of one batch do not fit together. PyTorch does not say "
            "which sample; " + ("the log points at " + frame if frame else "a wrapper around the dataset can tell."),
            fix, CONFIRMED, cause=cause, worker_ids=_worker_ids(wrappers), message=m.text, line=m.line,
            occurrences=scan.counts.get(pid))  # fmt: skip
        out.append(Candidate(S.COLLATE_ERROR, m.line, finding))
    return out


def special_candidates(scan: LogScan, machine: MachineFacts) -> list[Candidate]:
    out: list[Candidate] = []
    cuda = scan.of("S18")
    if cuda:
        m = first(cuda)
        wrappers = _wrappers_for(scan, ("S18",))
        out.append(Candidate(S.CUDA_IN_FORKED_WORKER, m.line, make_finding(
            "cuda-fork", "CUDA used in a forked DataLoader worker after the parent initialised it",
            "The main process initialised CUDA before the workers were forked, and a worker touched CUDA (a `.cuda()`/"
            "`.to('cuda')` in `__getitem__`, or a CUDA tensor in the dataset). CUDA cannot be re-initialised in a "
            "forked child.",
            "keep `__getitem__` on the CPU and move batches to the GPU in the training loop (`pin_memory=True`, "
            "`non_blocking=True`); load data tensors with `map_location='cpu'`; only if GPU work in workers is "
            "unavoidable use `multiprocessing_context='spawn'`.",
            CONFIRMED, worker_ids=_worker_ids(wrappers), message=m.text, line=m.line)))  # fmt: skip
    files = scan.of("S6", "S7", "errno24")
    if files:
        out.append(_open_files_candidate(scan, machine, files))
    pickles = scan.of("pickle")
    if pickles:
        m = first(pickles)
        out.append(Candidate(S.PICKLE_ERROR, m.line, make_finding(
            "pickle-error", "The dataset could not be sent to spawn/forkserver workers (pickling failed)",
            "With `spawn` or `forkserver` (the default on Python 3.14+ outside macOS, and on Windows/macOS) the "
            "dataset, `collate_fn` and `worker_init_fn` are pickled into every worker.",
            "use module-level classes and functions (no lambdas or local classes), keep open handles (files, h5py, "
            "lmdb, locks) out of `__init__` and open them lazily in the worker, or use `multiprocessing_context="
            "'fork'` where it is safe.",
            CONFIRMED, message=m.text, line=m.line)))  # fmt: skip
    config = scan.of("S21")
    if config:
        m = first(config)
        option = m.fields.get("option", "prefetch_factor")
        out.append(Candidate(S.LOADER_CONFIG, m.line, make_finding(
            "loader-config", f"DataLoader option `{option}` needs num_workers > 0",
            "The DataLoader was constructed with an option that only applies to worker processes while "
            "`num_workers=0`.",
            f"drop `{option}` when `num_workers=0` (e.g. `{option}=... if num_workers > 0 else None`).",
            CONFIRMED, message=m.text, line=m.line)))  # fmt: skip
    pin = scan.of("S5", "S10")
    if pin:
        m = first(pin)
        original = m.fields.get("original_message")
        out.append(Candidate(S.PIN_MEMORY_THREAD, m.line, make_finding(
            "pin-memory-thread", "The pin-memory thread failed",
            "The thread that copies batches into pinned memory died"
            + (f": {m.fields.get('original_exception')}: {original}." if original else ".")
            + " It is known to break when a `persistent_workers=True, pin_memory=True` loader is reset or shut down.",
            "set `pin_memory=False` (it does nothing without an accelerator), avoid re-creating iterators of "
            "persistent loaders, or upgrade torch.",
            LIKELY, message=m.text, line=m.line)))  # fmt: skip
    return out


def _nofile_here(machine: MachineFacts) -> str:
    """This machine's open-file limit, said to be this machine's: the log does not say the job's."""
    nofile = machine.nofile
    if not nofile:
        return " The log does not say the job's open-file limit, and this machine's was not read."
    return (f" The log does not say the job's open-file limit; on this machine (where triage runs, not necessarily "
            f"where the job ran) it is {nofile[0]} (hard {nofile[1]}).")  # fmt: skip


def _open_files_candidate(scan: LogScan, machine: MachineFacts, files: list[Match]) -> Candidate:
    """`Too many open files`, attributed to the process whose traceback raised it: a worker's own code (its
    `Original Traceback`: a dataset opening files it never closes), or the main process receiving batches (torch's
    descriptor-passing of tensors)."""
    m = first(files)
    nofile = machine.nofile
    limits = {"nofile_soft": nofile[0] if nofile else None, "nofile_hard": nofile[1] if nofile else None,
              "nofile_read_from": "this machine" if nofile else None}  # fmt: skip
    in_workers = [w for w in _wrappers_for(scan, ("errno24",)) if "worker_id" in w.fields]
    if in_workers and not scan.of("S6", "S7"):
        w = first(in_workers)
        ids = _worker_ids(in_workers)
        frame, raised_in = w.fields.get("frame"), w.fields.get("raised_in")
        where = (f" at {frame}" if frame else "") + (f" (raised in {raised_in})" if raised_in else "")
        who = f"DataLoader worker{'s' if len(ids) > 1 else ''} {', '.join(str(i) for i in ids)}"
        return Candidate(S.TOO_MANY_OPEN_FILES, w.line, make_finding(
            "too-many-open-files", f"{who} ran out of file descriptors in the dataset's own code"
            + (f" ({frame.rsplit('/', 1)[-1]})" if frame else ""),
            f"`{w.fields.get('original_exception') or 'OSError'}: {w.fields.get('original_message')}` was raised "
            f"inside {who}{where} and re-raised in the main process: the worker's own descriptors ran out while it "
            "opened a file, so it is the worker's open files that pile up (a file opened per sample or shard and "
            "never closed, handles kept on `self`), not the tensors the main process receives. Every sample there "
            "most likely loads alone." + _nofile_here(machine),
            "close what `__getitem__` (or the code it calls) opens: `with open(path, 'rb') as f:` (np.load, "
            "tarfile.open, PIL's Image.open accept a file object or close with a `with` block), or keep at most one "
            "handle per file in a bounded cache that closes what it evicts. `dlprobe run` (below) counts each "
            "worker's open descriptors through the run and names what they point to. Raising the limit only delays "
            "it.",
            CONFIRMED, cause="worker-descriptors", worker_ids=ids, frame=frame, raised_in=raised_in,
            message=w.fields.get("original_message"), line=w.line, **limits))  # fmt: skip
    return Candidate(S.TOO_MANY_OPEN_FILES, m.line, make_finding(
        "too-many-open-files", "The main process ran out of file descriptors receiving batches from the workers",
        f"{KEPT_BATCHES_CAUSE[0].upper()}{KEPT_BATCHES_CAUSE[1:]}; many small tensors per sample exhaust the "
        "limit sooner. `dlprobe run` (below) reads what the main process's descriptors point to (torch's "
        "/dev/shm storages) and how many it gains per batch." + _nofile_here(machine),
        KEPT_BATCHES_FIX + " Packing a sample's tensors into one also needs fewer.",
        CONFIRMED, cause="main-receiving", message=m.text, line=m.line, **limits))  # fmt: skip


_IMAGE_ERRORS = ("image file is truncated", "cannot identify image file", "decoder error")


def exception_candidates(scan: LogScan) -> list[Candidate]:
    special = ("S14", "S15", "S16", "S17", "S18", "S19", "S20", "S6", "S7", "errno24", "pickle", "none-sample")
    groups: dict[tuple[str, str], list[Match]] = {}
    for m in scan.of("S9"):
        original = m.fields.get("original_message")
        if original is not None and any(o.id in special for o in match_line(original)):
            continue  # explained by a more specific cause
        key = alike_key(m.fields.get("original_exception") or m.fields["exception"], original or "")
        groups.setdefault(key, []).append(m)
    out = []
    for (exc, _), wrappers in groups.items():
        shared = shared_state_candidate(exc, wrappers)
        if shared is not None:  # never a bad index: the error is the workers' shared state
            out.append(shared)
            continue
        m = wrappers[0]
        message = str(m.fields.get("original_message") or "")
        index = INDEX_IN_MESSAGE.search(message)
        frame = next((w.fields["frame"] for w in wrappers if "frame" in w.fields), None)
        image = any(e in message for e in _IMAGE_ERRORS) or exc.endswith("UnidentifiedImageError")
        fix = ("remove or re-encode the file (`PIL.Image.open(p).verify()` over the dataset finds them); "
               "`ImageFile.LOAD_TRUNCATED_IMAGES = True` accepts partial images" if image else
               "fix the sample or the code at the frame above; to skip bad samples, catch the error in "
               "`__getitem__` and use a `collate_fn` that drops them")  # fmt: skip
        fix += ". `dlprobe run` (below) names the dataset index each worker was loading when it failed."
        where = f" at {frame}" if frame else ""
        ids = _worker_ids(wrappers)
        detail = (f"`{exc}: {message}` was raised in worker {m.fields['worker_id']}{where} and re-raised in the main "
                  "process. PyTorch does not print the sample index" + (", but the error message names one." if index
                  else "."))  # fmt: skip
        finding = make_finding(
            "bad-sample", f"{exc} raised while loading a sample in DataLoader worker {m.fields['worker_id']}",
            detail, fix, CONFIRMED if message else LIKELY, cause="exception", exception=exc, message=message or None,
            worker_id=m.fields["worker_id"], worker_ids=ids if len(ids) > 1 else None, frame=frame,
            index=int(index.group(1)) if index else None, line=m.line, occurrences=len(wrappers))  # fmt: skip
        out.append(Candidate(S.SAMPLE_EXCEPTION, m.line, finding))
    return out


def timeout_candidates(scan: LogScan) -> list[Candidate]:
    timeouts = scan.of("S4")
    if not timeouts:
        return []
    m = first(timeouts)
    timeout = m.fields["timeout"]
    common = {"timeout_s": timeout, "line": m.line, "message": m.text, "occurrences": len(timeouts)}
    out = []
    tokenizers = scan.of("tokenizers-fork")
    threads = scan.of("fork-threads")
    if tokenizers:
        out.append(Candidate(S.HANG_TOKENIZERS_FORK, m.line, make_finding(
            "worker-hang", f"No batch within timeout={timeout:g} s: tokenizers' thread pool was used before fork",
            "HuggingFace tokenizers warned that the process forked after its Rust thread pool had run; with "
            "TOKENIZERS_PARALLELISM=true the forked workers deadlock in it.",
            "set TOKENIZERS_PARALLELISM=false (or leave it unset), tokenize inside the workers only or ahead of "
            "time, or use `multiprocessing_context='spawn'`.",
            LIKELY, cause="tokenizers-fork", hint_line=tokenizers[0].line, **common)))  # fmt: skip
    if threads:
        out.append(Candidate(S.HANG_THREADS_AT_FORK, m.line, make_finding(
            "worker-hang", f"No batch within timeout={timeout:g} s: the process was multi-threaded when it forked",
            "Python warned that the training process had other threads when the workers were forked. A lock "
            "(Python, logging, glibc or a library's) held by one of them at that instant is copied locked into "
            "every worker, which then waits for it forever.",
            "start background threads after the loader's workers exist (or in `worker_init_fn`), or use "
            "`multiprocessing_context='spawn'` or `'forkserver'`. " + FIX_HANG,
            LIKELY, cause="lock-at-fork", hint_line=threads[0].line, **common)))  # fmt: skip
    out.append(Candidate(S.HANG_UNKNOWN, m.line, make_finding(
        "worker-hang", f"No batch arrived within the DataLoader's timeout of {timeout:g} s",
        f"`DataLoader(timeout={timeout:g})` gave up waiting for the next batch: a worker is stuck (a deadlock after "
        "fork, a blocked read) or one batch takes longer than the timeout. The log cannot say which worker or "
        "sample.", FIX_HANG, LIKELY, cause="unknown", **common)))  # fmt: skip
    return out


def warning_candidates(scan: LogScan) -> list[Candidate]:
    out = []
    many = scan.of("S11")
    if many:
        m = many[0]
        out.append(Candidate(S.TOO_MANY_WORKERS_WARNING, m.line, Finding(
            "too-many-workers", "warning", "More DataLoader workers than CPUs",
            f"PyTorch warned that the loader creates {m.fields.get('workers')} workers while "
            f"{m.fields.get('suggested', '?')} CPUs are available: slower, more memory, more /dev/shm.",
            "use at most (CPUs per process - 1) workers.", {"line": m.line, "message": m.text})))  # fmt: skip
    iterable = scan.of("S12")
    if iterable:
        m = iterable[0]
        out.append(Candidate(S.ITERABLE_DUPLICATES_WARNING, m.line, Finding(
            "iterable-duplicates", "warning", "IterableDataset returned more samples than its length",
            "Every worker iterates the whole IterableDataset unless `__iter__` splits the work, so each sample is "
            "yielded num_workers times.",
            "shard in `__iter__` with `torch.utils.data.get_worker_info()` (id, num_workers); for a `path label` "
            "index file, `from dlprobe.fixes import ShardedLineStream` shards by rank and worker.",
            cast(Evidence, {"line": m.line, "message": m.text, **m.fields}))))  # fmt: skip
    return out
