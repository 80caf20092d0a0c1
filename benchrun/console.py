"""The one way the CLI makes a rich console: wide enough for tables when piped to a file."""

from __future__ import annotations

import sys
from typing import Any


def console(*, stderr: bool = False) -> Any:
    """A rich Console; a pipe or file gets 200 columns instead of rich's default 80."""
    from rich.console import Console

    stream = sys.stderr if stderr else sys.stdout
    return Console(highlight=False, soft_wrap=True, stderr=stderr,
                   width=None if stream.isatty() else 200)
