"""The consoles every command writes to, and the one way dlprobe prints its own `error:`/`hint:` lines.

Text that came from a run (the script's output, an exception message, a path, a dataset's repr) reaches the terminal
only through `SafeConsole`: control characters in it are shown escaped (`\\x1b`), never sent raw, so a run cannot set
the window title, clear the screen or hide a link in what dlprobe prints; strings are not read as rich markup unless
a print says so (`markup=True`, dlprobe's own lines, with the run's text in them `escape`d)."""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from rich.console import Console, ConsoleOptions, RenderableType
from rich.markup import escape
from rich.segment import Segment
from rich.text import Span, Text

LOG_WIDTH = 120  # logs and CI: wide enough that tables do not wrap

# C0 but newline and tab, DEL, C1: what a terminal acts on rather than prints.
_CONTROL_CODES = (*range(0x00, 0x09), *range(0x0B, 0x20), 0x7F, *range(0x80, 0xA0))
_CONTROLS = {c: f"\\x{c:02x}" for c in _CONTROL_CODES}
_CONTROL = re.compile("[" + "".join(re.escape(chr(c)) for c in _CONTROL_CODES) + "]")


def escape_controls(text: str) -> str:
    """`text` with every control character a terminal would act on written as `\\xNN`; newline and tab kept."""
    return text.translate(_CONTROLS)


def escaped_text(text: Text) -> Text:
    """A copy of `text` with its control characters escaped, its styles kept on the pieces around them."""
    found = list(_CONTROL.finditer(text.plain))
    if not found:
        return text
    out = text.blank_copy()
    for piece in text.divide(sorted({i for m in found for i in (m.start(), m.end())})):
        if _CONTROL.fullmatch(piece.plain):
            shown = escape_controls(piece.plain)
            piece = Text(shown, spans=[Span(0, len(shown), span.style) for span in piece.spans])
        out.append_text(piece)
    return out


class SafeConsole(Console):
    """A rich Console whose printed text never carries a control character or a hyperlink of its own: rich's
    styling and cursor control (its `control` segments) are the only sequences it writes. Text is escaped before it
    is laid out (so a table wraps what it shows), and each segment is checked again after."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("markup", False)
        kwargs.setdefault("highlight", False)
        super().__init__(*args, **kwargs)

    def render(self, renderable: RenderableType, options: ConsoleOptions | None = None) -> Iterable[Segment]:
        if isinstance(renderable, str):
            renderable = escape_controls(renderable)
        elif isinstance(renderable, Text):
            renderable = escaped_text(renderable)
        for segment in super().render(renderable, options):
            if segment.control:
                yield segment
                continue
            text, style = segment.text, segment.style
            if style is not None and style.link:  # an OSC 8 link: dlprobe prints none, so one came from a run
                style = style.update_link(None)
            yield Segment(escape_controls(text), style)


def _console(stderr: bool) -> Console:
    console = SafeConsole(stderr=stderr)
    if not console.is_terminal:
        console.width = LOG_WIDTH
    return console


def err_console() -> Console:
    """dlprobe's own output next to a running script: stderr, so the script's stdout stays the script's."""
    return _console(stderr=True)


def out_console() -> Console:
    """The product of a command that runs no script (report, triage, scan's summary): stdout."""
    return _console(stderr=False)


def print_error(message: str, hint: str = "") -> None:
    console = err_console()
    # escape: messages quote user text such as "[tool.dlprobe]", which is not markup
    console.print(f"[bold red]error:[/] {escape(message)}", soft_wrap=True, markup=True)
    if hint:
        console.print(f"[bold]hint:[/] {escape(hint)}", soft_wrap=True, markup=True)
