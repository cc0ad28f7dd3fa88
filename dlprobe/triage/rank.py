"""Turns recognised messages and machine facts into likely causes, ranked, each a Finding with evidence and fix."""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from typing import Any

from dlprobe.analysis.death_findings import signal_cause
from dlprobe.analysis.model import Finding
from dlprobe.system.kernlog import OomKill, parse_oom_lines
from dlprobe.triage.logscan import LogScan
from dlprobe.triage.machine import MachineFacts
from dlprobe.triage.patterns import Match, match_line
from dlprobe.units import format_bytes

# How close (seconds) a kernel OOM kill of a DataLoader worker must be to the log's last write to count as
# the same failure when the pids differ (a container's pid namespace hides the host pids from the log).
NEAR_S = 600.0
BIG_SHM = 2 << 30  # a /dev/shm this big is rarely what ran out
WORKER_COMMS = ("pt_data_worker", "pt_multiprocess", "pt_thread_data_w")
INDEX_IN_MESSAGE = re.compile(r"\b(?:index|idx|sample)\b\D{0,3}?(\d+)", re.IGNORECASE)
CONFIRMED, LIKELY, POSSIBLE = "confirmed", "likely", "possible"

FIX_OOM = (
    "find what grows: run it under `dlprobe run` (below), which measures each worker's private memory (USS) and "
    "names the dataset attributes that are copied into every worker. Usual fixes: keep per-sample metadata in "
    "numpy arrays or pyarrow instead of Python lists/dicts, fewer `num_workers`, a smaller `prefetch_factor` or "
    "batch, or more memory (container/cgroup limit, SLURM `--mem`)."
)
FIX_SHM = (
    "give /dev/shm room for num_workers x prefetch_factor x batch bytes: `docker run --shm-size=8g` (or "
    "`--ipc=host`), a memory-backed emptyDir at /dev/shm on Kubernetes; or lower `num_workers`, `prefetch_factor` "
    "or the batch size. `set_sharing_strategy('file_system')` does not help when the tmpfs is full."
)
FIX_NATIVE = (
    "get the crashing stack: set `PYTHONFAULTHANDLER=1` (workers inherit it and print every thread's Python stack "
    "on a crash), or rerun with `num_workers=0` so it happens in the main process. Usual culprits: fork-unsafe "
    "state made in the parent (OpenCV/OpenMP threads, CUDA, lmdb/h5py handles opened in `__init__`: open them "
    "lazily in the worker, or use `multiprocessing_context='spawn'`), a corrupt file decoded by C code, or "
    "mismatched library builds."
)
FIX_HANG = (
    "find the stuck worker: run it under `dlprobe run` with a hang timeout (below), which dumps every worker's "
    "stack and names the indices it holds. Usual causes: a lock another thread held at fork time, OpenMP/MKL, "
    "OpenCV or tokenizers thread pools used before fork (OMP_NUM_THREADS=1, `cv2.setNumThreads(0)`, "
    "TOKENIZERS_PARALLELISM=false, or `multiprocessing_context='spawn'`), a blocking file or network read; or "
    "samples that simply take longer than `timeout`."
)


@dataclass
class Candidate:
    score: int
    line: int
    finding: Finding


def _finding(code: str, title: str, detail: str, fix: str, confidence: str, **evidence: Any) -> Finding:
    evidence = {"confidence": confidence, **{k: v for k, v in evidence.items() if v not in (None, [], {})}}
    return Finding(code, "error", title, detail, fix, evidence)


def _plural(items: list[Any], one: str, many: str) -> str:
    return one if len(items) == 1 else many


def _pids_text(pids: list[int]) -> str:
    return ", ".join(str(p) for p in pids)


# --- worker deaths -------------------------------------------------------------------------------------------


@dataclass
class Death:
    pid: int | None
    line: int
    signal: str | None = None
    signal_number: int | None = None
    exit_code: int | None = None
    text: str = ""


