"""Descriptor findings: a process whose open file descriptors climb through the run (a leak), against its
RLIMIT_NOFILE, and which process hit `Too many open files` when one did.

One symptom, several causes: what the climbing process's descriptors point to (files the dataset opens, torch's
shared-memory storages, sockets, pipes) and which process holds them (the main process or a worker) name the cause;
the finding says which, with the counts by kind, and what ruled the others out."""

from __future__ import annotations

import re
from typing import Any, cast

from dlprobe.analysis.evidence.failures import FdLeakRow
from dlprobe.analysis.evidence.finding import Finding
from dlprobe.analysis.evidence.schema import Evidence
from dlprobe.analysis.findings.common import worker_name
from dlprobe.analysis.measures.tracebacks import user_frame_from_traceback
from dlprobe.analysis.run.labels import process_name
from dlprobe.analysis.run.model import ProcessRecord, RunData
from dlprobe.torch_text import (
    EMFILE,
    KEPT_BATCHES_CAUSE,
    KEPT_BATCHES_FIX,
    MAIN_OUT_OF_DESCRIPTORS,
    OUT_OF_DESCRIPTORS,
    TORCH_SHM_PREFIX,
    caught_in_worker_process,
)

FD_LEAK_MIN = 64  # descriptors a process gained over its readings before a climb counts as a leak
FD_LEAK_SHARE = 0.5  # ... and at least half again what it started with (a worker opening its shards once is not)
# Still climbing in the later half of its readings: a process that opened its files at start and kept them is not
# leaking. The later half's rise is at least this share of the whole rise.
FD_LATE_SHARE = 0.25
FD_MIN_READINGS = 3
CEILING_SLACK = 4  # descriptors below the limit that count as at it (the next few opens of a worker all fail)
NEAR_LIMIT_SHARE = 0.9  # a count this close to its limit is the process that hit `Too many open files`
# The kind of descriptor that holds at least this share of those read names the cause; below it, no kind does.
CAUSE_SHARE = 0.5
# Regular files at most this share of the rise are too few to be the climb (the script's own output, dlprobe's).
FEW_FILES_SHARE = 0.1
# What a descriptor's target pattern is (procfds.target_pattern folds them): the kinds the causes are told apart by.
KIND_TORCH_SHM, KIND_FILE, KIND_SOCKET, KIND_PIPE, KIND_OTHER = "torch-shm", "file", "socket", "pipe", "other"
KIND_WORDS = {
    KIND_TORCH_SHM: "torch shared-memory storages",
    KIND_FILE: "regular files",
    KIND_SOCKET: "sockets",
    KIND_PIPE: "pipes",
    KIND_OTHER: "other (devices, anon inodes, other /dev/shm files)",
}
# The cause each kind names (the evidence's `cause`): kept-batches only where the main process holds them.
CAUSE_KEPT_BATCHES, CAUSE_FILES, CAUSE_SOCKETS, CAUSE_PIPES, CAUSE_UNKNOWN = (
    "kept-batches", "dataset-files", "sockets", "pipes", "unknown",
)  # fmt: skip
_CAUSE_KIND = {CAUSE_KEPT_BATCHES: KIND_TORCH_SHM, CAUSE_FILES: KIND_FILE, CAUSE_SOCKETS: KIND_SOCKET,
               CAUSE_PIPES: KIND_PIPE}  # fmt: skip


def _inherited(run: RunData, proc: ProcessRecord) -> tuple[float, int] | None:
    """A forked worker's descriptors as it began: its parent's, read at or before the fork (a fork inherits every
    one). Only for a worker first read after it began: on a busy machine the sampler finds a worker that opens 100
    files a second late, and it reads the worker once before it dies (a clean-clone CI run: 102 of 128, then gone)."""
    readings = proc.series.values("fds")
    parent = next((p for p in run.processes if p.pid == proc.ppid), None)
    if proc.role != "worker" or proc.started is None or parent is None or not readings:
        return None
    if readings[0][0] <= proc.started:
        return None
    before = [n for t, n in parent.series.values("fds") if t <= proc.started]
    return (proc.started, before[-1]) if before else None


def _count_when_ended(run: RunData, proc: ProcessRecord, last: tuple[float, int], rate: float) -> float | None:
    """The descriptors a process that ended after its `last` reading held as it ended, climbing at `rate` (a worker
    opening 80 a second ends between two readings a second apart). None: it did not end after that reading."""
    ended = run.gone.get(proc.pid)
    if ended is None or ended <= last[0]:
        return None
    return last[1] + rate * (ended - last[0])


