"""One definition of each torch and OS message dlprobe matches (issue 43): every regular expression that reads one
lives in dlprobe/torch_text.py, so run, triage and the sample check cannot drift apart (the copies once disagreed:
errno 24 alone in one, 23 or 24 in two; torch's "Caught ... in DataLoader worker process N" four times)."""

from __future__ import annotations

import ast
from pathlib import Path

import dlprobe
from dlprobe import torch_text

PACKAGE = Path(dlprobe.__file__).parent
HOME = Path(torch_text.__file__)
# Words of torch's and the OS's messages: a pattern holding one outside the home is a copy.
MESSAGE_WORDS = (
    "Too many open files",
    "Errno 2",
    "DataLoader worker",
    "Caught ",
    "killed by signal",
    "unable to allocate shared memory",
    "unable to write to file",
    "No space left on device",
    "in pin memory thread",
)
PATTERN_CALLS = {"compile", "search", "match", "fullmatch", "finditer", "findall", "sub", "split", "_p"}


def patterns_in(path: Path) -> list[tuple[int, str]]:
    """(line, text) of each string given to a regular-expression call (re.*, the triage catalogue's _p)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if not isinstance(node, ast.Call):
            continue
        name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
        if name not in PATTERN_CALLS:
            continue
        for arg in node.args:
            for const in ast.walk(arg):
                if isinstance(const, ast.Constant) and isinstance(const.value, str):
                    found.append((const.lineno, const.value))
    return found


def copies(root: Path = PACKAGE) -> list[str]:
    return [
        f"{path.relative_to(root.parent)}:{line}: {text[:80]}"
        for path in sorted(root.rglob("*.py"))
        if path != HOME
        for line, text in patterns_in(path)
        if any(word in text for word in MESSAGE_WORDS)
    ]


def test_every_torch_and_os_message_pattern_lives_in_torch_text():
    assert copies() == []


def test_the_check_finds_a_copy(tmp_path):
    # the test above can fail: a module with its own copy of torch's message is named (a copy of the package's
    # layout in tmp_path, so a parallel run of the test above never sees it)
    (tmp_path / "dlprobe" / "analysis").mkdir(parents=True)
    copy = tmp_path / "dlprobe" / "analysis" / "deaths.py"
    copy.write_text('import re\nKILLED = re.compile(r"DataLoader worker \\(pid (\\d+)\\) is killed by signal")\n')
    (tmp_path / "dlprobe" / "quiet.py").write_text('import re\nWORD = re.compile(r"batch")\n')
    assert [c.split(":")[0] for c in copies(tmp_path / "dlprobe")] == ["dlprobe/analysis/deaths.py"]


def test_the_shared_patterns_read_torch_s_own_words():
    assert torch_text.caught_in_worker_process("Caught OSError in DataLoader worker process 2.") == ("OSError", 2)
    assert torch_text.caught_in_worker_process("Caught OSError in DataLoader worker thread 2.") is None
    killed = torch_text.WORKER_KILLED.search("RuntimeError: DataLoader worker (pid 4711) is killed by signal: Killed. ")
    assert killed is not None and (killed["pid"], killed["signal"]) == ("4711", "Killed")
    assert torch_text.OUT_OF_DESCRIPTORS.search("OSError: [Errno 23] Too many open files in system")
    assert torch_text.SHM_FULL.search("RuntimeError: unable to write to file </torch_4711_1>: No space left on device")