def _deaths(scan: LogScan) -> list[Death]:
    """One entry per dead worker pid, from S1/S2, or S3 when nothing says how it died."""
    deaths: dict[int, Death] = {}
    for m in scan.of("S1", "S2"):
        pid = m.fields["pid"]
        if pid not in deaths:
            deaths[pid] = Death(pid, m.line, m.fields.get("signal"), m.fields.get("signal_number"),
                                m.fields.get("exit_code"), m.text)  # fmt: skip
    for m in scan.of("S3"):
        for pid in m.fields["pids"]:
            deaths.setdefault(pid, Death(pid, m.line, text=m.text))
    return sorted(deaths.values(), key=lambda d: d.line)


def _markers(scan: LogScan, what: str) -> list[Match]:
    return [m for m in scan.of("S8") if m.fields.get("what") == what]


def _oom_candidates(deaths: list[Death], scan: LogScan, machine: MachineFacts, kills: list[OomKill],
                    failed_at: float, unknown: bool) -> list[Candidate]:  # fmt: skip
    pids = [d.pid for d in deaths if d.pid is not None]
    line = deaths[0].line
    by_pid = [k for k in kills if k.pid in pids]
    near = [k for k in kills if k.time is not None and abs(k.time - failed_at) <= NEAR_S
            and k.comm.startswith(WORKER_COMMS) and k not in by_pid]  # fmt: skip
    cgroup = machine.cgroup or {}
    how = "exited unexpectedly" if unknown else "was killed by SIGKILL"
    worker = f"DataLoader worker {_plural(pids, 'pid', 'pids')} {_pids_text(pids)}"
    facts = _memory_facts(machine)
    kill_evidence = [_kill_dict(k) for k in (by_pid or near)[:6]]
    messages = [d.text for d in deaths[:3]]
    common = {"pids": pids, "signal": None if unknown else "SIGKILL", "line": line, "messages": messages}
    if by_pid:
        where = "its memory cgroup hit its limit" if any(k.cgroup for k in by_pid) else "the machine ran out of memory"
        rss = max((k.anon_rss_bytes or 0) for k in by_pid)
        detail = (f"The kernel log ({machine.kernel.source}) has an OOM kill for {_plural(by_pid, 'pid', 'pids')} "
                  f"{_pids_text([k.pid for k in by_pid])}: {where}."
                  + (f" The killed worker held {format_bytes(rss)} of anonymous memory." if rss else ""))  # fmt: skip
        finding = _finding("worker-killed", f"{worker} killed by the kernel's OOM killer", detail, FIX_OOM,
                           CONFIRMED, cause="oom", kernel_kills=kill_evidence, **common, **facts)  # fmt: skip
        return [Candidate(98 if not unknown else 95, line, finding)]
    if unknown:
        detail = ("The log says the worker exited but not how (the cause message is missing, e.g. an older torch or "
                  "a cut log). " + _kernel_note(machine, pids))  # fmt: skip
        fix = ("run it under `dlprobe run` (below): it records every worker's exit status and signal, its memory, "
               "and the kernel's OOM kills.")  # fmt: skip
        finding = _finding("worker-killed", f"{worker} exited unexpectedly, cause not in the log", detail, fix,
                           POSSIBLE, cause="unknown", **common, **facts)  # fmt: skip
        return [Candidate(60, line, finding)]
    if near:
        score, confidence = 88, LIKELY
        detail = (f"SIGKILL is what the OOM killer sends, and the kernel log ({machine.kernel.source}) has an OOM kill "
                  f"of a DataLoader worker at about the time the log was written (pid {near[0].pid} there; pids differ "
                  "inside a container's pid namespace).")  # fmt: skip
    elif cgroup.get("oom_kill"):
        score, confidence = 82, LIKELY
        detail = (f"SIGKILL is what the OOM killer sends, and this memory cgroup ({cgroup.get('path')}) counts "
                  f"{cgroup['oom_kill']} OOM {_plural([1] * int(cgroup['oom_kill']), 'kill', 'kills')}.")  # fmt: skip
    elif not machine.kernel.readable:
        score, confidence = 72, LIKELY
        detail = ("SIGKILL cannot be caught, so the worker printed nothing; it is what the kernel's OOM killer "
                  f"sends. No kernel log to confirm it: {machine.kernel.error}.")  # fmt: skip
    else:
        score, confidence = 55, POSSIBLE
        detail = "SIGKILL is what the kernel's OOM killer sends, but " + _kernel_note(machine, pids)
    finding = _finding("worker-killed", f"{worker} {how}: most likely out of memory", detail, FIX_OOM, confidence,
                       cause="oom", kernel_kills=kill_evidence, **common, **facts)  # fmt: skip
    out = [Candidate(score, line, finding)]
    if confidence == POSSIBLE:
        other = _finding(
            "worker-killed", f"{worker} killed from outside (SIGKILL)",
            "Something other than the OOM killer can send SIGKILL: a job scheduler enforcing a time or memory limit "
            "(SLURM, Kubernetes eviction), a watchdog, or a `kill -9`.",
            "check the scheduler's job record (e.g. `sacct -j JOB -o State,ExitCode,MaxRSS`, `kubectl describe pod`) "
            "for a limit or eviction at the time of the failure.",
            POSSIBLE, cause="external-kill", **common)  # fmt: skip
        out.append(Candidate(45, line, other))
    return out


