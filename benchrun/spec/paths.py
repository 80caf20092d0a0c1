"""Spec paths: ``layers.micro.suites[gemm].env.OMP_NUM_THREADS`` names one field of a BenchmarkRun spec.

A path is relative to ``spec`` (a leading ``spec.`` is accepted). Segments are separated by
dots; an element of a list of named objects (layers, suites) is selected by its ``name``,
written either ``.name`` or ``[name]`` (``layers.micro`` ≡ ``layers[micro]``). Keys under
``env`` and ``parameters`` are ordinary segments, so ``env.X`` works for any variable. A
list of plain values (``args``, ``sizes``) is one field. :func:`flatten` turns a spec into
``{path: value}`` in the canonical form (``layers.<layer>.suites[<suite>].<field>``) that
:mod:`benchrun.stats.gate` compares.
"""

from __future__ import annotations

import re
from typing import Any

# The spec sections the one-variable gate compares field by field (benchrun.stats.gate): what runs
# and how it is measured. A variable under test given as a path must lie in one of them.
GATED_SECTIONS = ("intent", "layers", "workload", "trials", "distributed", "executionPolicy", "observability")

_SEGMENT = re.compile(r"([^.\[\]]+)|\[([^\[\]]+)\]|(\.)")
# The longest path accepted (the model's maxLength of variableUnderTest and allowDifferences entries).
MAX_LENGTH = 512
# A path is a head (an identifier, optionally [name]) followed by units (.segment, optionally
# [name]); a segment after a dot may hold dots and hyphens itself. Each token is matched once, at
# a known offset, by a pattern with no nested or overlapping repeats: the text is read in linear
# time (one regex over the whole path backtracked exponentially on a.a.a...a!).
_HEAD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\[[^\[\]]+\])?")
_UNIT = re.compile(r"\.[A-Za-z0-9_][A-Za-z0-9_.-]*(?:\[[^\[\]]+\])?")


def well_formed(text: str) -> bool:
    """Whether ``text`` has the form of a spec path (a leading ``spec.`` is one more unit)."""
    m = _HEAD.match(text)
    while m is not None and m.end() < len(text):
        m = _UNIT.match(text, m.end())
    return m is not None and ".." not in text


def parse(path: str) -> tuple[str, ...]:
    """The segments of a path (``[x]`` is a segment of its own); ValueError when malformed."""
    text = str(path).strip()
    if len(text) > MAX_LENGTH:
        raise ValueError(f"is {len(text)} characters long; a spec path has at most {MAX_LENGTH}")
    if not text or not well_formed(text):
        raise ValueError(f"{path!r} is not a spec path such as layers.micro.suites[gemm].env.OMP_NUM_THREADS")
    segs = [a or b for a, b, dot in _SEGMENT.findall(text) if not dot]
    if segs and segs[0] == "spec":
        segs = segs[1:]
    if not segs:
        raise ValueError(f"{path!r} names no field of the spec")
    return tuple(segs)


def _named(items: Any) -> bool:
    return (isinstance(items, list) and bool(items)
            and all(isinstance(i, dict) and isinstance(i.get("name"), str) for i in items))


def resolve(spec: dict[str, Any], path: str) -> tuple[bool, Any]:
    """(found, value) of ``path`` in a spec body (the mapping under ``spec``)."""
    obj: Any = spec
    for seg in parse(path):
        if isinstance(obj, dict) and seg in obj:
            obj = obj[seg]
        elif _named(obj):
            hit = [i for i in obj if i["name"] == seg]
            if not hit:
                return False, None
            obj = hit[0]
        else:
            return False, None
    return True, obj


def render(segs: tuple[str, ...]) -> str:
    """Canonical text of a path: named list elements in brackets, except layers (``layers.micro``)."""
    out = ""
    for i, seg in enumerate(segs):
        if i and segs[i - 1] != "layers" and _is_name_slot(segs, i):
            out += f"[{seg}]"
        else:
            out += ("." if out else "") + seg
    return out


_NAMED_LISTS = ("layers", "suites")


def _is_name_slot(segs: tuple[str, ...], i: int) -> bool:
    return segs[i - 1] in _NAMED_LISTS and (i < 2 or segs[i - 2] != "parameters")


def flatten(spec: Any, prefix: tuple[str, ...] = ()) -> dict[tuple[str, ...], Any]:
    """Every leaf of a spec body as {segments: value}; lists of named objects are keyed by name."""
    out: dict[tuple[str, ...], Any] = {}
    if isinstance(spec, dict):
        if not spec and prefix:
            out[prefix] = {}
        for k, v in spec.items():
            out.update(flatten(v, (*prefix, str(k))))
    elif _named(spec) and prefix and prefix[-1] in _NAMED_LISTS:
        for item in spec:
            out.update(flatten({k: v for k, v in item.items() if k != "name"}, (*prefix, item["name"])))
    else:
        out[prefix] = spec
    return out


def covers(declared: tuple[str, ...], field: tuple[str, ...]) -> bool:
    """True when ``field`` is ``declared`` or lies under it (``*`` matches any one segment)."""
    return len(field) >= len(declared) and all(d in ("*", f) for d, f in zip(declared, field))
