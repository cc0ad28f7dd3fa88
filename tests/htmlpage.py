"""Reads a report.html back with the stdlib's HTML parser: balanced tags, no script, no network load, every table
in a scrolling box, its codes."""

from __future__ import annotations

import re
from html.parser import HTMLParser
from pathlib import Path

VOID = {"meta", "br", "img", "input", "link", "hr", "col", "wbr", "source", "area", "base", "embed", "track"}
PLANT = "<script>alert(1)</script>"


class PageCheck(HTMLParser):
    """Collects what a page must not have (scripts, loads, handlers, unbalanced tags) and what it must (codes)."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.stack: list[str] = []
        self.scrolling: list[bool] = []  # per open element: is it a horizontally scrolling box (div.scroll)?
        self.unboxed_tables = 0
        self.unbalanced: list[str] = []
        self.scripts = 0
        self.external: list[str] = []
        self.codes: set[str] = set()
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in ("script", "iframe", "object", "embed", "img", "link"):
            self.scripts += 1
        for name, value in attrs:
            if name in ("src", "href", "action", "xlink:href", "srcset", "formaction") and value:
                self.external.append(value)
            if name.startswith("on"):
                self.external.append(f"{name}={value}")
            if name == "data-code" and value:
                self.codes.add(value)
        if tag == "table" and not any(self.scrolling):
            self.unboxed_tables += 1
        if tag not in VOID:
            self.stack.append(tag)
            classes = next((v or "" for n, v in attrs if n == "class"), "").split()
            self.scrolling.append(tag == "div" and "scroll" in classes)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.handle_starttag(tag, attrs)
        if tag not in VOID:
            self.stack.pop()
            self.scrolling.pop()

    def handle_endtag(self, tag: str) -> None:
        if not self.stack or self.stack[-1] != tag:
            self.unbalanced.append(f"</{tag}> while open: {self.stack[-3:]}")
            return
        self.stack.pop()
        self.scrolling.pop()

    def handle_data(self, data: str) -> None:
        self.text.append(data)

    @property
    def all_text(self) -> str:
        return "".join(self.text)


def parse_page(page: str) -> PageCheck:
    """The parsed page, after asserting it is well formed, runs nothing and loads nothing."""
    check = PageCheck()
    check.feed(page)
    check.close()
    assert not check.unbalanced, check.unbalanced[:3]
    assert not check.stack, f"tags left open: {check.stack}"
    assert check.scripts == 0, "the page must hold no script, frame, object or image element"
    assert not check.external, check.external
    assert not re.search(r"url\(|@import", page), "the style must load nothing"
    assert "default-src 'none'" in page, "the Content-Security-Policy must forbid network loads"
    # a wide table scrolls inside its own box; outside one it makes the whole page scroll sideways
    assert check.unboxed_tables == 0, f"{check.unboxed_tables} table(s) outside a <div class=scroll>"
    return check


def read_page(run_dir: Path, codes: list[str] | None = None) -> PageCheck:
    """report.html of a run directory, checked, with every finding code of its report.json present as a card."""
    import json

    check = parse_page((run_dir / "report.html").read_text(encoding="utf-8"))
    report = json.loads((run_dir / "report.json").read_text())
    assert {f["code"] for f in report["findings"]} == check.codes
    for code in codes or []:
        assert code in check.codes, f"{code} not on the page: {sorted(check.codes)}"
    return check