def _kernel_note(machine: MachineFacts, pids: list[int]) -> str:
    if not machine.kernel.readable:
        return f"there was no kernel log to check ({machine.kernel.error})."
    return (f"the kernel log ({machine.kernel.source}) has no OOM kill for {_pids_text(pids)}; if the run was on "
            "another machine or container, check its `dmesg` or pass it with --kernel-log.")  # fmt: skip


def _kill_dict(kill: OomKill) -> dict[str, Any]:
    return {"pid": kill.pid, "comm": kill.comm, "cgroup": kill.cgroup, "anon_rss_bytes": kill.anon_rss_bytes,
            "uptime_s": kill.uptime_s}  # fmt: skip


def _memory_facts(machine: MachineFacts) -> dict[str, Any]:
    cgroup = machine.cgroup or {}
    return {"cgroup_limit_bytes": cgroup.get("limit"), "cgroup_oom_kills": cgroup.get("oom_kill"),
            "mem_total_bytes": machine.mem_total}  # fmt: skip


def _shm_facts(machine: MachineFacts) -> dict[str, Any]:
    shm = machine.shm or {}
    return {"shm_total_bytes": shm.get("total"), "shm_used_bytes": shm.get("used")}


def _shm_here(machine: MachineFacts) -> str:
    if not machine.shm:
        return ""
    total = machine.shm["total"]
    note = f" /dev/shm on this machine is {format_bytes(total)} ({format_bytes(machine.shm['used'])} used now)"
    if total <= 64 * 1024 * 1024:
        note += ", the size of Docker's default"
    return note + "."


def _signal_candidates(scan: LogScan, machine: MachineFacts, kills: list[OomKill],
                       failed_at: float) -> list[Candidate]:  # fmt: skip
    deaths = _deaths(scan)
    groups: dict[str, list[Death]] = {}
    for death in deaths:
        if death.exit_code is not None:
            key = "exit"
        elif death.signal is None:
            key = "unknown"
        else:
            key = signal_cause(death.signal)  # the worker-killed vocabulary of death_findings
        groups.setdefault(key, []).append(death)
    # torch's C handler writes its own line for SIGBUS/SIGSEGV/SIGFPE even when the chained errors are cut off.
    for what, key in (("bus error", "bus"), ("segmentation fault", "segfault"), ("floating-point exception", "fpe")):
        markers = _markers(scan, what)
        if markers and key not in groups:
            groups[key] = [Death(None, markers[0].line, text=markers[0].text)]
    out: list[Candidate] = []
    for key, group in groups.items():
        if key in ("oom", "unknown"):
            out += _oom_candidates(group, scan, machine, kills, failed_at, unknown=key == "unknown")
        elif key == "bus":
            out += _bus_candidates(group, scan, machine)
        else:
            out += _native_candidates(key, group, scan)
    return out


