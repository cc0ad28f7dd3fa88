"""User-facing errors: one message, one hint, one exit code, never a traceback."""

from __future__ import annotations

USAGE_EXIT_CODE = 2


class DlprobeError(Exception):
    """A mistake the user can fix; the CLI prints it as `error: ...` plus a hint and exits."""

    def __init__(self, message: str, hint: str = "", exit_code: int = USAGE_EXIT_CODE) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint
        self.exit_code = exit_code
