"""The README and docs/ hold together: every relative link reaches a file (and its heading, for a #anchor), every
finding code has its row in docs/findings.md, every command its page, and the README stays a five-minute read."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import typer

from dlprobe.analysis.evidence.schema import EVIDENCE_BY_CODE
from dlprobe.commands.app import app

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
PAGES = [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]
# [text](target) and ![alt](target); a target has no spaces (an optional "title" after a space is not used here)
_LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
_FENCE = re.compile(r"^```.*?^```", re.M | re.S)
_CODE_SPAN = re.compile(r"`[^`\n]*`")


def _prose(text: str) -> str:
    """The text without code blocks and code spans: a `[x](y)` inside them is code, not a link."""
    return _CODE_SPAN.sub("", _FENCE.sub("", text))


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped (hyphens and underscores kept), spaces to '-'."""
    text = heading.strip().lower().replace("`", "")
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    anchors = set()
    for line in _FENCE.sub("", path.read_text()).splitlines():
        match = re.match(r"#{1,6} (.+)", line)
        if not match:
            continue
        slug = _slug(match.group(1))
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        anchors.add(slug if count == 0 else f"{slug}-{count}")
    return anchors


def _links() -> list[tuple[str, str]]:
    return [
        (str(page.relative_to(ROOT)), target)
        for page in PAGES
        for target in _LINK.findall(_prose(page.read_text()))
        if not re.match(r"[a-z]+:", target)  # https:, mailto:: not ours to check
    ]


def test_the_pages_have_links():
    assert len(_links()) >= 50


@pytest.mark.parametrize(("page", "target"), _links())
def test_each_relative_link_reaches_its_file_and_heading(page, target):
    path_part, _, anchor = target.partition("#")
    source = ROOT / page
    path = (source.parent / path_part).resolve() if path_part else source
    assert path.exists(), f"{page} links to {target}: no such file"
    if anchor:
        assert path.suffix == ".md", f"{page} links to {target}: an anchor in a file that is not Markdown"
        assert anchor in _anchors(path), f"{page} links to {target}: no heading with that anchor in {path.name}"


def _triage_codes() -> set[str]:
    """The codes `dlprobe triage` makes (make_finding's first argument, or a code tuple's first string)."""
    text = "\n".join(p.read_text() for p in (ROOT / "dlprobe" / "triage").glob("*.py"))
    return set(re.findall(r'make_finding\(\s*"([a-z][a-z-]+)"', text)) | set(
        re.findall(r'Finding\(\s*"([a-z][a-z-]+)",\s*"(?:error|warning|info)"', text)
    )


def test_every_finding_code_has_its_row_in_docs_findings():
    table_codes = set(re.findall(r"^\| \[?`([a-z][a-z-]+)`", (DOCS / "findings.md").read_text(), re.M))
    codes = set(EVIDENCE_BY_CODE) | _triage_codes()
    assert "collate-error" in codes and "cow-growth" in codes  # both sources were read
    assert sorted(codes - table_codes) == []


def test_every_command_has_its_page_and_its_place_in_the_readme():
    readme = (ROOT / "README.md").read_text()
    commands = sorted(typer.main.get_command(app).commands)  # type: ignore[attr-defined]
    assert "run" in commands and "tune" in commands
    missing = [c for c in commands if not (DOCS / f"{c}.md").exists() or f"dlprobe {c}" not in readme]
    assert missing == []


def test_the_readme_is_a_five_minute_read():
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) < 300
    assert len(text.split()) < 3000
