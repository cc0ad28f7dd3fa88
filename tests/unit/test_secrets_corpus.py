"""Every spelling in tests/fixtures/secrets_corpus.txt, through dlprobe/redact.py: the credentials starred, the
look-alikes left byte-identical. A credential found leaking is added there, with the form it must take."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from dlprobe.redact import redact_argv, redact_text

CORPUS = Path(__file__).resolve().parent.parent / "fixtures" / "secrets_corpus.txt"


def _cases() -> list[tuple[int, str, str, str]]:
    cases = []
    for number, line in enumerate(CORPUS.read_text().splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        kind, _, rest = line.partition(": ")
        assert kind in ("text", "argv", "keep"), f"line {number}: {line!r}"
        given, _, expected = rest.partition(" => ") if kind != "keep" else (rest, "", rest)
        assert expected, f"line {number} has no ' => EXPECTED': {line!r}"
        cases.append((number, kind, given.replace("\\n", "\n"), expected.replace("\\n", "\n")))
    return cases


CASES = _cases()


def test_the_corpus_holds_spellings_and_look_alikes() -> None:
    kinds = [kind for _, kind, _, _ in CASES]
    assert kinds.count("text") >= 30 and kinds.count("argv") >= 8 and kinds.count("keep") >= 15


@pytest.mark.parametrize(("number", "kind", "given", "expected"), CASES, ids=[f"line{c[0]}" for c in CASES])
def test_each_spelling(number: int, kind: str, given: str, expected: str) -> None:
    if kind == "argv":
        assert redact_argv(shlex.split(given)) == shlex.split(expected), f"line {number}"
        return
    assert redact_text(given) == expected, f"line {number}"
    if kind == "keep":
        assert redact_argv(given.split(" ")) == given.split(" "), f"line {number}"


def test_events_are_redacted_as_they_are_written_at_any_depth(tmp_path: Path) -> None:
    from dlprobe.in_training.event_log import EventLog

    nested = {"loader": 0, "state": {"error": "OSError: https://u:pw1@h/x?sig=abc", "ok": False}}
    log = EventLog(str(tmp_path))
    log.emit("sample_check", index=5, error_alone="OSError: password = hunter2", reason="DB_PASS=x2", **nested)
    log.emit("probe_error", message="token: y3", notes=["--pwd z4"], argv_like="--pwd keep5")
    log.close()
    text = (tmp_path / "events.jsonl").read_text()
    for secret in ("pw1", "abc", "hunter2", "x2", "y3", "z4"):
        assert secret not in text, secret
    assert '"error_alone":"OSError: password = ***"' in text and '"error":"OSError: https://u:***@h/x?sig=***"' in text
    assert '"argv_like":"--pwd keep5"' in text  # a field that is not free text is not read as text
    assert nested["state"]["error"] == "OSError: https://u:pw1@h/x?sig=abc"  # the caller's dict is not changed


def test_the_copy_of_a_stderr_file_is_redacted_and_its_other_bytes_kept(tmp_path: Path) -> None:
    import os

    from dlprobe.supervisor.stderr_copy import keep_stderr, stderr_origin

    log = tmp_path / "train.log"
    fd = os.open(log, os.O_WRONLY | os.O_CREAT, 0o600)
    origin = stderr_origin(fd)
    os.write(fd, b"\xff\xfe not utf-8\npassword = hunter2\nOSError: https://alice:s3cretpw@db/x?token=abc123\n")
    run = tmp_path / "run"
    run.mkdir()
    kept = keep_stderr(origin, run, fd)
    os.close(fd)
    expected = b"\xff\xfe not utf-8\npassword = ***\nOSError: https://alice:***@db/x?token=***\n"
    assert (run / "stderr.log").read_bytes() == expected and kept["kept_bytes"] == len(expected)
    assert b"hunter2" in log.read_bytes()  # the script's own file is the script's
