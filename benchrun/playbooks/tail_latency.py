"""Playbook ``tail_latency_regression``: inference p99 doubled while the average barely moved."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from benchrun.errors import BenchrunError
from benchrun.loadgen.metrics import COUNT_REASON_TAIL, LEGACY_COUNT_REASON_TAILS
from benchrun.playbooks.base import REPLICATE_STATUS_CTE, PlaybookResult, check_runs, fetch, ratio, replicates_phrase

NAME = "tail_latency_regression"
QUESTION = "Inference p99 doubled but the average barely moved: which serving point and bucket, by how much?"

# "Doubled": the run's p99 is at least this multiple of the baseline's at the same point,
# bucket and quantity.
P99_GROWTH_MIN = 2.0
# "Barely moved": the run's mean rose by at most this fraction of the baseline's mean. A mean
# that rose more is a general slowdown, not a tail regression (the comparison gate and
# baseline_comparison cover that). A mean that fell is no slowdown: a p99 that doubled beside
# it is a tail regression still (the band was two-sided, and p99 ×2.2 with the mean ×0.8 read
# "a general slowdown", clear).
MEAN_BAND = 0.10
# A p99 is judged as `benchrun compare` judges it (benchrun.stats.tails): the 0.99-quantile of
# each arm's pooled requests (every replicate weighing the same), believed only from
# tails.requests_needed pooled requests in each arm (368 at this confidence: the one rule for the
# request count). Where neither run has request records at a point (runs curated before
# serving_request_fact), the comparison's fallback: the median over replicates of each
# replicate's p99, from that many requests in every replicate. A doubling seen on fewer is
# reported as too thin to call, never flagged.
P99_CONFIDENCE = 0.95
POOLED = "pooled requests"
REPLICATE = "replicate p99s (no request records)"
QUANTITIES = ("e2e_ms", "ttft_ms")

# Which serving rows are judged: those of replicates whose result is ok (measurement_fact
# carries each result document's status; serving_outcome_fact holds the rows of failed
# replicates too, as they were measured) at points the load generator judged valid. A point
# invalid only for its own request count ($3, $4: the reason's wording now and before
# 2026-12-03) stays in: the p99 is judged on the pooled count instead (P99_CONFIDENCE), as the
# comparison does (loadgen.metrics.pooled_reasons). Any other
# invalid reason (errors above policy, load not reached, client saturated) of the point's
# bucket-'all' row or of the row itself leaves the row out; so does a replicate whose status is
# not ok or not recorded. LEFT_OUT_SQL lists what was left out and why.
JUDGED_CTE = """
WITH """ + REPLICATE_STATUS_CTE + """,
serving AS (
    SELECT s.run_id, s.suite, s.replicate, s.point, coalesce(s.bucket, 'all') AS bucket, s.n_requests,
           s.e2e_ms_mean, s.e2e_ms_p50, s.e2e_ms_p99, s.ttft_ms_mean, s.ttft_ms_p50, s.ttft_ms_p99,
           CASE WHEN list_contains($5, s.run_id || '/' || s.suite || '/' || CAST(s.replicate AS VARCHAR))
                THEN 'contended' ELSE coalesce(rs.status, 'status not recorded') END AS replicate_status,
           CASE WHEN s.verdict IS NULL OR s.verdict = 'valid' THEN CAST([] AS VARCHAR[])
                WHEN coalesce(len(s.verdict_reasons), 0) = 0 THEN [s.verdict]
                ELSE list_filter(s.verdict_reasons, lambda r: NOT (ends_with(r, $3) OR ends_with(r, $4)))
           END AS invalid_reasons
    FROM serving_outcome_fact s
    LEFT JOIN replicate_status rs ON rs.run_id = s.run_id AND rs.suite = s.suite AND rs.replicate = s.replicate
    WHERE s.run_id IN ($1, $2) AND (s.e2e_ms_p99 IS NOT NULL OR s.ttft_ms_p99 IS NOT NULL)
),
judged AS (
    SELECT s.*, s.replicate_status = 'ok' AS replicate_ok,
           list_distinct(list_concat(s.invalid_reasons, coalesce(p.invalid_reasons, CAST([] AS VARCHAR[]))))
               AS point_invalid_reasons
    FROM serving s
    LEFT JOIN serving p ON s.bucket <> 'all' AND p.bucket = 'all' AND p.run_id = s.run_id AND p.suite = s.suite
         AND p.replicate = s.replicate AND p.point = s.point
)"""

# Per serving point × bucket × latency quantity (request end-to-end and time to first
# token), over the judged rows, for the run ($1) and its baseline ($2, NULL for none) side by
# side: the replicates judged, the median over replicates of each replicate's mean, p50, p99 and
# request count (context: the p99 that is judged is the pooled one, REQUESTS_SQL), the requests
# the replicates report, and the run-over-baseline ratio of the means. Rows without a p99 (a
# replicate that served nothing) are left out, never filled. bucket NULL (the whole point's
# requests) reads 'all'.
SQL = JUDGED_CTE + """,
per_replicate AS (
    SELECT run_id, suite, point, bucket, 'e2e_ms' AS quantity,
           e2e_ms_mean AS mean_ms, e2e_ms_p50 AS p50_ms, e2e_ms_p99 AS p99_ms, n_requests
    FROM judged
    WHERE replicate_ok AND len(point_invalid_reasons) = 0 AND e2e_ms_p99 IS NOT NULL
    UNION ALL
    SELECT run_id, suite, point, bucket, 'ttft_ms' AS quantity,
           ttft_ms_mean, ttft_ms_p50, ttft_ms_p99, n_requests
    FROM judged
    WHERE replicate_ok AND len(point_invalid_reasons) = 0 AND ttft_ms_p99 IS NOT NULL
),
per_point AS (
    SELECT run_id, suite, point, bucket, quantity,
           count(*) AS n_replicates, CAST(sum(n_requests) AS BIGINT) AS n_requests_reported,
           min(n_requests) AS n_requests_per_replicate,  -- the fewest: "from that many in every replicate"
           median(mean_ms) AS mean_ms, median(p50_ms) AS replicate_p50_ms, median(p99_ms) AS replicate_p99_ms
    FROM per_replicate
    GROUP BY run_id, suite, point, bucket, quantity
)
SELECT r.suite, r.point, r.bucket, r.quantity, r.n_replicates, r.n_requests_reported, r.n_requests_per_replicate,
       r.mean_ms, r.replicate_p50_ms, r.replicate_p99_ms,
       b.n_replicates AS base_n_replicates, b.n_requests_reported AS base_n_requests_reported,
       b.n_requests_per_replicate AS base_n_requests_per_replicate,
       b.mean_ms AS base_mean_ms, b.replicate_p50_ms AS base_replicate_p50_ms,
       b.replicate_p99_ms AS base_replicate_p99_ms,
       r.mean_ms / nullif(b.mean_ms, 0) AS mean_change
