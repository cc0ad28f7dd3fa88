"""A worker's error that is shared state, not a sample, from the log alone: an error known to come from a handle
opened before the workers forked (torch_text.FORK_SHARED_ERRORS: lmdb's reader slots, a zip archive's one offset, a
TLS connection's record counter), or one error that hit several indices or workers alike. Neither names an index:
the index is wherever a worker happened to be."""

from __future__ import annotations

import re

from dlprobe.torch_text import fork_shared_error
from dlprobe.triage import scores as S
from dlprobe.triage.candidate import LIKELY, Candidate, make_finding
from dlprobe.triage.patterns import Match

# Numbers in a message (an index, a member's name, an offset): without them, one error at two indices reads alike
_NUMBERS = re.compile(r"\d+")
# What confirms it: the run names the object that crossed the fork and loads the failing index again alone.
CONFIRM = (
    "Run it under `dlprobe run` (below): as the workers fork it walks the dataset's attributes and names the object "
    "that holds a descriptor they will share (`shared-handle`: `self.env`, `self.zf`, `self.session`, its class and "
    "what it holds), and it loads the failing index again alone, which a shared handle's error does not follow."
)
FIX = (
    "Open the handle in each worker, not in `__init__`: keep the path (or URL) in `__init__`, set the attribute to "
    "None, and open it on first use in `__getitem__` (`if self.env is None:`; key it by `os.getpid()` where the "
    "parent uses it too) or in a `worker_init_fn` (`torch.utils.data.get_worker_info().dataset`). Do not skip or "
    "drop the sample: it is not at fault."
)


def alike_key(exception: str, message: str) -> tuple[str, str]:
    """Errors that differ only by their numbers (the index, the member) are one error at several places."""
    return exception, _NUMBERS.sub("N", message)


def _where(wrappers: list[Match]) -> str:
    w = wrappers[0]
    return "\n".join(str(w.fields.get(k) or "") for k in ("raised_in", "frame"))


def shared_state_candidate(exception: str, wrappers: list[Match]) -> Candidate | None:
    """The group's candidate when its error is shared state (a known fork-shared handle's, or alike at several
    indices or workers); None when it reads as one sample's."""
    m = wrappers[0]
    message = str(m.fields.get("original_message") or "")
    workers = sorted({int(w.fields["worker_id"]) for w in wrappers if "worker_id" in w.fields})
    messages = list(dict.fromkeys(str(w.fields.get("original_message") or "") for w in wrappers))
    frame = next((w.fields["frame"] for w in wrappers if "frame" in w.fields), None)
    raised_in = next((w.fields["raised_in"] for w in wrappers if "raised_in" in w.fields), None)
    known = fork_shared_error(f"{exception}: {message}\n{_where(wrappers)}")
    several = len(workers) > 1 or len(messages) > 1
    if known is None and not several:
        return None
    where = f" at {frame}" if frame else ""
    quoted = "; ".join(f"`{t}`" for t in messages[:3])
    plural = "s" if len(workers) > 1 else ""
    alike = (
        f" The same error, with other numbers, was raised {len(wrappers)} times in {len(workers)} worker{plural} "
        f"({quoted}): several indices failing alike are state the workers share, not several bad samples."
        if several
        else ""
    )
    common = {"exception": exception, "message": message or None, "worker_id": m.fields.get("worker_id"),
              "worker_ids": workers if len(workers) > 1 else None, "frame": frame, "raised_in": raised_in,
              "line": m.line, "occurrences": len(wrappers), "confirm": CONFIRM}  # fmt: skip
    if known is not None:
        library, meaning, alternative = known
        title = (f"{exception} in DataLoader worker {m.fields.get('worker_id')}: {library}'s error for a handle "
                 "opened before the workers forked, not a bad sample")  # fmt: skip
        detail = (
            f"`{exception}: {message}` was raised in worker {m.fields.get('worker_id')}{where}. It is {meaning}: "
            "the error a handle opened in the parent (in `__init__`) raises once forked workers use it together, "
            "each moving the one offset, reader slot or connection they all inherited. The index it landed on is "
            f"wherever a worker was, a different one each run.{alike} The other cause of these words is "
            f"{alternative}: loading the failing index alone in a process of its own tells the two apart, and "
            "`dlprobe run` does that and names the object that crossed the fork."
        )
        finding = make_finding("shared-handle", title, detail, FIX, LIKELY, cause="fork-shared-handle",
                               library=library, alternative=alternative, **common)  # fmt: skip
        return Candidate(S.FORK_SHARED_ERROR, m.line, finding)
    title = (f"{exception} in {len(workers)} DataLoader workers at several indices alike: shared state, "
             "not a bad sample") if len(workers) > 1 else (
             f"{exception} at {len(messages)} indices alike in DataLoader worker {m.fields.get('worker_id')}: "
             "shared state, not a bad sample")  # fmt: skip
    detail = (
        f"`{exception}: {message}` was raised{where} and re-raised in the main process.{alike} What every worker "
        "shares or uses up together fails at whatever index each was on: a file, database or connection opened in "
        "`__init__` before the workers forked, or a resource they exhaust together."
    )
    finding = make_finding("worker-error", title, detail, FIX, LIKELY, cause="shared-state", **common)
    return Candidate(S.ERRORS_ALIKE, m.line, finding)
