"""Where the program is in a suite's command line: a leaf the spec rules, the suite registry and
the launch plan share (it imports nothing of benchrun, so none of them forms a circle through it)."""

from __future__ import annotations

import re

# the name in a leading `env NAME=value`, as a suite's env: map spells it (never a placeholder)
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\Z")
_ENV_OPTIONS_WITH_VALUE = frozenset({"-u", "--unset", "-C", "--chdir"})


def command_index(argv: list[str] | tuple[str, ...]) -> int | None:
    """Where the program is in ``argv``: 0, or after a leading ``env [options] NAME=value ...``;
    None when an env(1) option it does not know makes that unclear (nothing is resolved then)."""
    if not argv or argv[0] not in ("env", "/usr/bin/env", "/bin/env"):
        return 0 if argv else None
    i = 1
    while i < len(argv):
        word = argv[i]
        if word in _ENV_OPTIONS_WITH_VALUE:
            i += 2
        elif word in ("-i", "--ignore-environment", "-", "--"):
            i += 1
        elif word.startswith("-"):
            return None
        elif "=" in word:
            i += 1
        else:
            return i
    return None