FROM per_point r
LEFT JOIN per_point b
       ON b.run_id = $2 AND b.suite = r.suite AND b.point = r.point
      AND b.bucket = r.bucket AND b.quantity = r.quantity
WHERE r.run_id = $1
ORDER BY r.suite, r.point, r.bucket, r.quantity
"""

# The requests behind the judged rows (serving_request_fact), one row per run, suite, point,
# bucket and replicate with each quantity's values as a list: only the replicate × point ×
# bucket rows SQL judges (ok replicate, valid point), bucket 'all' holding all the point's
# requests. A request that ended in an error or timed out is censored, +inf, as the comparison
# counts it (benchrun.stats.tails: slower than every completed one, so a tail of timeouts is no
# faster tail); a missing value of a completed request (no first token) is left out.
REQUESTS_SQL = JUDGED_CTE + """,
kept AS (
    SELECT DISTINCT run_id, suite, replicate, point, bucket FROM judged
    WHERE replicate_ok AND len(point_invalid_reasons) = 0
),
completed AS (
    SELECT run_id, suite, replicate, CAST(point AS VARCHAR) AS point, bucket,
           CASE WHEN error IS NULL OR error = '' THEN e2e_ms ELSE 'inf'::DOUBLE END AS e2e_ms,
           CASE WHEN error IS NULL OR error = '' THEN ttft_ms ELSE 'inf'::DOUBLE END AS ttft_ms
    FROM serving_request_fact
    WHERE run_id IN ($1, $2)
),
requests AS (
    SELECT run_id, suite, replicate, point, 'all' AS bucket, e2e_ms, ttft_ms FROM completed
    UNION ALL
    SELECT run_id, suite, replicate, point, bucket, e2e_ms, ttft_ms FROM completed
    WHERE bucket IS NOT NULL AND bucket <> 'all'
)
SELECT q.run_id, q.suite, q.point, q.bucket, q.replicate,
       list(q.e2e_ms) FILTER (WHERE q.e2e_ms IS NOT NULL) AS e2e_ms,
       list(q.ttft_ms) FILTER (WHERE q.ttft_ms IS NOT NULL) AS ttft_ms