def _death_evidence(group: list[Death], scan: LogScan, marker: str | None) -> dict[str, Any]:
    pids = [d.pid for d in group if d.pid is not None]
    markers = _markers(scan, marker) if marker else []
    return {
        "pids": pids,
        "signal": group[0].signal and _signame(group[0]),
        "line": min([d.line for d in group] + [m.line for m in markers]),
        "messages": [d.text for d in group[:3]] + [m.text for m in markers[:1]],
    }


def _signame(death: Death) -> str:
    names = {9: "SIGKILL", 7: "SIGBUS", 11: "SIGSEGV", 6: "SIGABRT", 8: "SIGFPE", 15: "SIGTERM", 2: "SIGINT"}
    return names.get(death.signal_number or 0, death.signal or "?")


def _workers_text(pids: list[int]) -> str:
    return f"DataLoader worker {_plural(pids, 'pid', 'pids')} {_pids_text(pids)}" if pids else "A DataLoader worker"


def _bus_candidates(group: list[Death], scan: LogScan, machine: MachineFacts) -> list[Candidate]:
    ev = _death_evidence(group, scan, "bus error")
    ev["signal"] = "SIGBUS"
    big = bool(machine.shm and machine.shm["total"] >= BIG_SHM)
    detail = ("Workers put every batch into shared memory (/dev/shm); when that tmpfs is full, the first write to a "
              "page it cannot back raises SIGBUS, and torch says so in its message." + _shm_here(machine))  # fmt: skip
    if big:
        detail += " That is roomy, so if the run was on this machine a memory-mapped file is as likely (next cause)."
    shm = _finding("shm-exhausted", f"{_workers_text(ev['pids'])} died of SIGBUS: /dev/shm most likely full",
                   detail, FIX_SHM, LIKELY, cause="shm", **ev, **_shm_facts(machine))  # fmt: skip
    native = _finding(
        "worker-killed", f"{_workers_text(ev['pids'])} died of SIGBUS in native code",
        "SIGBUS also comes from reading a memory-mapped file past its end: an `np.memmap`/mmap'd dataset or "
        "checkpoint file that was truncated or rewritten while in use, or a network filesystem that went away.",
        "check the files the dataset memory-maps (sizes, whether another job rewrites them); " + FIX_NATIVE,
        POSSIBLE, cause="bus", **ev)  # fmt: skip
    return [Candidate(75 if big else 90, ev["line"], shm), Candidate(60 if big else 35, ev["line"], native)]


def _native_candidates(key: str, group: list[Death], scan: LogScan) -> list[Candidate]:
    marker = {"segfault": "segmentation fault", "fpe": "floating-point exception"}.get(key)
    ev = _death_evidence(group, scan, marker)
    pids = ev["pids"]
    who = _workers_text(pids)
    if key == "exit":
        code = group[0].exit_code
        finding = _finding(
            "worker-killed", f"{who} exited with code {code}",
            f"The worker process ended itself with exit code {code}: a native library's fatal-error path "
            "(`exit()`/`os._exit()`) or `sys.exit` in code that bypasses the worker's exception handling. PyTorch "
            "loses the details across processes.",
            "rerun with `num_workers=0` so the exit happens in the main process, or trace it with "
            "`strace -f -e trace=exit_group`; look for `os._exit`/`sys.exit` in the dataset and its libraries.",
            LIKELY, cause="exit", exit_code=code, **ev)  # fmt: skip
        return [Candidate(90, ev["line"], finding)]
    if key == "signal":
        finding = _finding(
            "worker-killed", f"{who} was stopped by {ev['signal']}",
            f"The worker got {group[0].signal} ({ev['signal']}) from outside: a scheduler preempting or ending the "
            "job, a timeout wrapper, or someone's `kill`.",
            "check the job scheduler's record for a preemption, time limit or cancellation at that time.",
            LIKELY, cause="signal", **ev)  # fmt: skip
        return [Candidate(80, ev["line"], finding)]
    native_lines = [m.text for m in scan.of("native-abort")][:3]
    what = {"segfault": ("segmentation fault", "SIGSEGV: native code read or wrote memory it does not own"),
            "abort": ("abort", "SIGABRT: native code called abort() (a failed C/C++ assertion, an uncaught C++ "
                      "exception, or heap corruption detected by malloc)"),
            "fpe": ("floating-point exception", "SIGFPE: an integer division by zero in native code"),
            "sigill": ("illegal instruction", "SIGILL: code built for a newer CPU")}[key]  # fmt: skip
    finding = _finding(
        "worker-killed", f"{who} crashed in native code ({what[0]})",
        f"The worker died of {what[1]}, while loading or collating a sample. Python code alone cannot do this; "
        "a C extension (image/video decoder, HDF5, lmdb, OpenCV, a custom op) did.",
        FIX_NATIVE, LIKELY, cause=key, native_messages=native_lines, **ev)  # fmt: skip
    return [Candidate(90, ev["line"], finding)]


