"""The one exception type for errors a user can cause (bad spec, bad path, missing tool)."""

from __future__ import annotations


class BenchrunError(Exception):
    """A user-caused error: the message names the field or file and the fix.

    The CLI prints it as one line and exits non-zero (``exit_code``); bugs still raise
    their own exception types and keep their tracebacks.
    """

    exit_code: int = 1

    def __init__(self, message: str, *, exit_code: int | None = None) -> None:
        super().__init__(message)
        if exit_code is not None:
            self.exit_code = exit_code
