"""Which way is better for a metric row, as every reader of the run's numbers takes it.

A suite result row says ``higher`` or ``lower`` (``benchrun.suites.result.DIRECTIONS``). One kind
of row has neither: host CPU utilization (``benchrun.telemetry.summary``'s
``cpu_utilization_pct_mean`` / ``_p95``, case ``telemetry``) is the whole machine's busy share —
the suite's own work plus every other process's —, context for the outcomes, and less of it is
not better (a quieter background read "−22.5 % worse" when it was written ``higher``). Those rows
are read with direction :data:`NO_DIRECTION`: the comparison gives them no better/worse (their
change is shown as measured), the hot metrics' HELP says neither is better.

The result schema admits only higher and lower, so the telemetry summary still writes these rows
``higher`` (as every run before did) and this module decides how they are read: old and new runs
read alike, and a comparison across them sees one direction (``admit`` refuses a metric whose
direction differs between the arms).
"""

from __future__ import annotations

from benchrun.suites.result import DIRECTIONS

NO_DIRECTION = "none"
TELEMETRY_CASE = "telemetry"  # benchrun.telemetry.summary.CASE
DIRECTIONLESS = frozenset({"cpu_utilization_pct_mean", "cpu_utilization_pct_p95"})


def read_direction(case: object, name: object, written: str) -> str:
    """The direction a row is read with: :data:`NO_DIRECTION` for the rows that have none
    (:data:`DIRECTIONLESS` telemetry), else as written."""
    if str(case or "") == TELEMETRY_CASE and str(name) in DIRECTIONLESS:
        return NO_DIRECTION
    return written


def has_direction(direction: object) -> bool:
    """Whether more or less of the metric is better (``higher`` or ``lower``)."""
    return direction in DIRECTIONS
