"""The sequence-length mix in its two spellings: the compact string ``[{512/128@0.7},...]`` that
``comparison.controls.fixed`` may use and the list of ``{inputTokens, outputTokens, weight}`` of
``workload.sequenceLengthMix``, read to (input, output, weight) tuples and compared by value."""

from __future__ import annotations

import math
import re
from typing import Any

from benchrun.spec.docaccess import get, is_number


# Each part matches one way only (no nested or overlapping repeats): a megabyte of digits or
# blanks is refused in linear time instead of backtracking for hours.
_MIX_ENTRY = re.compile(r"\{\s*(\d+)\s*/\s*(\d+)\s*@\s*((?:\d+(?:\.\d+)?|\.\d+)(?:[eE][-+]?\d+)?)\s*\}")


def parse_compact_mix(text: str) -> list[tuple[int, int, float]]:
    """``"[{512/128@0.7},{1024/256@0.3}]"`` → ``[(512, 128, 0.7), (1024, 256, 0.3)]``; ValueError if malformed."""
    body = text.strip()
    if not (body.startswith("[") and body.endswith("]")):
        raise ValueError("must be enclosed in [ ]")
    body = body[1:-1].strip()
    if not body:
        raise ValueError("holds no entries")
    out = []
    for part in re.split(r",(?=\s*\{)", body):
        m = _MIX_ENTRY.fullmatch(part.strip())
        if not m:
            raise ValueError(f"cannot read entry {part.strip()!r}")
        out.append((int(m.group(1)), int(m.group(2)), float(m.group(3))))
    return out


def mix_values(value: Any) -> list[tuple[int, int, float]] | None:
    """The list form of a mix as (input, output, weight) tuples, or None if malformed."""
    if not isinstance(value, list):
        return None
    out = []
    for entry in value:
        i, o, w = get(entry, ("inputTokens",)), get(entry, ("outputTokens",)), get(entry, ("weight",))
        if not (isinstance(i, int) and isinstance(o, int) and is_number(w)) or isinstance(i, bool) or isinstance(o, bool):
            return None
        out.append((i, o, float(w)))
    return out


def same_mix(a: list[tuple[int, int, float]], b: list[tuple[int, int, float]]) -> bool:
    return len(a) == len(b) and all(
        x[0] == y[0] and x[1] == y[1] and math.isclose(x[2], y[2], rel_tol=1e-9, abs_tol=1e-12) for x, y in zip(a, b)
    )


def compact_mix(mix: list[tuple[int, int, float]]) -> str:
    """The compact form of ``mix``, each weight to 15 significant digits: two weights :func:`same_mix`
    tells apart (relative 1e-9) print differently (``:g``'s 6 digits printed 0.7 and 0.70000001 alike)."""
    return "[" + ",".join(f"{{{i}/{o}@{w:.15g}}}" for i, o, w in mix) + "]"
