"""What crosses the fork: files and sockets the dataset opened in the parent, inherited by every forked worker."""

from __future__ import annotations

import re
from typing import Any

from dlprobe.analysis.evidence.finding import Finding
from dlprobe.analysis.evidence.schema import Evidence
from dlprobe.analysis.findings.common import same_loader, worker_name
from dlprobe.analysis.measures.fork_ties import library, tied_error
from dlprobe.analysis.measures.loop_timing import events_of
from dlprobe.analysis.measures.tracebacks import exception_text
from dlprobe.analysis.run.model import LoaderRecord, RunData
from dlprobe.rundir.schema import EV_FORK_HANDLES, EV_SAMPLE_CHECK, SAMPLE_CHECK_FAILS_ANY, SAMPLE_CHECK_LOADS
from dlprobe.torch_text import caught_in_worker_process


def _worker_errors(loader: LoaderRecord) -> list[dict[str, Any]]:
    return [e for e in loader.errors if caught_in_worker_process(str(e.get("message") or ""))]


def _tied_error(error: dict[str, Any], handles: list[dict[str, Any]]) -> str | None:
    return tied_error(
        f"{error.get('message') or ''}\n{error.get('cause') or ''}", str(error.get("type") or ""), handles
    )


def _tied_mappings(errors: list[dict[str, Any]], mapped: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The mapped data files a worker's error names, by path or by the attribute that holds the mapping."""
    texts = [f"{e.get('message') or ''}\n{e.get('cause') or ''}" for e in errors]
    return [
        m
        for m in mapped
        if any(
            m["path"] in t or (m.get("attribute") and re.search(re.escape(m["attribute"]) + r"\b", t)) for t in texts
        )
    ]


def _checks(run: RunData, loader_id: int) -> list[dict[str, Any]]:
    """The loader's sample checks whose index loaded alone, or failed like an index the worker had loaded: the
    failure was not the sample's (analysis/findings/deaths/sample_checks.py)."""
    return [ev for ev in run.events if ev.get("ev") == EV_SAMPLE_CHECK and ev.get("loader") == loader_id
            and ev.get("outcome") in (SAMPLE_CHECK_LOADS, SAMPLE_CHECK_FAILS_ANY)]  # fmt: skip


def _check_text(check: dict[str, Any]) -> str:
    index = check.get("index")
    if check.get("outcome") == SAMPLE_CHECK_LOADS:
        return f"dataset[{index}], the index it failed on, loads when dlprobe loads it again alone"
    return (f"dataset[{index}] fails alone, and so does dataset[{check.get('control_index')}], which the worker had "
            "loaded fine: every load fails in a process forked from the parent")  # fmt: skip


def _error_name(error: dict[str, Any]) -> str:
    """The worker's exception as its traceback ends: `zlib.error`, not torch's bare `error`."""
    last = exception_text(str(error.get("message") or "")).split("\n", 1)[0]
    name = last.split(":", 1)[0].strip()
    return name if name and " " not in name else str(error.get("type") or "an error")


def _describe(h: dict[str, Any]) -> str:
    what = "socket" if h.get("kind") == "socket" else str(h.get("target"))
    if h.get("kind") == "socket" and str(h.get("via_owner") or "").startswith("ssl."):
        what = "a TLS socket"
    if h.get("kind") == "mapped":
        what = f"memory-mapped {what}"
    if h.get("via"):  # a socket deep inside the object the dataset holds: a session's pooled connection
        what += f" of a pooled connection, at `{h['via']}`"
    return f"`{h['attribute']}` ({h['owner']}: {what})"


def find_shared_handles(run: RunData) -> list[Finding]:
    """shared-handle: the dataset opened a file, a database or a connection before the workers forked."""
    findings = []
    for loader in run.loaders:
        if loader.start_method != "fork" or not loader.config.get("num_workers"):
            continue
        events = events_of(run, EV_FORK_HANDLES, loader.loader_id)
        if not events:
            continue
        handles: list[dict[str, Any]] = [h for h in events[0].get("handles") or [] if isinstance(h, dict)]
        mapped: list[dict[str, Any]] = [m for m in events[0].get("mapped") or [] if isinstance(m, dict)]
        # A mapped file is shared page by page (no offset, no library state): it is a suspect only where a worker's
        # error names it (its path, or the attribute that maps it), and then it is handled as a handle is.
        tied_maps = _tied_mappings(_worker_errors(loader), mapped)
        handles += [{"kind": "mapped", "target": m["path"], "attribute": m.get("attribute") or m["path"],
                     "owner": m.get("owner") or "mmap", "held_by": "mapping"} for m in tied_maps]  # fmt: skip
        if not handles:
            continue
        attributes = list(dict.fromkeys(h["attribute"] for h in handles))
        libraries = list(dict.fromkeys(library(h["owner"]) for h in handles))
        first = attributes[0]
        errors = _worker_errors(loader)
        tied = next(((e, why) for e in errors if (why := _tied_error(e, handles))), None)
        checks = _checks(run, loader.loader_id)
        check = next((c for c in checks if tied is None or c.get("exception") == tied[0].get("type")), None)
        if tied is None and check is not None:  # a worker failed, not on the sample: the shared handle first
            error = next((e for e in errors if e.get("type") == check.get("exception")), None)
            if error is not None:
                tied = (error, f"{_check_text(check)}")
        n = int(loader.config.get("num_workers") or 0)
        held = "; ".join(_describe(h) for h in handles[:6])
        title = (
            f"Loader {loader.loader_id}'s dataset opened {', '.join(f'`{a}`' for a in attributes[:3])} "
            f"({', '.join(libraries)}) before its {n} workers forked: they all share "
            f"{'its' if len(handles) == 1 else 'the same'} open descriptor{'s' if len(handles) > 1 else ''}"
        )
        detail = (
            f"As the workers forked, the dataset held {held}. A forked worker inherits the parent's open file "
            "description: one file offset, one set of locks and the library's in-memory state, read and moved by "
            "every worker at once. Reads then fail or return the wrong bytes at whatever index a worker was on, a "
            "different one each run."
        )
        if any(h.get("kind") == "socket" for h in handles):
            detail += (
                " A connection is one byte stream (and, over TLS, one record counter): every worker writes its "
                "requests into it and reads whichever reply comes, and the second to use a TLS connection replays "
                "the first's record numbers, which the server refuses."
            )
        untied = [m for m in mapped if m not in tied_maps]
        if untied:
            maps = ", ".join(
                f"{m['path']} ({m['kib'] / 1024:.1f} MiB"
                + (f", `{m['attribute']}`" if m.get("attribute") else "")
                + ")"
                for m in untied[:4]
            )
            detail += (
                f" It also had {len(untied)} data file{'s' if len(untied) > 1 else ''} memory-mapped ({maps}): "
                "mappings are shared page by page, with no offset, and no error of this run names them."
            )
        severity = "info"
        if tied is not None:
            error, why = tied
            worker = caught_in_worker_process(str(error.get("message") or ""))
            severity = "warning"
            title += f"; worker {worker[1] if worker else '?'} failed with {_error_name(error)}"
            detail += (
                f" The run failed in a worker with {_error_name(error)} ({why}): look at the shared handle before the "
                "sample the worker was loading"
                + (f"; {_check_text(check)}, so the sample is not at fault." if check is not None
                   else "; the same index most likely loads when read alone.")
            )  # fmt: skip
        else:
            detail += " Nothing failed on this run; the sharing makes failures a matter of timing."
        use = "`__iter__`" if loader.dataset.get("iterable") else "`__getitem__`"
        fix = (
            f"Open it in each worker, not in `__init__`: keep the path in `__init__`, set `{first} = None`, and open "
            f"it on first use in {use} (`if {first} is None:` open it as `__init__` did; key it by `os.getpid()` "
            "where the parent uses it too, so each process opens its own), or in a "
            "`worker_init_fn` (`torch.utils.data.get_worker_info().dataset`). Or start the workers with "
            "`multiprocessing_context='forkserver'` (or 'spawn') and open it after they start."
        )
        evidence: Evidence = {
            "handles": handles,
            "mapped": mapped,
            "attributes": attributes,
            "libraries": libraries,
            "num_workers": n,
            "error_type": tied[0].get("type") if tied else None,
            "tied_by": tied[1] if tied else None,
            "tied_index": check.get("index") if check is not None and tied else None,
            "tied_index_alone": check.get("outcome") if check is not None and tied else None,
        }
        findings.append(Finding("shared-handle", severity, title, detail, fix, evidence, loader_id=loader.loader_id))
    return findings


# A worker's error that is not the sample's (it loads alone, fails like every index, or was not checked).
_NOT_THE_SAMPLE = ("loads", "fails-any", "unverified", None)


def explains(cause: Finding, symptom: Finding) -> str | None:
    """A handle the workers share, tied to a worker's error, explains that error when the sample is not at fault; and
    a worker hung reading that very descriptor (the same socket or pipe inode) waits on what they share: another
    worker took the reply it waits for."""
    if cause.code != "shared-handle" or not same_loader(cause, symptom):
        return None
    waited_on = str(symptom.evidence.get("fd_target") or "")
    # Sockets and pipes only: the same inode is the same connection; a path read anew may be a hung mount's.
    holders: dict[Any, Any] = {}
    for handle in cause.evidence.get("handles") or []:
        if isinstance(handle, dict):
            holders.setdefault(handle.get("target"), handle.get("attribute"))  # the first object that holds it
    if symptom.code == "worker-hang" and waited_on.startswith(("socket:[", "pipe:[")) and waited_on in holders:
        held_by = f"`{holders[waited_on]}`" if holders[waited_on] else "the descriptor they share"
        return f"the hang of {worker_name(symptom)} reading {held_by} (worker-hang)"
    if not cause.evidence.get("error_type"):
        return None
    if (
        symptom.code == "worker-error"
        and symptom.evidence.get("sample_alone") in _NOT_THE_SAMPLE
        and symptom.evidence.get("exception") == cause.evidence.get("error_type")
    ):
        raised = str(symptom.evidence.get("error") or "").split(":", 1)[0].strip()  # zlib.error, not torch's `error`
        name = raised if raised and " " not in raised else symptom.evidence.get("exception")
        return f"the {name} of {worker_name(symptom)} (worker-error)"
    return None
