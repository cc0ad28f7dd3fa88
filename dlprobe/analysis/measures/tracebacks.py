"""What a worker's traceback and torch's death message say, read as data: the exception a traceback ends with, the
user's innermost frame, the batch entry a collate error names, and the signal torch names. The worker-death,
descriptor and shared-handle families, and `dlprobe triage`, all read them here."""

from __future__ import annotations

import re
from typing import Any

from dlprobe.frames import is_user_file
from dlprobe.torch_text import TORCH_SIGNALS

_TB_FILE = re.compile(r'File "([^"]+)", line (\d+), in (\S+)')
# torch's collate errors that name the entry of the batch at fault (torch.stack's, through default_collate):
# sizes differ from entry 0's at entry K; entry K is not a tensor.
_STACK_SIZES = re.compile(
    r"stack expects each tensor to be equal size, but got (?P<first>\[[^\]]*\]) at entry 0 "
    r"and (?P<other>\[[^\]]*\]) at entry (?P<entry>\d+)"
)
_STACK_TYPE = re.compile(r"expected Tensor as element (?P<entry>\d+) in argument 0, but got (?P<other>\w+)")


def signal_cause(torch_text: str) -> str:
    """The worker-killed cause for the signal torch names (oom for SIGKILL before any evidence is weighed)."""
    return TORCH_SIGNALS.get(torch_text, ("", "signal"))[1]


def signal_name(torch_text: str) -> str:
    """SIGKILL for torch's "Killed"; an unknown text is kept as it is."""
    return TORCH_SIGNALS.get(torch_text, (torch_text, ""))[0]


def exception_text(message: str) -> str:
    """The exception a traceback ends with, every line of it (a message can span lines: webdataset's does)."""
    lines = message.strip().splitlines()
    # Frames and their source lines are indented; the exception starts after the last of them.
    last_frame = max((i for i, line in enumerate(lines) if line.startswith(" ")), default=-1)
    return "\n".join(line.rstrip() for line in lines[last_frame + 1 :] if line.strip())


def collate_entry(message: str) -> dict[str, Any] | None:
    """The entry of the batch a collate error names ({"entry": K, "first": ..., "other": ...}), or None."""
    match = _STACK_SIZES.search(message) or _STACK_TYPE.search(message)
    if match is None:
        return None
    return {key: int(value) if key == "entry" else value for key, value in match.groupdict().items()}


def user_frame_from_traceback(message: str) -> str | None:
    """The innermost frame of the user's code in a traceback: 'function (file.py:line)'."""
    frames = [m for m in _TB_FILE.finditer(message)]
    for match in reversed(frames):
        path = match.group(1)
        if not is_user_file(path):
            continue
        return f"{match.group(3)} ({path.rsplit('/', 1)[-1]}:{match.group(2)})"
    return None
