"""Reading a BenchmarkRun document as written (plain data, camelCase keys) for the admission
rules: a value at a path or None, typed views that skip what the model reports, did-you-mean
hints, and the "must include" / "must be true" checks many rules share."""

from __future__ import annotations

import difflib
import math
from typing import Any, Iterable, Iterator

Path = tuple[str | int, ...]
Finding = tuple[Path, str]

SPEC: Path = ("spec",)


def get(doc: Any, path: Path) -> Any:
    """The value at ``path``, or None when any step is missing or of the wrong kind."""
    cur = doc
    for part in path:
        if isinstance(part, int):
            if not isinstance(cur, list) or not 0 <= part < len(cur):
                return None
            cur = cur[part]
        else:
            if not isinstance(cur, dict):
                return None
            cur = cur.get(part)
    return cur


def strings(value: Any) -> list[str] | None:
    """The strings of a list (others dropped: the model reports them), None if not a list."""
    if not isinstance(value, list):
        return None
    return [v for v in value if isinstance(v, str)]


def is_number(value: Any) -> bool:
    """A real int or float (not a bool), finite."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """`` (did you mean 'x'?)`` for the closest choice, or an empty string."""
    choices = list(choices)
    lowered = {c.lower(): c for c in choices}
    if word.lower() in lowered:
        return f" (did you mean {lowered[word.lower()]!r}?)"
    close = difflib.get_close_matches(word, choices, n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def workload_type(doc: Any) -> str | None:
    """``spec.intent.workloadType`` when it is one of the three known values."""
    value = get(doc, SPEC + ("intent", "workloadType"))
    return value if value in ("training", "inference", "mixed") else None


def benchmark_class(doc: Any) -> str | None:
    """``spec.intent.benchmarkClass`` when it is one of the two known values."""
    value = get(doc, SPEC + ("intent", "benchmarkClass"))
    return value if value in ("publication_grade", "realism_grade") else None


def require_all(doc: Any, path: Path, required: Iterable[str], why: str = "") -> Iterator[Finding]:
    """The list at ``path`` must contain every name in ``required``."""
    have = strings(get(doc, path))
    if have is None:
        return
    missing = [r for r in required if r not in have]
    if missing:
        extra = [h for h in have if h not in required]
        typos = [f"{close[0]!r}" for m in missing if (close := difflib.get_close_matches(m, extra, n=1, cutoff=0.75))]
        hint = f" (misspelt as {', '.join(typos)}?)" if typos else ""
        yield path, f"must include {', '.join(missing)}{why}{hint}"


def require_true(doc: Any, path: Path, flags: Iterable[str], why: str = "") -> Iterator[Finding]:
    """Each boolean flag under ``path`` must be true (missing or non-bool: the model's error)."""
    for flag in flags:
        if get(doc, path + (flag,)) is False:
            yield path + (flag,), f"must be true{why}"


def suites(doc: Any) -> Iterator[tuple[Path, dict[str, Any]]]:
    """Every suite mapping with its path ``spec.layers[i].suites[j]``."""
    layers = get(doc, SPEC + ("layers",))
    for i, layer in enumerate(layers if isinstance(layers, list) else []):
        entries = get(layer, ("suites",))
        for j, suite in enumerate(entries if isinstance(entries, list) else []):
            if isinstance(suite, dict):
                yield SPEC + ("layers", i, "suites", j), suite