# --- exceptions raised in a worker (Caught X in DataLoader worker process N) ---------------------------------


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


def _first(matches: list[Match]) -> Match:
    return min(matches, key=lambda m: m.line)


def _shm_alloc_candidates(scan: LogScan, machine: MachineFacts) -> list[Candidate]:
    matches = scan.of("S19", "S20")
    if not matches:
        return []
    m = _first(matches)
    wrappers = _wrappers_for(scan, ("S19", "S20"))
    detail = ("A worker could not create the shared-memory file for a batch (torch allocates every batch a worker "
              f"returns in /dev/shm): {m.fields.get('error') or m.text}." + _shm_here(machine))  # fmt: skip
    finding = _finding("shm-exhausted", "/dev/shm ran out of space for the workers' batches", detail, FIX_SHM,
                       CONFIRMED, cause="shm", worker_ids=_worker_ids(wrappers), file=m.fields.get("file"),
                       error=m.fields.get("error"), line=m.line, messages=[m.text], **_shm_facts(machine))  # fmt: skip
    return [Candidate(97, m.line, finding)]


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


def _collate_candidates(scan: LogScan) -> list[Candidate]:
    out = []
    for pid, (cause, title, fix) in COLLATE.items():
        matches = scan.of(pid)
        if not matches:
            continue
        m = _first(matches)
        wrappers = _wrappers_for(scan, (pid,))
        frame = next((w.fields["frame"] for w in wrappers if "frame" in w.fields), None)
        finding = _finding(
            "collate-error", title.format(**{k: m.fields.get(k, "?") for k in ("found", "first", "other", "entry")}),
            "Batching failed in `collate_fn`: the samples of one batch do not fit together. PyTorch does not say "
            "which sample; " + ("the log points at " + frame if frame else "a wrapper around the dataset can tell."),
            fix, CONFIRMED, cause=cause, worker_ids=_worker_ids(wrappers), message=m.text, line=m.line,
            occurrences=scan.counts.get(pid))  # fmt: skip
        out.append(Candidate(93, m.line, finding))
    return out