FROM requests q
JOIN kept k ON k.run_id = q.run_id AND k.suite = q.suite AND k.replicate = q.replicate
           AND k.point = q.point AND k.bucket = q.bucket
GROUP BY q.run_id, q.suite, q.point, q.bucket, q.replicate
ORDER BY q.run_id, q.suite, q.point, q.bucket, q.replicate
"""

# The serving rows with a p99 that were left out, per run, replicate and point: the replicate's
# status where it was not ok, else the point's invalid verdict reasons.
LEFT_OUT_SQL = JUDGED_CTE + """
SELECT run_id, suite, replicate, point, any_value(replicate_status) AS replicate_status,
       bool_and(replicate_ok) AS replicate_ok, flatten(list(point_invalid_reasons)) AS invalid_reasons
FROM judged
WHERE NOT replicate_ok OR len(point_invalid_reasons) > 0
GROUP BY run_id, suite, replicate, point
ORDER BY run_id, suite, replicate, point
"""

# Columns the terminal table shows (--json gives every column).
DISPLAY = ("suite", "point", "bucket", "quantity", "n_requests", "base_n_requests", "mean_ms", "p50_ms", "p99_ms",
           "tail_ratio", "base_p99_ms", "base_tail_ratio", "p99_change", "mean_change", "p99_backed", "flagged")


def _pooled_arms(rows: list[dict[str, Any]]) -> dict[tuple[str, ...], list[np.ndarray]]:
    """REQUESTS_SQL's rows as (run, suite, point, bucket, quantity) -> one array of values per replicate."""
    arms: dict[tuple[str, ...], list[np.ndarray]] = {}
    for r in rows:
        for quantity in QUANTITIES:
            vals = np.asarray(r[quantity] or [], dtype=float)
            vals = vals[~np.isnan(vals)]  # +inf stays: an errored request, censored
            if vals.size:
                arms.setdefault((r["run_id"], r["suite"], r["point"], r["bucket"], quantity), []).append(vals)
    return arms


def _p99s(row: dict[str, Any], arms: dict[tuple[str, ...], list[np.ndarray]], run_id: str,
          baseline_run_id: str | None) -> None:
    """Fill the row's judged p50/p99 and request counts: the quantiles of each arm's pooled requests
    (as the comparison computes them) where every arm with judged rows here has request records,
    else the medians of the replicates' own (runs curated without their requests)."""
    from benchrun.stats.tails import pooled_quantile

    where = (row["suite"], row["point"], row["bucket"], row["quantity"])
    sides = [("", run_id)] + ([("base_", baseline_run_id)] if baseline_run_id else [])
    judged = [rid for prefix, rid in sides if not prefix or row["base_n_replicates"] is not None]
    pooled = all((rid, *where) in arms for rid in judged)
    row["p99_basis"] = POOLED if pooled else REPLICATE
    for prefix, rid in sides:
        reps = arms.get((rid, *where), [])
        if rid not in judged:
            n, p50, p99 = None, None, None  # the baseline has no judged rows here
        elif pooled:
            n = int(sum(r.size for r in reps))
            p50, p99 = pooled_quantile(reps, 0.5), pooled_quantile(reps, 0.99)
        else:
            n, p50, p99 = row[f"{prefix}n_requests_reported"], row[f"{prefix}replicate_p50_ms"], row[f"{prefix}replicate_p99_ms"]
        if p99 is not None and math.isinf(p99):  # the quantile reaches the errored requests: unknown
            row["p99_censored"] = f"{'baseline' if prefix else 'run'} {rid}"
            p99 = None
        row[f"{prefix}n_requests"], row[f"{prefix}p50_ms"], row[f"{prefix}p99_ms"] = n, p50, p99
        row[f"{prefix}tail_ratio"] = ratio(p99, p50)
    row["p99_change"] = ratio(row["p99_ms"], row.get("base_p99_ms"))
    row["p50_change"] = ratio(row["p50_ms"], row.get("base_p50_ms"))


