"""torchelastic's error file (TORCHELASTIC_ERROR_FILE): the shape torch's ErrorHandler writes and the agent reads,
for the two sides that write a rank's DataLoader cause into it: the dying rank itself (in_training/elastic_error.py,
a worker's death) and the supervisor (supervisor/hang/elastic_hang.py, a hang it stops the rank for).

The agent reads a failed rank's file after the rank exits, takes the failure with the smallest
`extraInfo.timestamp` (whole seconds, a string) as "Root Cause (first observed failure)" and prints its
`extraInfo.py_callstack` (else `message`)."""

from __future__ import annotations

import re
from typing import Any

from dlprobe.frames import is_probe_file, is_remedy_file

ERROR_FILE_ENV = "TORCHELASTIC_ERROR_FILE"  # set by torchelastic's agent for each rank it starts
_FRAME = re.compile(r'^(?P<indent>\s*)File "(?P<file>[^"]+)", line \d+')


def new_record(summary: str, callstack: str, now: float, extra: dict[str, Any]) -> dict[str, Any]:
    """A file of dlprobe's own, where the script wrote none."""
    info = {"py_callstack": callstack, "timestamp": str(int(now)), "dlprobe": extra}
    return {"message": {"message": summary, "extraInfo": info}}


def enriched(existing: Any, cause: str, verdict: str, extra: dict[str, Any], about: re.Pattern[str] | None) -> Any:
    """The script's own file (its `@record`'s) with dlprobe's cause in front, its traceback and timestamp kept;
    None where it is another shape, was enriched already, or records an error `about` does not match (the
    script's own error, more specific than dlprobe's: left as it is)."""
    message = existing.get("message") if isinstance(existing, dict) else None
    if not isinstance(message, dict) or not isinstance(message.get("extraInfo"), dict):
        return None  # a shape of someone else's: theirs to say
    extra_info = message["extraInfo"]
    if "dlprobe" in extra_info or (about is not None and not about.search(str(message.get("message") or ""))):
        return None
    theirs = extra_info.get("py_callstack")
    theirs = without_probe_frames(theirs) if isinstance(theirs, str) else message.get("message")
    extra_info["py_callstack"] = f"{cause}\n\n{theirs}"
    extra_info["dlprobe"] = extra
    message["message"] = f"dlprobe: {verdict}. {message.get('message')}"
    return existing


def without_probe_frames(callstack: str) -> str:
    """A traceback's text without dlprobe's frames: @record formats the exception inside the script's main(), where
    the hooks' frames (the DataLoader's wrapped next()) are still on it, and torchrun prints what it wrote."""
    out: list[str] = []
    dropping: str | None = None  # the indentation of the dropped frame's File line: its source lines go deeper
    for line in callstack.splitlines(keepends=True):
        frame = _FRAME.match(line)
        if frame:
            path = frame["file"]
            dropping = frame["indent"] if is_probe_file(path) and not is_remedy_file(path) else None
            if dropping is not None:
                continue
        elif dropping is not None and line.strip() and len(line) - len(line.lstrip()) > len(dropping):
            continue  # the dropped frame's source line and its carets
        else:
            dropping = None
        out.append(line)
    return "".join(out)
