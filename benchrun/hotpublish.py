"""A run's hot metrics published from its status as it is now: rendered within the spec's budget,
written as a textfile and pushed (a push replaces the run's group), and where recorded in status.json
(``hot_metrics_ref``, the ``HotMetricsPushed`` condition). The ``hot_metrics`` asset publishes them
while the run is Analyzing, ``run_status`` again once the phase is final, and :mod:`benchrun.runend`
again whenever the run ends later still — failed by a publication step after Succeeded, by the
reaper, a cancel or the failure sensors: before, the phase gauge kept saying Succeeded (or
Analyzing) and an alert on Failed never fired (review 2026-12-07)."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:
    from benchrun.rundir import RunDir

log = logging.getLogger(__name__)


def primary_metrics(spec: Any) -> list[str]:
    """The primaries of the spec's enabled metric families (their series are kept first when the budget is short)."""
    out: list[str] = []
    for family in (spec.metrics.training, spec.metrics.inference):
        if family is not None and family.enabled:
            out.extend(family.primary)
    return out


def publish_hot_metrics(rd: "RunDir", warn: Callable[[str], None]) -> tuple[Any, Any]:
    """Render, write and push the run's hot metrics from its status now, and record where and how;
    a Pushgateway outage is said (``warn`` and the condition), never the run's failure."""
    from benchrun import hotmetrics
    from benchrun.pinned import load_pinned

    spec = load_pinned(rd).run.spec
    hot = spec.sinks.hot_metrics
    hm, pub = hotmetrics.publish_run(rd.path, rd.read_status(), hot.cardinality_budget,
                                     primary=primary_metrics(spec), home=rd.home, retention_days=hot.retention_days)
    rd.update_status(hot_metrics_ref=pub.pushed_to or str(pub.textfile))
    if pub.push_error is not None:
        warn(pub.note)
        rd.set_condition("HotMetricsPushed", False, "PushgatewayUnavailable", pub.note)
    elif pub.pushed_to is not None:
        rd.set_condition("HotMetricsPushed", True, "Pushed", pub.note)
    return hm, pub


def publish_again(rd: "RunDir") -> None:
    """The run's hot metrics again with its phase now, when they were published before (nothing
    otherwise: a run that ended before its hot_metrics step has none to correct). Never raises: the
    phase is recorded already, and hot metrics never decide it."""
    try:
        if rd.exists() and rd.read_status().get("hot_metrics_ref"):
            publish_hot_metrics(rd, log.warning)
    except Exception as exc:  # noqa: BLE001 - as above
        log.warning("run %s: hot metrics not published again with its phase: %s", rd.run_id, exc)