def _fewest(row: dict[str, Any]) -> tuple[float | None, str]:
    """The request count the p99 rule reads for a compared row and its wording: the smaller arm's
    pooled requests, or (replicate p99s) the fewest requests of a replicate."""
    if row["p99_basis"] == POOLED:
        counts, what = (row["n_requests"], row["base_n_requests"]), "pooled requests"
    else:
        counts, what = (row["n_requests_per_replicate"], row["base_n_requests_per_replicate"]), "requests per replicate"
    return (None if None in counts else min(counts)), what


def _judge(row: dict[str, Any], min_requests: int) -> tuple[bool, bool, str]:
    """(flagged, suspected but too thin, why) for one compared row."""
    p99, mean = row["p99_change"], row["mean_change"]
    if p99 is None or mean is None:
        return False, False, "no baseline at this point/bucket"
    grew = p99 >= P99_GROWTH_MIN
    steady = mean <= 1.0 + MEAN_BAND  # a mean that fell is no general slowdown
    if grew and steady:
        band = f"within ±{MEAN_BAND:.0%}" if mean >= 1.0 - MEAN_BAND else "lower than the baseline's: only the tail grew"
        why = f"p99 ×{p99:.2f} (≥ ×{P99_GROWTH_MIN:g}) while mean ×{mean:.2f} ({band})"
        if not row["p99_backed"]:
            thin, what = _fewest(row)
            if thin is None:  # a serving row without its request count (a TypeError here: review 2026-12-07)
                return False, True, f"{why}, but its {what} are not recorded, so the p99 is not shown to rest on ≥ {min_requests}"
            return False, True, f"{why}, but p99 from {thin:g} {what} (< {min_requests})"
        return True, False, why
    if grew:
        return False, False, (f"p99 ×{p99:.2f} but mean ×{mean:.2f} rose more than {MEAN_BAND:.0%} too (a general "
                              "slowdown, not a tail regression)")
    return False, False, f"p99 ×{p99:.2f} (< ×{P99_GROWTH_MIN:g})"


def _contended(home: Path, run_ids: list[str | None]) -> list[str]:
    """``run/suite/replicate`` of each replicate ``benchrun compare`` leaves out as contended: a suite's
    replicates measured on a contended machine where at least MIN_QUIET quiet ones remain
    (:func:`benchrun.stats.contention.exclude`, read from the run directories' results). The playbook judged
    them (a p99 ×4 from two loaded replicates) while compare said they were excluded (review 2026-12-08)."""
    from benchrun.stats.contention import compared_table

    out = []
    for rid in run_ids:
        run_dir = Path(home) / "runs" / str(rid)
        if rid is None or not (run_dir / "status.json").is_file():
            continue  # no run directory here (deleted, or another home's): the warehouse's rows stand
        try:
            _table, info, contended = compared_table(run_dir)
        except (BenchrunError, OSError, ValueError):
            continue
        for suite, (_n, done) in info.items():
            if done == "excluded":
                out += [f"{rid}/{suite}/{rep}" for rep in sorted(contended[suite])]
    return out