def _projected_to_limit(run: RunData, proc: ProcessRecord, readings: list[tuple[float, int]], emfile: bool) -> bool:
    """Whether a process that ended between readings, climbing at the rate of its last two, had reached its limit
    when it ended, in a run that raised `Too many open files` (the error says some process ran out)."""
    if len(readings) < 2 or not proc.nofile or not emfile:
        return False
    (t0, n0), (t1, n1) = readings[-2], readings[-1]
    if t1 <= t0 or n1 <= n0:
        return False
    count = _count_when_ended(run, proc, (t1, n1), (n1 - n0) / (t1 - t0))
    return count is not None and count >= proc.nofile * NEAR_LIMIT_SHARE


def _refused_itself(run: RunData, proc: ProcessRecord) -> bool:
    """Whether the worker's own traceback says `Too many open files`: torch's "Caught OSError in DataLoader worker
    process N" of its loader, with EMFILE in it. The worker ran out by its own account, however few times the
    sampler read it (a worker opening 100 files a second, read once at 72 of 128 before it died, in 1 run in 9)."""
    if proc.role != "worker" or proc.worker_id is None:
        return False
    for lo in run.loaders:
        if lo.loader_id != proc.loader_id:
            continue
        for error in lo.errors:
            text = f"{error.get('message') or ''}\n{error.get('cause') or ''}"
            caught = caught_in_worker_process(text)
            if caught is not None and caught[1] == proc.worker_id and EMFILE.search(text):
                return True
    return False


