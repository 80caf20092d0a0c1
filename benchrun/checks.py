"""What the run's asset checks judge, as pure functions over the statistics' tables.

A check fails only for a problem with the metrics that decide the run: the spec's primary
metrics (the ones that gate against the baseline), for the p99 rule the serving points whose
p99 a primary gates on. Everything else is counted in the check's metadata, not failed.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Iterable

from benchrun.stats.directions import TELEMETRY_CASE

if TYPE_CHECKING:
    import pandas as pd


def primary_metrics(spec: dict[str, Any]) -> set[str]:
    """Metric names listed under ``metrics.<family>.primary`` of the enabled families."""
    out: set[str] = set()
    for fam in ((spec.get("spec") or {}).get("metrics") or {}).values():
        if isinstance(fam, dict) and fam.get("enabled", True):
            out.update(str(m) for m in fam.get("primary") or [])
    return out


def p99_primary_points(tails: "pd.DataFrame", primary: Iterable[str], need: int,
                       keep: set[tuple[str, int]] | None = None) -> list[dict[str, Any]]:
    """Each serving point whose p99 a primary metric gates on (``p99_latency_ms`` is the p99 of a
    point's ``e2e_ms``: ``benchrun.stats.tails.P99_METRICS``), with its requests pooled over the
    run's replicates (the count the comparison judges the p99 on) and whether they reach ``need``
    (``benchrun.stats.tails.requests_needed``): a point short of it is ``not gateable`` in any
    comparison of this run, so its primary cannot clear or flag anything. ``keep``: the (suite,
    replicate)s a comparison pools (:func:`compared_replicates`: ok ones, contended ones left out where
    3 quiet ones remain); a failed replicate's requests and left-out contended ones were pooled, and the
    check passed where every comparison said "not gateable"."""
    from benchrun.stats.compare import parse_primary
    from benchrun.stats.tails import P99_METRICS

    if tails is None or tails.empty:
        return []
    if keep is not None:
        tails = tails[[(str(s), int(r)) in keep for s, r in zip(tails["suite"], tails["replicate"])]]
    parsed = [parse_primary(text) for text in sorted(primary)]
    sels = [(sel, P99_METRICS[sel.metric][0]) for sel in parsed if sel.metric in P99_METRICS]
    rows = tails[tails["bucket"].astype(str) == "all"]
    out = []
    for (suite, point, quantity), g in rows.groupby(["suite", "point", "quantity"], sort=True):
        metrics = [sel.metric for sel, q in sels if q == quantity and sel.matches(str(suite), str(point), sel.metric)]
        if metrics:
            pooled = int(g["n_requests"].sum())
            out.append({"suite": str(suite), "point": str(point), "metric": metrics[0], "quantity": str(quantity),
                        "replicates": int(g["replicate"].nunique()), "pooled_requests": pooled,
                        "needed": int(need), "enough": pooled >= need})
    return out


def compared_replicates(run_dir: Any) -> set[tuple[str, int]]:
    """The (suite, replicate)s whose requests a comparison of the run pools: its ok replicates, the
    contended ones left out where a suite keeps 3 quiet ones (``benchrun.stats.analysis``'s rule)."""
    from benchrun.stats.contention import compared_table
    from benchrun.stats.tails import kept_replicates

    return kept_replicates(compared_table(run_dir)[0])


def gating_rows(table: "pd.DataFrame", primary: set[str]) -> "pd.Series":
    """True for the rows (suite, case, metric) a primary selects: a bare name, or one qualified
    as ``suite/metric[case]`` (benchrun.stats.compare.parse_primary)."""
    import pandas as pd

    from benchrun.stats.compare import gating_mask

    keys = zip(table["suite"].astype(str), table["case"].astype(str), table["metric"].astype(str))
    return pd.Series(gating_mask(keys, sorted(primary)), index=table.index)


def split_by_gating(summary: "pd.DataFrame", primary: set[str]) -> tuple["pd.DataFrame", "pd.DataFrame"]:
    """(rows of primary metrics, the others)."""
    if summary.empty:
        return summary, summary
    mask = gating_rows(summary, primary)
    return summary[mask], summary[~mask]


def interval_widths(summary: "pd.DataFrame", delta_of: Any) -> list[dict[str, Any]]:
    """Rows whose median interval is wider than the ±δ no-change band (2δ of the median)."""
    wide = []
    for r in summary.to_dict(orient="records"):
        budget = 2 * float(delta_of(r["metric"]))
        width = 100 * (r["median_ci_high"] - r["median_ci_low"]) / abs(r["median"]) if r["median"] else math.nan
        if not width <= budget:
            wide.append({**r, "width_pct": width, "budget_pct": budget})
    return wide


def unmeasured_primaries(summary: "pd.DataFrame", primary: set[str]) -> list[str]:
    """Declared primaries that select no row of the run's statistics: no ok replicate measured
    them (their suite failed every replicate, or none reports them)."""
    from benchrun.stats.compare import FAILED_METRIC, parse_primary

    keys = list(zip(summary["suite"].astype(str), summary["case"].astype(str),
                    summary["metric"].astype(str))) if len(summary) else []
    selectors = {text: parse_primary(text) for text in sorted(primary)}
    # a failed_replicates primary is a count the comparison makes, never a measured metric
    return [text for text, sel in selectors.items() if sel.metric != FAILED_METRIC
            and not any(sel.matches(*k) for k in keys)]


def suite_replicates(table: "pd.DataFrame") -> dict[str, tuple[int, int]]:
    """Suite → (ok replicates, failed replicates) of a replicate table read with its failed
    replicates (``benchrun.stats.load.replicate_table(include_failed=True)``); a suite whose
    launches were all unavailable here has no row."""
    out: dict[str, tuple[int, int]] = {}
    if table.empty:
        return out
    for suite, rows in table.groupby(table["suite"].astype(str)):
        status = rows["status"].astype(str)
        out[suite] = (int(rows.loc[status == "ok", "replicate"].nunique()), int((status == "failed").sum()))
    return out


def short_of_replicates(summary: "pd.DataFrame", suites: dict[str, tuple[int, int]], primary: set[str],
                        min_replicates: int) -> list[dict[str, Any]]:
    """Everything with fewer than ``min_replicates`` ok replicates, zero included: each metric
    row, each suite that launched (``suites``: :func:`suite_replicates`), and each declared
    primary that no ok replicate measured. The statistics are built from ok replicates only, so
    a suite that failed every replicate leaves no row to be short: it is judged here. Telemetry
    summaries are not judged (they never gate, and a measured window under two sampling periods
    has none: whether a replicate carries them depends on the machine's load; found in review,
    the check failed on a healthy canary); :func:`telemetry_short` counts them."""
    out = [{"what": "suite", "suite": s, "case": "", "metric": "", "n": ok, "failed": failed}
           for s, (ok, failed) in sorted(suites.items()) if ok < min_replicates]
    out += [{"what": "primary", "suite": "", "case": "", "metric": text, "n": 0, "failed": None}
            for text in unmeasured_primaries(summary, primary)]
    if len(summary):
        rows = summary[(summary["n"] < min_replicates) & (summary["case"].astype(str) != TELEMETRY_CASE)]
        out += [{"what": "metric", "suite": r["suite"], "case": r["case"], "metric": r["metric"], "n": int(r["n"]),
                 "failed": None} for r in rows.to_dict(orient="records")]
    return out


def telemetry_short(summary: "pd.DataFrame", min_replicates: int) -> int:
    """How many telemetry summary rows have fewer than ``min_replicates`` replicates (said, not judged)."""
    if not len(summary):
        return 0
    return int(((summary["n"] < min_replicates) & (summary["case"].astype(str) == TELEMETRY_CASE)).sum())


def describe_short(short: list[dict[str, Any]], min_replicates: int) -> str:
    """One line naming what :func:`short_of_replicates` found (the first few of each kind)."""
    if not short:
        return f"every metric, suite and primary has at least {min_replicates} ok replicates"
    said = []
    for r in short[:8]:
        if r["what"] == "suite":
            said.append(f"suite {r['suite']} ({r['n']} ok, {r['failed']} failed)")
        elif r["what"] == "primary":
            said.append(f"primary {r['metric']} (no ok replicate)")
        else:
            said.append(f"{r['suite']}/{r['metric']}" + (f"[{r['case']}]" if r["case"] else "") + f" ({r['n']} ok)")
    more = f" and {len(short) - 8} more" if len(short) > 8 else ""
    return f"fewer than trials.minReplicates={min_replicates} ok replicates: " + "; ".join(said) + more
