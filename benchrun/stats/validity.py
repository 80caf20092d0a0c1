"""A suite's own verdict on its measurement, as the readers of a run take it.

A suite may judge what it measured: ``context.verdict`` ``valid`` | ``invalid`` in its result, with
``verdict_reasons`` (membw on CPU: each array under 4x the last-level cache, STREAM's rule, measures
cache bandwidth rather than memory's). An invalid replicate's figures stay what was measured; a
comparison shows its suite's rows as measured and ``not gateable`` (:mod:`benchrun.stats.tails`),
and ``show`` and the report say it beside the headline (:func:`run_notes`). What reads a figure as
the metric it names without a person beside it leaves such replicates out (:func:`drop_invalid`): the
history that change points and the report's history figure read (a cache figure filed as memory
bandwidth would start or hide a change point when the arrays or the cache change), and the hot metrics
pushed to dashboards and alert rules, which count them instead (``benchrun_suite_invalid_replicates``).

A serving suite judges each load point instead (``context.verdicts``: point → ``verdict``, ``reasons``;
:func:`benchrun.loadgen.suite.report`), and its replicate stays ok whatever they say. A point judged
invalid for a reason beyond its replicate's own request count (:func:`invalid_points`: errors over
1 %, a saturated client, late sends, a p99 among the failed requests; the comparison's one rule,
:func:`benchrun.loadgen.metrics.pooled_reasons`) is read the same way, but only its own figures: the
metric rows whose case is that point (``[c=4]``), the other points and the sweep's
``capacity_at_slo`` (of valid points only) kept. Its figures in the history are left out
(:func:`invalid_point_rows`), and the hot metrics count it (``benchrun_suite_invalid_points``). A
point invalid only for its few requests (the canary's 24-96: a p99 the pooled requests support) is not.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from benchrun.loadgen.metrics import pooled_reasons  # the one rule for which reasons a request count explains

if TYPE_CHECKING:
    import pandas as pd


def judged_invalid(doc: Any) -> bool:
    """Whether a suite result document is an ok replicate whose suite judged its own measurement invalid."""
    ctx = doc.get("context") if isinstance(doc, dict) else None
    return doc.get("status") == "ok" and isinstance(ctx, dict) and ctx.get("verdict") == "invalid"


def invalid_points(doc: Any) -> dict[str, list[str]]:
    """point → reasons for the load points of a serving result document (``context.verdicts``) judged
    invalid for a reason other than the replicate's own request count (:func:`pooled_reasons`, the
    comparison's rule: ``benchrun.stats.tails``); a point's metric rows have it as their case. {} for
    a document without verdicts (every other suite; an ingested vLLM point is not judged)."""
    ctx = doc.get("context") if isinstance(doc, dict) else None
    verdicts = ctx.get("verdicts") if isinstance(ctx, dict) else None
    out: dict[str, list[str]] = {}
    for point, v in verdicts.items() if isinstance(verdicts, dict) else ():
        if not isinstance(v, dict) or v.get("verdict") == "valid":
            continue
        reasons = v.get("reasons")
        listed = isinstance(reasons, (list, tuple)) and len(reasons) > 0
        left = pooled_reasons([str(r) for r in reasons]) if listed else ["invalid"]
        if left:
            out[str(point)] = left
    return out


def invalid_point_rows(docs: list[dict[str, Any]]) -> dict[tuple[str, int, str], list[str]]:
    """(suite, replicate, case) → reasons for the points of :func:`invalid_points` in the ok documents ``docs``."""
    return {(str(doc.get("suite")), int(doc.get("replicate", 0)), point): reasons
            for doc in docs if doc.get("status") == "ok" for point, reasons in invalid_points(doc).items()}


def invalid_replicates(run_dir: Path, docs: list[dict[str, Any]] | None = None) -> dict[str, dict[str, Any]]:
    """suite → {"replicates": [k, ...], "reasons": [...]} for the ok replicates whose suite judged
    its own measurement invalid (``context.verdict`` ``invalid``, its ``verdict_reasons``: e.g. membw's
    arrays under STREAM's 4x-LLC rule, a figure of cache bandwidth). ``docs``: the run's result documents
    (:func:`benchrun.stats.load.suite_results`), when the caller has read them already."""
    from benchrun.stats.load import suite_results

    out: dict[str, dict[str, Any]] = {}
    for doc in suite_results(run_dir) if docs is None else docs:
        if not judged_invalid(doc):
            continue
        entry = out.setdefault(str(doc.get("suite")), {"replicates": [], "reasons": []})
        entry["replicates"].append(doc.get("replicate"))
        for reason in doc["context"].get("verdict_reasons") or ["its verdict is invalid"]:
            if str(reason) not in entry["reasons"]:
                entry["reasons"].append(str(reason))
    return out


def drop_invalid(table: "pd.DataFrame", invalid: dict[str, dict[str, Any]],
                 points: dict[tuple[str, int, str], Any] | None = None) -> "pd.DataFrame":
    """``table`` (a :func:`benchrun.stats.load.replicate_table`: suite, replicate and case columns) without
    the rows of the replicates in ``invalid`` (:func:`invalid_replicates`) and those of the points in
    ``points`` (:func:`invalid_point_rows`: a point's rows in that replicate, its other cases kept)."""
    if not (invalid or points) or table.empty:
        return table
    bad = {(suite, int(k)) for suite, e in invalid.items() for k in e["replicates"] if isinstance(k, int)}
    keep = [(s, int(r)) not in bad and (s, int(r), c) not in (points or {})
            for s, r, c in zip(table["suite"], table["replicate"], table["case"])]
    return table[keep]


def _replicates(ks: list[Any]) -> str:
    """``replicate 3`` / ``replicates 1, 2, 10`` (in number order)."""
    def order(k: Any) -> tuple[int, str]:
        return (int(k), "") if isinstance(k, int) and not isinstance(k, bool) else (1 << 62, str(k))

    return f"replicate{'s' if len(ks) > 1 else ''} " + ", ".join(str(k) for k in sorted(ks, key=order))


def invalid_note(suite: str, baseline: dict[str, dict[str, Any]], candidate: dict[str, dict[str, Any]]) -> str:
    """``not gateable: the suite judged its own measurement invalid (baseline replicates 1, 2;
    candidate replicate 3): <reasons>`` for a suite of :func:`invalid_replicates` in either arm, else ""."""
    arms = [(arm, d[suite]) for arm, d in (("baseline", baseline), ("candidate", candidate)) if suite in d]
    if not arms:
        return ""
    which = "; ".join(f"{arm} {_replicates(e['replicates'])}" for arm, e in arms)
    reasons = list(dict.fromkeys(r for _, e in arms for r in e["reasons"]))
    return f"not gateable: the suite judged its own measurement invalid ({which}): {'; '.join(reasons)}"


def run_notes(run_dir: Path) -> list[str]:
    """``membw: the suite judged its own measurement invalid in replicates 1, 2, 3 (...): <reasons>``, one per suite
    of :func:`invalid_replicates`; [] for a run whose results do not read (said elsewhere)."""
    from benchrun.errors import BenchrunError

    try:
        found = invalid_replicates(Path(run_dir))
    except (BenchrunError, OSError):
        return []
    return [f"{suite}: the suite judged its own measurement invalid in {_replicates(e['replicates'])} (a comparison "
            f"does not gate on its rows): {'; '.join(e['reasons'])}"
            for suite, e in sorted(found.items())]
