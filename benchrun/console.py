"""The one way the CLI makes a rich console: wide enough for tables when piped to a file; the
one way a measured number is printed for a person (``number``)."""

from __future__ import annotations

import math
import sys
from typing import Any


def console(*, stderr: bool = False) -> Any:
    """A rich Console; a pipe or file gets 200 columns instead of rich's default 80."""
    from rich.console import Console

    stream = sys.stderr if stderr else sys.stdout
    return Console(highlight=False, soft_wrap=True, stderr=stderr,
                   width=None if stream.isatty() else 200)


def number(v: float) -> str:
    """A measured value as a person reads it: 4 significant digits, grouped from 1,000 up with 5 or
    more (``.4g`` printed 427,912 tok/s as 4.279e+05 and 9999.78 as 1e+04), "∞" and "nan" as such.
    The CLI's tables, the report and the playbooks share it."""
    if math.isnan(v):
        return "nan"
    if math.isinf(v):
        return "∞" if v > 0 else "-∞"
    if 1e3 <= abs(v) < 1e12:
        return f"{v:,.{max(0, 4 - int(math.floor(math.log10(abs(v)))))}f}"
    return f"{v:.4g}"