def _climb(proc: ProcessRecord, run: RunData, emfile: bool) -> dict[str, Any] | None:
    """The process's descriptor climb, or None where its count did not climb as a leak does (`emfile`: the run
    raised `Too many open files`)."""
    readings = proc.series.values("fds")
    inherited = _inherited(run, proc)
    if inherited is not None:
        readings = [inherited, *readings]
    # Two readings are enough for a process that climbed to its limit between them (a worker opening 100 files a
    # second lives about a second): there is no later half to ask whether it kept climbing.
    at_limit = len(readings) >= 2 and bool(proc.nofile) and readings[-1][1] >= (proc.nofile or 0) * NEAR_LIMIT_SHARE
    at_limit = at_limit or _projected_to_limit(run, proc, readings, emfile)
    at_limit = at_limit or (len(readings) >= 2 and _refused_itself(run, proc))
    if len(readings) < FD_MIN_READINGS and not at_limit:
        return None
    (t0, first), (t1, last) = readings[0], readings[-1]
    peak = max(n for _, n in readings)
    rise = peak - first
    # A process that climbed to its limit needs no more rise than that: it ran out.
    least = 1 if at_limit else max(FD_LEAK_MIN, first * FD_LEAK_SHARE)
    if rise < least or last < first + rise * 0.8 or t1 <= t0:
        return None
    mid = readings[len(readings) // 2][1]
    # A count that stopped rising in the second half settled, unless it stopped at the limit itself: there it could
    # not rise (a process that holds 90% of its limit and stays there has settled).
    at_ceiling = bool(proc.nofile) and last >= (proc.nofile or 0) - CEILING_SLACK
    # Nor has one near its limit that rose again at its last reading: 6 -> 54 -> 92 -> 120 of 128, read every 0.3 s,
    # rose less in its later half only because the limit was near (a busy run: the worker then died of EMFILE).
    at_ceiling = at_ceiling or (at_limit and last > readings[-2][1])
    if len(readings) >= FD_MIN_READINGS and last - mid < rise * FD_LATE_SHARE and not at_ceiling:
        return None
    if at_limit:  # the climb ends where the limit stopped it: the readings after it (a hang, say) are no rate
        t1, last = next((t, n) for t, n in readings if n == peak)
        if t1 <= t0:
            return None
    rate = (last - first) / (t1 - t0)
    row: dict[str, Any] = {
        "pid": proc.pid,
        "role": proc.role,
        "worker_id": proc.worker_id,
        "fds_first": first,
        "fds_last": last,
        "fds_peak": peak,
        "seconds": round(t1 - t0, 1),
        "fds_per_s": round(rate, 2),
        "fd_limit": proc.nofile,
        "fds_first_inherited": inherited is not None,  # fds_first is its parent's count at the fork
        "seconds_to_limit": round((proc.nofile - last) / rate, 1) if proc.nofile and rate > 0 else None,
        "fd_targets": [{"target": p, "count": n} for p, n in proc.fd_targets[2]] if proc.fd_targets else [],
        "fd_targets_at": proc.fd_targets[1] if proc.fd_targets else None,
    }
    return row


_NAMED_PATH = re.compile(r"'(/[^']+)'")


def _emfile_text(run: RunData) -> str | None:
    """The `Too many open files` line the run's errors or stderr hold, if any."""
    texts = [str(e.get(k) or "") for lo in run.loaders for e in lo.errors for k in ("message", "cause")]
    texts.append(run.stderr_tail or "")
    lines = [line.strip()[:300] for text in texts for line in text.splitlines() if EMFILE.search(line)]
    # the line that names the file it was opening, where one does (a worker's own OSError), over the ones that do
    # not (torch's message in the main process, a queue's send error)
    return next((line for line in lines if _NAMED_PATH.search(line)), lines[0] if lines else None)


def _opened_at(run: RunData) -> str | None:
    """Where a worker was opening the descriptor it was refused: the user's frame of its `Too many open files`
    traceback, the code that opens the files that pile up."""
    for lo in run.loaders:
        for e in lo.errors:
            text = f"{e.get('message') or ''}\n{e.get('cause') or ''}"
            if EMFILE.search(text):
                frame = user_frame_from_traceback(text)
                if frame:
                    return frame
    return None


def _reached_limit(run: RunData, proc: ProcessRecord, row: dict[str, Any] | None) -> bool:
    """Whether the process's descriptors reached its limit: read near it, or climbing at the rate read until the
    process ended (a worker opening 80 a second ends between two readings a second apart)."""
    readings = proc.series.values("fds")
    if not proc.nofile or not readings:
        return False
    if row is not None and _refused_itself(run, proc):
        return True
    count = max(n for _, n in readings)
    at_end = _count_when_ended(run, proc, readings[-1], row["fds_per_s"]) if row is not None else None
    if at_end is not None:
        count = max(count, int(at_end))
    return count >= proc.nofile * NEAR_LIMIT_SHARE


def _targets_text(row: dict[str, Any]) -> str:
    if not row["fd_targets"]:
        return "What they point to was not read (the count never doubled while the sampler watched it)."
    parts = ", ".join(f"{t['target']} ({t['count']})" for t in row["fd_targets"])
    return f"At {row['fd_targets_at']} open, they pointed to: {parts}."


def target_kind(pattern: str) -> str:
    """What a descriptor's target pattern is: one of torch's shared-memory storages, a regular file, a socket, a
    pipe, or something else (a device, an anon inode, another /dev/shm file)."""
    if pattern.startswith(TORCH_SHM_PREFIX):
        return KIND_TORCH_SHM
    if pattern in (KIND_SOCKET, KIND_PIPE):
        return pattern
    if pattern.startswith("/") and not pattern.startswith(("/dev/", "/proc/", "/sys/")):
        return KIND_FILE
    return KIND_OTHER


def targets_by_kind(row: dict[str, Any]) -> dict[str, int]:
    """The targets read of a climbing process, counted by kind, most first."""
    counts: dict[str, int] = {}
    for target in row["fd_targets"]:
        kind = target_kind(str(target["target"]))
        counts[kind] = counts.get(kind, 0) + int(target["count"])
    return dict(sorted(counts.items(), key=lambda kv: -kv[1]))


def leak_cause(role: str, by_kind: dict[str, int], read: int | None) -> str:
    """The cause the kinds name: the kind that holds at least CAUSE_SHARE of the descriptors read, by who holds
    them. torch's storages name the loop keeping batches only in the main process (what it receives); a worker that
    holds them keeps what it sends, which no cause here names."""
    if not by_kind or not read:
        return CAUSE_UNKNOWN
    kind, count = next(iter(by_kind.items()))
    if count < read * CAUSE_SHARE:
        return CAUSE_UNKNOWN
    if kind == KIND_TORCH_SHM:
        return CAUSE_KEPT_BATCHES if role == "main" else CAUSE_UNKNOWN
    return {KIND_FILE: CAUSE_FILES, KIND_SOCKET: CAUSE_SOCKETS, KIND_PIPE: CAUSE_PIPES}.get(kind, CAUSE_UNKNOWN)


def _workers_of(run: RunData, pid: int) -> list[dict[str, Any]]:
    """The descriptor counts each worker of the process held through the run (its children; every worker where the
    parent was not read)."""
    rows = []
    for proc in run.processes:
        counts = [n for _, n in proc.series.values("fds")]
        if proc.role == "worker" and proc.ppid in (pid, None) and counts:
            rows.append({"pid": proc.pid, "worker_id": proc.worker_id, "fds_min": min(counts), "fds_max": max(counts)})
    return sorted(rows, key=lambda r: (r["worker_id"] is None, r["worker_id"] or 0, r["pid"]))


def _batches_received(run: RunData, pid: int) -> tuple[int, int | None]:
    """Batches the process's loaders handed its loop, and how many tensors the first batch held."""
    loaders = [lo for lo in run.loaders if lo.writer in (pid, None)]
    batches = sum(e.batches for lo in loaders for e in lo.epochs)
    tensors = next((len(lo.batch_info.get("leaves") or []) for lo in loaders if lo.batch_info), None)
    return batches, tensors


def _differential(run: RunData, row: dict[str, Any], leaking: set[int]) -> Evidence:
    """Each candidate cause of the climb tested on the run's evidence: the kinds its descriptors point to, who
    holds them, how fast they rose per batch received; the winner, and what ruled each other kind out."""
    by_kind = targets_by_kind(row)
    read = row["fd_targets_at"]
    cause = leak_cause(row["role"], by_kind, read)
    batches, tensors = _batches_received(run, row["pid"]) if row["role"] == "main" else (0, None)
    rise = row["fds_peak"] - row["fds_first"]
    workers = _workers_of(run, row["pid"]) if row["role"] == "main" else []
    ruled_out: list[str] = []
    if cause == CAUSE_KEPT_BATCHES:
        files = by_kind.get(KIND_FILE, 0)
        flat = [w for w in workers if w["pid"] not in leaking]
        text = f"files the dataset opens: {files} of {read} are regular files"
        if files <= max(1, rise * FEW_FILES_SHARE):
            text += " (too few to be the climb)"
        if flat and len(flat) == len(workers):
            held = ", ".join(
                f"worker {w['worker_id']}: {w['fds_min']}"
                + (f" to {w['fds_max']}" if w["fds_max"] != w["fds_min"] else "")
                for w in flat
            )
            text += f", and the workers' descriptors are flat ({held}): none are files the dataset keeps open"
        ruled_out.append(text)
    elif cause == CAUSE_FILES and row["role"] == "worker":
        main = [p for p in run.processes if p.role == "main" and p.pid not in leaking and p.series.values("fds")]
        for proc in main:
            counts = [n for _, n in proc.series.values("fds")]
            ruled_out.append(f"the loop keeping batches: the main process held {min(counts)} to {max(counts)}")
    if cause != CAUSE_UNKNOWN:
        winner = _CAUSE_KIND[cause]
        for kind in (KIND_TORCH_SHM, KIND_FILE, KIND_SOCKET, KIND_PIPE):
            if kind != winner and not (kind == KIND_FILE and cause == CAUSE_KEPT_BATCHES):
                ruled_out.append(f"{KIND_WORDS[kind]}: {by_kind.get(kind, 0)} of {read}")
    return {
        "cause": cause,
        "holder": row["role"],
        "by_kind": by_kind,
        "targets_read": read,
        "batches_received": batches or None,
        "tensors_per_batch": tensors,
        "fds_per_batch": round(rise / batches, 2) if batches else None,
        "workers_fds": workers,
        "ruled_out": ruled_out,
    }


def _kinds_text(diff: Evidence) -> str:
    return ", ".join(f"{n} {KIND_WORDS[k]}" for k, n in diff["by_kind"].items())


_CAUSE_FIX = {
    CAUSE_SOCKETS: (
        "Close the connections `__getitem__` (or a client it calls) opens, or open one client per worker (in "
        "worker_init_fn, or lazily on first use) and reuse it: a client made per sample and never closed keeps its "
        "socket. Raising the limit (`ulimit -n`) only delays the failure."
    ),
    CAUSE_PIPES: (
        "Wait for and close what starts a subprocess per sample (`subprocess.run`, or `with Popen(...)`), and close "
        "the pipes it leaves (`os.pipe()`'s two ends). Raising the limit (`ulimit -n`) only delays the failure."
    ),
}


def find_fd_leak(run: RunData) -> list[Finding]:
    """fd-leak: open descriptors climbing through the run in a worker or the main process, with the cause its
    descriptors' kinds and holder name (a differential: the others ruled out by the same counts)."""
    names = {p.pid: process_name(p.role, p.pid, p.loader_id, p.worker_id, p.comm) for p in run.processes}
    emfile = _emfile_text(run)
    rows = [row for p in run.processes if (row := _climb(p, run, emfile is not None)) is not None]
    if not rows:
        return []
    rows.sort(key=lambda r: -r["fds_per_s"])
    by_pid = {r["pid"]: r for r in rows}
    # A leaking process read at its limit reached it, whether or not the run's output kept the error (a worker whose
    # EMFILE never reached the loop: the main process then sees only torch's EOFError).
    hit = [p.pid for p in run.processes if (emfile or p.pid in by_pid) and _reached_limit(run, p, by_pid.get(p.pid))]
    top = rows[0]
    leaking = {r["pid"] for r in rows}
    diff = _differential(run, top, leaking)
    cause = diff["cause"]
    who = names[top["pid"]]
    others = len(rows) - 1
    limit = top["fd_limit"]
    title = (
        f"{who[0].upper()}{who[1:]} leaks file descriptors: {top['fds_first']}"
        + (" (its parent's, read before the fork)" if top["fds_first_inherited"] else "")
        + f" -> {top['fds_peak']} open over "
        f"{top['seconds']:g} s (+{_rate(top['fds_per_s'])}/s)"
        + (f", and {others} other process{'es' if others > 1 else ''} alike" if others else "")
    )
    if hit:
        plural = len(hit) > 1
        title += (
            f"; {' and '.join(names[pid] for pid in hit)} reached {'their' if plural else 'its'} limit of "
            f"{limit:,} open files ({'each ' if plural else ''}RLIMIT_NOFILE)"
            + (" as `Too many open files` was raised" if emfile else "")
        )
    elif limit and top["seconds_to_limit"] is not None:
        title += f"; at this rate it reaches its limit of {limit:,} in ~{_duration(top['seconds_to_limit'])}"
    opened_at = _opened_at(run) if cause in (CAUSE_FILES, CAUSE_UNKNOWN) else None
    opening = _NAMED_PATH.search(emfile or "")
    if cause == CAUSE_KEPT_BATCHES:
        title += (
            f"; {diff['by_kind'][KIND_TORCH_SHM]} of {diff['targets_read']} are torch shared-memory storages: the "
            "loop keeps the batches it receives"
        )
    elif cause in (CAUSE_SOCKETS, CAUSE_PIPES):
        kind = _CAUSE_KIND[cause]
        title += f"; {diff['by_kind'][kind]} of {diff['targets_read']} are {KIND_WORDS[kind]}"
    elif top["fd_targets"]:
        title += f"; most point to {top['fd_targets'][0]['target']}"
    elif opening:  # too fast to read the targets: the file the refused open named
        title += f"; it was opening {opening.group(1)} when refused"
    detail = (
        "The count of /proc/PID/fd, read through the run, rose without falling back: something opens files (or "
        f"sockets) and never closes them. {_targets_text(top)}"
    )
    if diff["by_kind"]:
        detail += f" By kind: {_kinds_text(diff)}."
    if cause == CAUSE_KEPT_BATCHES:
        detail = (
            f"The count of /proc/PID/fd of {who}, read through the run, rose without falling back, and "
            f"{diff['by_kind'][KIND_TORCH_SHM]} of the {diff['targets_read']} open when their targets were read are "
            f"torch's shared-memory storages ({_kinds_text(diff)}): {KEPT_BATCHES_CAUSE}. {_targets_text(top)}"
        )
        if diff["fds_per_batch"] is not None:
            detail += (
                f" It rose by {diff['fds_per_batch']:g} per batch received ({top['fds_peak'] - top['fds_first']} over "
                f"{diff['batches_received']} batches"
                + (f" of {diff['tensors_per_batch']} tensors each" if diff["tensors_per_batch"] else "")
                + ")."
            )
    if diff["ruled_out"]:
        detail += f" Ruled out: {'; '.join(diff['ruled_out'])}."
    if opened_at:
        detail += f" The worker was opening one more at {opened_at} when the limit refused it: that code opens them."
    for proc in run.processes:
        counts = [n for _, n in proc.series.values("fds")]
        if proc.role == "main" and proc.pid not in leaking and counts and cause != CAUSE_FILES:
            detail += f" The main process held {min(counts)} to {max(counts)} throughout: the leak is not its."
    if hit and not emfile:
        detail += (
            f" {' and '.join(names[pid] for pid in hit).capitalize()} reached the limit: its next open fails with "
            "`Too many open files` (EMFILE), though the run's output kept no such line; a worker that dies of it "
            "reaches the loop as torch's EOFError or a lost connection."
        )
    if emfile and cause == CAUSE_KEPT_BATCHES:
        detail += f" The run's error says `{emfile}`" + (
            ": torch raises it in the main process when it cannot take the next batch's descriptor off a "
            "worker's queue, the limit reached by the storages it holds."
            if re.search(MAIN_OUT_OF_DESCRIPTORS, emfile)
            else ", where the next descriptor was asked for."
        )
    elif emfile:
        detail += (
            f" The run's error says `{emfile}`: "
            + (
                f"it came from {' and '.join(names[pid] for pid in hit)}, whose descriptors reached the limit"
                if hit
                else "the leak is the likely cause, though no process was read near its limit"
            )
            + ", wherever it surfaced (torch's tensor sharing, a read, the main process's EOFError are where the "
            "next descriptor was asked for, not the cause)."
        )
    if cause == CAUSE_KEPT_BATCHES:
        fix = KEPT_BATCHES_FIX
    elif cause in _CAUSE_FIX:
        fix = _CAUSE_FIX[cause]
    else:
        fix = (
            (f"At {opened_at}: c" if opened_at else "C")
            + "lose what `__getitem__` (or the code it calls) opens: `with open(path, 'rb') as f:`, or keep at most "
            "one handle per file in a bounded cache that closes what it evicts. A handle kept on `self` in a worker "
            "is never closed by the parent. Raising the limit (`ulimit -n`) only delays the failure."
        )
    evidence: Evidence = {
        "leaking": cast("list[FdLeakRow]", rows),
        "hit_limit_pids": hit,
        "error": emfile,
        "opened_at": opened_at,
        **diff,
    }
    severity = "error" if hit else "warning"
    loader_id = next((p.loader_id for p in run.processes if p.pid == top["pid"]), None)
    return [Finding("fd-leak", severity, title, detail, fix, evidence, loader_id=loader_id)]


def _rate(per_s: float) -> str:
    return f"{per_s:.0f}" if per_s >= 10 else f"{per_s:.2g}"


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def explains(cause: Finding, symptom: Finding) -> str | None:
    """Descriptors that reached the limit explain every `Too many open files`, and the main process's EOFError (or
    lost connection) as torch's next receive fails for want of a descriptor."""
    if cause.code != "fd-leak":
        return None
    error = str(symptom.evidence.get("error") or symptom.evidence.get("message") or "")
    leaking = [row.get("pid") for row in cause.evidence.get("leaking") or [] if isinstance(row, dict)]
    hit = cause.evidence.get("hit_limit_pids") or []
    if (
        symptom.code == "worker-error"
        and OUT_OF_DESCRIPTORS.search(error)
        and symptom.evidence.get("pid") in leaking + hit
    ):
        return f"the `Too many open files` of {worker_name(symptom)} (worker-error)"
    if not hit:
        return None
    dropped_for_descriptors = symptom.code == "batch-dropped" and OUT_OF_DESCRIPTORS.search(
        str(symptom.evidence.get("error") or "")
    )
    if dropped_for_descriptors and any(pid in hit for pid in symptom.evidence.get("pids") or []):
        return "the batches its workers could not send (batch-dropped)"
    sent = str(symptom.evidence.get("send_error") or "")
    if (
        symptom.code == "worker-hang"
        and symptom.evidence.get("cause") == "batch-lost"
        and symptom.evidence.get("pid") in hit
        and (not sent or OUT_OF_DESCRIPTORS.search(sent))  # an h5py handle in the batch is not the descriptors'
    ):
        # passing a batch's tensor to the loop takes a descriptor in the worker: at its limit, the batch is dropped
        return f"the lost batch of {worker_name(symptom)} (worker-hang)"
    if symptom.code == "script-error" and (
        OUT_OF_DESCRIPTORS.search(error) or symptom.evidence.get("type") in ("EOFError", "ConnectionResetError")
    ):
        return f"the script's {symptom.evidence.get('type') or 'exception'} (script-error)"
    return None