def _left_out(rows: list[dict[str, Any]], run_id: str, role: str) -> str:
    """What of ``run_id``'s serving rows was not judged, and why ('' when nothing)."""
    mine = [r for r in rows if r["run_id"] == run_id]
    busy = sorted({(r["suite"], r["replicate"]) for r in mine if r["replicate_status"] == "contended"})
    failed = [(r["suite"], r["replicate"], r["replicate_status"]) for r in mine
              if not r["replicate_ok"] and r["replicate_status"] != "contended"]
    invalid = [r for r in mine if r["replicate_ok"]]
    parts = []
    if busy:
        parts.append(f"{len(busy)} replicate(s) measured on a contended machine, left out as compare leaves them "
                     f"(at least 3 quiet ones remain: {', '.join(f'{s} r{k}' for s, k in busy)})")
    if failed:
        parts.append(f"{len(set(failed))} replicate(s) whose result is not ok ({replicates_phrase(failed)})")
    if invalid:
        shown = "; ".join(f"{r['suite']} r{r['replicate']} {r['point']}: "
                          f"{', '.join(dict.fromkeys(r['invalid_reasons']))}" for r in invalid[:3])
        parts.append(f"{len(invalid)} replicate×point(s) the load generator judged invalid ({shown}"
                     + (f"; {len(invalid) - 3} more" if len(invalid) > 3 else "") + ")")
    return f"{role} {run_id}: " + " and ".join(parts) if parts else ""


