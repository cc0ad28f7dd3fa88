"""One line of a message for a title: its first line, cut at a word (never in the middle of a path or a number)."""

from __future__ import annotations


def first_line(text: str, limit: int = 90) -> str:
    line = text.strip().splitlines()[0] if text.strip() else ""
    if len(line) <= limit:
        return line
    cut = line[:limit].rsplit(" ", 1)[0]
    return cut.rstrip(",;:") + " ..."
