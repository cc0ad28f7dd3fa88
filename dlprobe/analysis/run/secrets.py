"""Credentials kept out of the report, at its input boundary (`model.load_run`).

dlprobe redacts command lines and messages as it records them (dlprobe/redact.py). A run directory written before
that, by another tool, or edited since may still hold them: what the report takes from it (meta.json's command
line, the events' argv and exception messages, attach.json's processes, stderr.log's tail) is redacted again here,
so the pages, report.json, trace.json and the terminal never show a credential. The script's own output files are
left as the script wrote them."""

from __future__ import annotations

from typing import Any, cast

from dlprobe.redact import redact_argv, redact_fields, redact_text
from dlprobe.rundir.schema import AttachRecord, Meta

# Event fields that hold a command line; those that hold free text from the script (exceptions it raised) are
# dlprobe/redact.py's TEXT_FIELDS, redacted as the events are written and again here, at any depth.
_ARGV_FIELDS = ("argv",)


def _argv(value: Any) -> Any:
    return redact_argv(value) if isinstance(value, list) and all(isinstance(v, str) for v in value) else value


def _text(value: Any) -> Any:
    return redact_text(value) if isinstance(value, str) else value


def redact_meta(meta: Meta) -> Meta:
    out: dict[str, Any] = dict(meta)
    script = out.get("script")
    if isinstance(script, str):
        out["script"] = redact_argv([script])[0]
    for key in ("argv", "command"):
        if key in out:
            out[key] = _argv(out[key])
    return cast(Meta, out)


def redact_events(events: list[dict[str, Any]]) -> None:
    """In place: only the few fields that carry a command line or a message are looked at."""
    for i, ev in enumerate(events):
        for key in _ARGV_FIELDS:
            if key in ev:
                ev[key] = _argv(ev[key])
        redacted = redact_fields(ev)
        if redacted is not ev:
            events[i] = redacted


def redact_attach(record: AttachRecord | None) -> AttachRecord | None:
    if not record:
        return record
    out: dict[str, Any] = dict(record)
    rerun, notes, processes = out.get("rerun"), out.get("notes"), out.get("processes")
    if isinstance(rerun, str):
        out["rerun"] = redact_text(rerun)
    if isinstance(notes, list):
        out["notes"] = [_text(note) for note in notes]
    if isinstance(processes, list):
        out["processes"] = [
            {**p, "cmdline": _argv(p.get("cmdline"))} if isinstance(p, dict) and "cmdline" in p else p
            for p in processes
        ]
    return cast(AttachRecord, out)


def redact_log_text(text: str | None) -> str | None:
    """stderr's tail as the page shows it: token shapes and credential options, the rest as written."""
    return redact_text(text) if text else text