def tail_latency_regression(home: Path, run_id: str, baseline_run_id: str | None) -> PlaybookResult:
    """Per serving point, bucket and quantity: did p99 at least double while the mean rose no more than the band?

    Only ok replicates at valid points are judged; the answer says what was left out and why.
    """
    from benchrun.stats.tails import requests_needed

    check_runs(home, run_id, baseline_run_id)
    params = [run_id, baseline_run_id, COUNT_REASON_TAIL, LEGACY_COUNT_REASON_TAILS[0],
              _contended(home, [run_id, baseline_run_id])]
    rows, digest = fetch(SQL, home, params)
    dropped, _ = fetch(LEFT_OUT_SQL, home, params)
    arms = _pooled_arms(fetch(REQUESTS_SQL, home, params)[0]) if rows else {}
    for row in rows:
        _p99s(row, arms, run_id, baseline_run_id)
    notes = [n for n in (_left_out(dropped, run_id, "run"),
                         _left_out(dropped, baseline_run_id, "baseline") if baseline_run_id else "") if n]
    left_out = f"; left out, not judged: {'; '.join(notes)}" if notes else ""

    def result(verdict: str, reason: str) -> PlaybookResult:
        return PlaybookResult(NAME, QUESTION, verdict, reason + left_out, rows, digest, SQL, run_id, baseline_run_id,
                              params)

    if not rows and any(r["run_id"] == run_id for r in dropped):
        return result("unavailable", f"none of run {run_id}'s serving rows with a p99 is from an ok replicate at a "
                                     "point the load generator judged valid: nothing to judge")
    if not rows:
        return result("unavailable", f"run {run_id} has no serving_outcome_fact rows with a p99 "
                                     "(no serving suite ran or none served a request)")
    if baseline_run_id is None:
        for row in rows:
            row.update(p99_backed=None, flagged=None, why="no baseline")
        return result("unavailable", "no baseline run: 'p99 doubled' is a change between runs; the run's own "
                                     "p50/p99/mean and tail ratio are listed (give --baseline RUN_ID)")
    min_requests = requests_needed(0.99, P99_CONFIDENCE)
    # an ok replicate whose point the load generator judged invalid (not for its request count) makes the
    # point's rows not gateable in compare (stats.tails): the playbook judged the other replicates instead
    invalid_at: dict[tuple, list[int]] = {}
    for d in dropped:
        if d["replicate_ok"]:
            invalid_at.setdefault((d["run_id"], d["suite"], d["point"]), []).append(d["replicate"])
    thin, unjudged = [], []
    for row in rows:
        bad = [(rid, invalid_at[(rid, row["suite"], row["point"])]) for rid in (run_id, baseline_run_id)
               if (rid, row["suite"], row["point"]) in invalid_at]
        why_not = None
        if row.get("p99_censored"):
            why_not = (f"{row['p99_censored']}'s p99 falls among its errored or timed-out requests (a value the "
                       "requests cannot show; compare calls such a row not gateable)")
        elif bad:
            rid, reps = bad[0]
            why_not = (f"{'run' if rid == run_id else 'baseline'} {rid}'s replicate(s) "
                       f"{', '.join(f'r{r}' for r in reps)} at this point were judged invalid by the load generator "
                       "(compare calls such a row not gateable, as the pooled requests would be a subset)")
        if why_not is not None:
            row.update(p99_backed=False, flagged=False, why=f"not judged: {why_not}")
            unjudged.append(row)
            continue
        fewest, what = _fewest(row)
        row["p99_backed"] = fewest is not None and fewest >= min_requests
        flagged, suspected, why = _judge(row, min_requests)
        if fewest is not None and not row["p99_backed"] and not suspected:
            why += f"; not judged: p99 from {fewest:g} {what} (< {min_requests})"
        row.update(flagged=flagged, why=why)
        if suspected:
            thin.append(row)
    compared = [r for r in rows if r["p99_change"] is not None]
    # Only a p99 from enough requests is judged, either way: a thin one is no more evidence of
    # "clear" than of "flagged".
    backed = [r for r in compared if r["p99_backed"]]
    hits = [r for r in backed if r["flagged"]]
    if hits:
        worst = max(hits, key=lambda r: r["p99_change"])
        return result("flagged", f"{len(hits)} of {len(backed)} point/bucket/quantity rows with enough requests: p99 "
                                 f"≥ ×{P99_GROWTH_MIN:g} the baseline's with the mean up by at most {MEAN_BAND:.0%}; worst "
                                 f"{worst['suite']} {worst['point']} bucket {worst['bucket']} {worst['quantity']}: "
                                 f"{worst['why']}")
    if unjudged:
        # a p99 among the errored or timed-out requests, or from a subset of the replicates, is no evidence
        # of "clear": compare calls the row not gateable (before, such a row fell out of the count and the
        # answer read "clear")
        worst = unjudged[0]
        return result("unavailable", f"{len(unjudged)} point/bucket/quantity row(s) cannot be judged, e.g. "
                                     f"{worst['suite']} {worst['point']} bucket {worst['bucket']} {worst['quantity']}: "
                                     f"{worst['why'].removeprefix('not judged: ')}; the {len(backed)} row(s) compared "
                                     "with enough requests showed no tail regression")
    if not compared:
        return result("unavailable", f"baseline {baseline_run_id} has no judged serving rows (ok replicate, valid "
                                     "point) at the run's points and buckets")
    if thin:
        worst = max(thin, key=lambda r: r["p99_change"])
        return result("unavailable", f"{len(thin)} point/bucket/quantity rows look like a tail regression but their "
                                     f"p99 comes from too few requests to call it; worst {worst['suite']} "
                                     f"{worst['point']} bucket {worst['bucket']} {worst['quantity']}: {worst['why']} "
                                     "(run more requests per point or more replicates)")
    if not backed:
        most = max(compared, key=lambda r: _fewest(r)[0] or 0)
        n, what = _fewest(most)
        return result("unavailable", f"none of the {len(compared)} compared point/bucket/quantity rows has a p99 from "
                                     f"enough requests: at most {n:g} {what} in the run or the "
                                     f"baseline, {min_requests} needed for a bounded p99 at "
                                     f"{P99_CONFIDENCE:.0%} (run more requests per point or more replicates)")
    top = max(backed, key=lambda r: r["p99_change"])
    unjudged = len(compared) - len(backed)
    no_base = [r for r in rows if r["p99_change"] is None]
    skipped = (f"; {unjudged} row(s) with fewer than {min_requests} requests not judged" if unjudged else "") + (
        f"; {len(no_base)} row(s) the baseline has no judged rows for not judged (e.g. {no_base[0]['suite']} "
        f"{no_base[0]['point']} bucket {no_base[0]['bucket']})" if no_base else "")
    return result("clear", f"no point/bucket's p99 reached ×{P99_GROWTH_MIN:g} the baseline's with the mean up by at "
                           f"most {MEAN_BAND:.0%} "
                           f"({len(backed)} compared with enough requests; largest p99 change ×{top['p99_change']:.2f} "
                           f"at {top['suite']} {top['point']} bucket {top['bucket']} {top['quantity']}{skipped})")