def _special_candidates(scan: LogScan, machine: MachineFacts) -> list[Candidate]:
    out: list[Candidate] = []
    cuda = scan.of("S18")
    if cuda:
        m = _first(cuda)
        wrappers = _wrappers_for(scan, ("S18",))
        out.append(Candidate(96, m.line, _finding(
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
        m = _first(files)
        nofile = machine.nofile
        limit = f" The open-file limit here is {nofile[0]} (hard {nofile[1]})." if nofile else ""
        out.append(Candidate(94, m.line, _finding(
            "too-many-open-files", "The process ran out of file descriptors receiving batches from the workers",
            "With the default `file_descriptor` sharing strategy every tensor received from a worker holds an open "
            "file descriptor until it is freed; keeping batches alive (a list of batches, a cache) or many small "
            "tensors per sample exhausts the limit." + limit,
            "don't keep batches (`.item()`, `.clone()` or `.numpy()` what you keep), pack a sample's tensors into "
            "one, raise the limit (`ulimit -n 65536`), or call `torch.multiprocessing.set_sharing_strategy("
            "'file_system')` at the start.",
            CONFIRMED, message=m.text, line=m.line, nofile_soft=nofile[0] if nofile else None,
            nofile_hard=nofile[1] if nofile else None)))  # fmt: skip
    pickles = scan.of("pickle")
    if pickles:
        m = _first(pickles)
        out.append(Candidate(92, m.line, _finding(
            "pickle-error", "The dataset could not be sent to spawn/forkserver workers (pickling failed)",
            "With `spawn` or `forkserver` (the default on Python 3.14+ outside macOS, and on Windows/macOS) the "
            "dataset, `collate_fn` and `worker_init_fn` are pickled into every worker.",
            "use module-level classes and functions (no lambdas or local classes), keep open handles (files, h5py, "
            "lmdb, locks) out of `__init__` and open them lazily in the worker, or use `multiprocessing_context="
            "'fork'` where it is safe.",
            CONFIRMED, message=m.text, line=m.line)))  # fmt: skip
    config = scan.of("S21")
    if config:
        m = _first(config)
        option = m.fields.get("option", "prefetch_factor")
        out.append(Candidate(95, m.line, _finding(
            "loader-config", f"DataLoader option `{option}` needs num_workers > 0",
            "The DataLoader was constructed with an option that only applies to worker processes while "
            "`num_workers=0`.",
            f"drop `{option}` when `num_workers=0` (e.g. `{option}=... if num_workers > 0 else None`).",
            CONFIRMED, message=m.text, line=m.line)))  # fmt: skip
    pin = scan.of("S5", "S10")
    if pin:
        m = _first(pin)
        original = m.fields.get("original_message")
        out.append(Candidate(85, m.line, _finding(
            "pin-memory-thread", "The pin-memory thread failed",
            "The thread that copies batches into pinned memory died"
            + (f": {m.fields.get('original_exception')}: {original}." if original else ".")
            + " It is known to break when a `persistent_workers=True, pin_memory=True` loader is reset or shut down.",
            "set `pin_memory=False` (it does nothing without an accelerator), avoid re-creating iterators of "
            "persistent loaders, or upgrade torch.",
            LIKELY, message=m.text, line=m.line)))  # fmt: skip
    return out


_IMAGE_ERRORS = ("image file is truncated", "cannot identify image file", "decoder error")


def _exception_candidates(scan: LogScan) -> list[Candidate]:
    special = ("S14", "S15", "S16", "S17", "S18", "S19", "S20", "S6", "S7", "errno24", "pickle", "none-sample")
    groups: dict[tuple[str, str], list[Match]] = {}
    for m in scan.of("S9"):
        original = m.fields.get("original_message")
        if original is not None and any(o.id in special for o in match_line(original)):
            continue  # explained by a more specific cause
        key = (m.fields.get("original_exception") or m.fields["exception"], original or "")
        groups.setdefault(key, []).append(m)
    out = []
    for (exc, message), wrappers in groups.items():
        m = wrappers[0]
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
        finding = _finding(
            "bad-sample", f"{exc} raised while loading a sample in DataLoader worker {m.fields['worker_id']}",
            detail, fix, CONFIRMED if message else LIKELY, cause="exception", exception=exc, message=message or None,
            worker_id=m.fields["worker_id"], worker_ids=ids if len(ids) > 1 else None, frame=frame,
            index=int(index.group(1)) if index else None, line=m.line, occurrences=len(wrappers))  # fmt: skip
        out.append(Candidate(90, m.line, finding))
    return out


# --- timeouts, the main process, warnings --------------------------------------------------------------------


def _timeout_candidates(scan: LogScan) -> list[Candidate]:
    timeouts = scan.of("S4")
    if not timeouts:
        return []
    m = _first(timeouts)
    timeout = m.fields["timeout"]
    common = {"timeout_s": timeout, "line": m.line, "message": m.text, "occurrences": len(timeouts)}
    out = []
    tokenizers = scan.of("tokenizers-fork")
    threads = scan.of("fork-threads")
    if tokenizers:
        out.append(Candidate(90, m.line, _finding(
            "worker-hang", f"No batch within timeout={timeout:g} s: tokenizers' thread pool was used before fork",
            "HuggingFace tokenizers warned that the process forked after its Rust thread pool had run; with "
            "TOKENIZERS_PARALLELISM=true the forked workers deadlock in it.",
            "set TOKENIZERS_PARALLELISM=false (or leave it unset), tokenize inside the workers only or ahead of "
            "time, or use `multiprocessing_context='spawn'`.",
            LIKELY, cause="tokenizers-fork", hint_line=tokenizers[0].line, **common)))  # fmt: skip
    if threads:
        out.append(Candidate(86, m.line, _finding(
            "worker-hang", f"No batch within timeout={timeout:g} s: the process was multi-threaded when it forked",
            "Python warned that the training process had other threads when the workers were forked. A lock "
            "(Python, logging, glibc or a library's) held by one of them at that instant is copied locked into "
            "every worker, which then waits for it forever.",
            "start background threads after the loader's workers exist (or in `worker_init_fn`), or use "
            "`multiprocessing_context='spawn'` or `'forkserver'`. " + FIX_HANG,
            LIKELY, cause="lock-at-fork", hint_line=threads[0].line, **common)))  # fmt: skip
    out.append(Candidate(84, m.line, _finding(
        "worker-hang", f"No batch arrived within the DataLoader's timeout of {timeout:g} s",
        f"`DataLoader(timeout={timeout:g})` gave up waiting for the next batch: a worker is stuck (a deadlock after "
        "fork, a blocked read) or one batch takes longer than the timeout. The log cannot say which worker or "
        "sample.", FIX_HANG, LIKELY, cause="unknown", **common)))  # fmt: skip
    return out


def _main_killed_candidates(scan: LogScan, machine: MachineFacts, kills: list[OomKill],
                            failed_at: float) -> list[Candidate]:  # fmt: skip
    matches = scan.of("main-killed")
    if not matches or scan.of("S1", "S2", "S3"):
        return []
    m = _first(matches)
    near = [k for k in kills if k.time is not None and abs(k.time - failed_at) <= NEAR_S]
    confidence, score = (LIKELY, 85) if near else (POSSIBLE, 62)
    detail = ("The training process itself was killed with SIGKILL (the shell prints `Killed`, launchers exit code "
              "-9); that is what the kernel's OOM killer does when the main process is the biggest one.")  # fmt: skip
    if near:
        detail += f" The kernel log has an OOM kill of pid {near[0].pid} ({near[0].comm}) at about that time."
    else:
        detail += " " + _kernel_note(machine, [])
    return [Candidate(score, m.line, _finding(
        "main-killed", "The training process was killed (SIGKILL), most likely out of memory", detail,
        "see which process grows under `dlprobe run` (below): the main process (batches or losses kept alive, "
        "a dataset loaded into memory) or the workers (copy-on-access). " + FIX_OOM.split(". ", 1)[1],
        confidence, cause="oom", line=m.line, message=m.text, kernel_kills=[_kill_dict(k) for k in near[:6]],
        **_memory_facts(machine)))]  # fmt: skip


def _warning_candidates(scan: LogScan) -> list[Candidate]:
    out = []
    many = scan.of("S11")
    if many:
        m = many[0]
        out.append(Candidate(20, m.line, Finding(
            "too-many-workers", "warning", "More DataLoader workers than CPUs",
            f"PyTorch warned that the loader creates {m.fields.get('workers')} workers while "
            f"{m.fields.get('suggested', '?')} CPUs are available: slower, more memory, more /dev/shm.",
            "use at most (CPUs per process - 1) workers.", {"line": m.line, "message": m.text})))  # fmt: skip
    iterable = scan.of("S12")
    if iterable:
        m = iterable[0]
        out.append(Candidate(25, m.line, Finding(
            "iterable-duplicates", "warning", "IterableDataset returned more samples than its length",
            "Every worker iterates the whole IterableDataset unless `__iter__` splits the work, so each sample is "
            "yielded num_workers times.",
            "shard in `__iter__` with `torch.utils.data.get_worker_info()` (id, num_workers); for a `path label` "
            "index file, `from dlprobe.fixes import ShardedLineStream` shards by rank and worker.",
            {"line": m.line, "message": m.text, **m.fields})))  # fmt: skip
    return out


def diagnose(scan: LogScan, machine: MachineFacts, failed_at: float) -> list[Finding]:
    """The likely causes, most likely first; failures (severity error) before warnings."""
    kills = list(machine.kernel.kills) + parse_oom_lines(m.text for m in scan.of("kernel-oom"))
    candidates = (
        _shm_alloc_candidates(scan, machine)
        + _special_candidates(scan, machine)
        + _collate_candidates(scan)
        + _exception_candidates(scan)
        + _signal_candidates(scan, machine, kills, failed_at)
        + _timeout_candidates(scan)
        + _main_killed_candidates(scan, machine, kills, failed_at)
        + _warning_candidates(scan)
    )
    candidates.sort(key=lambda c: (-c.score, c.line))
    for candidate in candidates:
        _name_rank(candidate, scan)
    return [c.finding for c in candidates]


def _rank_at(scan: LogScan, line: int) -> int | None:
    """The rank whose "[rankN]:" prefix the finding's line (or the traceback it ends) carried."""
    for m in scan.matches:
        if m.line == line and m.fields.get("rank") is not None:
            return int(m.fields["rank"])
    for block in scan.tracebacks:
        if block.rank is not None and block.start_line <= line <= (block.end_line or block.start_line):
            return block.rank
    return None


def _name_rank(candidate: Candidate, scan: LogScan) -> None:
    """Say which rank a failure came from: its own lines' prefix, else torchrun's root cause (the first rank
    that failed, which is the failure a log's findings explain)."""
    finding = candidate.finding
    rank, source = _rank_at(scan, candidate.line), "line prefix"
    if rank is None and finding.severity == "error" and scan.root_cause_rank is not None:
        rank, source = scan.root_cause_rank, "torchrun root cause"
    if rank is None:
        return
    finding.title += f" (rank {rank})"
    finding.evidence["rank"] = rank
    finding.evidence["rank_from"] = source
    if scan.root_cause_rank == rank and scan.root_cause_local_rank is not None:
        finding.evidence["local_rank"] = scan.root_cause_local_rank


def reproduce(scan: LogScan, findings: list[Finding]) -> dict[str, Any]:
    """The `dlprobe run` command that would show the top cause under the probe."""
    script = scan.script
    options: list[str] = []
    env = ""
    note = "add the script's own arguments" if script else "the log does not show the script's path: use yours"
    top = findings[0] if findings and findings[0].severity == "error" else None
    if top is not None:
        cause = top.evidence.get("cause")
        if top.code == "worker-hang":
            timeout = float(top.evidence.get("timeout_s") or 0)
            # The probe must see the stall before PyTorch's own timeout raises.
            hang = max(1, int(timeout / 2)) if timeout else 30
            options = ["--hang-timeout", str(hang)]
            note += f"; --hang-timeout {hang} is below the DataLoader's timeout so the stacks are dumped first"
        elif cause in ("segfault", "abort", "fpe", "bus"):
            env = "PYTHONFAULTHANDLER=1 "
            note += "; PYTHONFAULTHANDLER=1 makes the crashing worker print its Python stack"
    parts = ["dlprobe", "run", *options, shlex.quote(script) if script else "train.py"]
    return {"command": env + " ".join(parts) + " ...", "script": script, "note": note}
