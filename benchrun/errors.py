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


def check_range(value: float, option: str, low: float, high: float) -> float:
    """``value`` when it is a finite number in [low, high], else a BenchrunError naming ``option`` (a command
    line's ``--grace nan`` or ``--expire-days 1e308`` passed typer's bounds: NaN compares false with every
    bound, and inf is a number; they hung a cancel, overflowed a date, or printed a NaN into JSON)."""
    import math

    if not (isinstance(value, (int, float)) and math.isfinite(value) and low <= value <= high):
        raise BenchrunError(f"{option} {value!r} must be a number from {low:g} to {high:g}")
    return value
