"""Playbook ``scheduler_backpressure``: jobs spend too long pending (the local proxy for queueing)."""

from __future__ import annotations

from pathlib import Path

from benchrun.playbooks.base import PlaybookResult, check_runs, fetch

NAME = "scheduler_backpressure"
QUESTION = "Jobs spend too long pending and cluster utilization regresses: where did the time to start grow?"

# "Too long": a wait is at least this multiple of the baseline's ...
PENDING_GROWTH_MIN = 1.5
# ... and longer by at least this many seconds (a 2 ms → 4 ms spawn is not backpressure).
PENDING_ABS_MIN_S = 0.05

# What the warehouse does not hold, said in every answer rather than guessed.
NOT_RECORDED = ("Kubernetes/Kueue pending and admission times and cluster utilization are not in the warehouse "
                "(no fact column records them; a local run never queues in Kueue); the proxy here is the run's "
                "own submission→start wait and job_startup's launch timeline")

# Time to start, for the run ($1) and its baseline ($2, NULL for none): the run's own wait
# between submission and start (benchmark_run_fact created_utc → started_utc, seconds),
# and every launch-timeline or pending/queue-wait metric in measurement_fact (job_startup's
# launch_to_*_p50_s / _p99_s; any suite's *pending* / *queue_wait* metric), medians over ok
# replicates; side by side with the run-over-baseline ratio and difference.
SQL = """
WITH waits AS (
    SELECT run_id, 'benchmark_run_fact' AS source, 'run_pending_s' AS metric,
           date_diff('microsecond', created_utc, started_utc) / 1e6 AS value_s, 1 AS n_replicates,
           any_value(selected_scheduler_path) AS scheduler_path
    FROM benchmark_run_fact
    WHERE run_id IN ($1, $2) AND created_utc IS NOT NULL AND started_utc IS NOT NULL
    GROUP BY run_id, created_utc, started_utc
    UNION ALL
    SELECT run_id, 'measurement_fact:' || suite AS source, metric, median(value), count(*), NULL
    FROM measurement_fact
    WHERE run_id IN ($1, $2) AND status = 'ok' AND value IS NOT NULL AND unit = 's'
      AND (suite = 'job_startup' OR metric LIKE '%pending%' OR metric LIKE '%queue_wait%')
    GROUP BY run_id, suite, metric
)
SELECT r.source, r.metric, r.n_replicates, r.value_s, b.value_s AS base_value_s,
       r.value_s - b.value_s AS delta_s, r.value_s / nullif(b.value_s, 0) AS change,
       r.scheduler_path
FROM waits r
LEFT JOIN waits b ON b.run_id = $2 AND b.source = r.source AND b.metric = r.metric
WHERE r.run_id = $1
ORDER BY r.source, r.metric
"""

# Columns the terminal table shows (--json gives every column).
DISPLAY = ("source", "metric", "n_replicates", "value_s", "base_value_s", "delta_s", "change", "flagged")


def scheduler_backpressure(home: Path, run_id: str, baseline_run_id: str | None) -> PlaybookResult:
    """Per wait: did it grow by ≥ PENDING_GROWTH_MIN× and ≥ PENDING_ABS_MIN_S against the baseline?"""
    check_runs(home, run_id, baseline_run_id)
    rows, digest = fetch(SQL, home, [run_id, baseline_run_id])

    def result(verdict: str, reason: str) -> PlaybookResult:
        return PlaybookResult(NAME, QUESTION, verdict, f"{reason}. {NOT_RECORDED}", rows, digest, SQL,
                              run_id, baseline_run_id)

    if not rows:
        return result("unavailable", f"run {run_id} has neither start times nor launch-timeline metrics")
    if baseline_run_id is None:
        for row in rows:
            row.update(flagged=None, why="no baseline")
        return result("unavailable", "no baseline run: 'too long' is judged against one (give --baseline RUN_ID); "
                                     "the run's own waits are listed")
    for row in rows:
        change, delta = row["change"], row["delta_s"]
        if change is None:
            row.update(flagged=False, why="not in the baseline")
            continue
        grew = change >= PENDING_GROWTH_MIN and delta >= PENDING_ABS_MIN_S
        row.update(flagged=grew, why=f"×{change:.2f}, {delta:+.3f} s")
    compared = [r for r in rows if r["change"] is not None]
    if not compared:
        return result("unavailable", f"baseline {baseline_run_id} has none of the run's waits")
    hits = [r for r in compared if r["flagged"]]
    if hits:
        listed = ", ".join(f"{r['metric']} {r['why']}" for r in hits)
        return result("flagged", f"{len(hits)} of {len(compared)} waits grew ≥ ×{PENDING_GROWTH_MIN:g} and "
                                 f"≥ {PENDING_ABS_MIN_S:g} s: {listed}")
    return result("clear", f"no wait grew ≥ ×{PENDING_GROWTH_MIN:g} and ≥ {PENDING_ABS_MIN_S:g} s "
                           f"({len(compared)} compared)")
