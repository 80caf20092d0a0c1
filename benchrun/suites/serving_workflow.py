"""The ``serving_workflow`` suite (end-to-end layer): one customer-like serving point.

Parameters (``BENCHRUN_PARAMS``): ``concurrency`` (default 4; closed loop) or ``rate``
(req/s; open loop, ``arrival`` poisson | constant, refused on a closed loop); not both, and
neither against ``workload.concurrencyModel`` (``rate`` under closed_loop, ``concurrency`` alone
under open_loop): refused. ``requests`` (default 32) or ``duration_s`` (not both: refused),
``warmup`` (default: one request per stream, ``loadgen.config.warmup_for``), ``endpoint``
(optional; without it the synthetic reference server is started and the result marked
``synthetic``), and the common ones of :mod:`benchrun.loadgen.suite` (checked by
:func:`benchrun.loadgen.suite.common_settings`, here and by ``benchrun validate``). The load
model follows ``workload.concurrencyModel`` when it is set. Results as for ``serving_sweep``,
for a single point.
"""

from __future__ import annotations

import math
from typing import Any, Mapping

from benchrun.errors import BenchrunError
from benchrun.suites._common import Params, ParamError, check_known, float_param, int_param
from benchrun.loadgen.params import COMMON_PARAMS, HEADLINE_METRICS, workload_conflicts
from benchrun.suites._runtime import SuiteContext, main

# the parameters the suite takes: the load generator's and its own (checked when it starts, and by
# `benchrun validate`)
PARAMETERS = COMMON_PARAMS + ("concurrency", "rate", "requests", "duration_s")
METRICS = HEADLINE_METRICS  # the metrics it may report: one point, no capacity_at_slo (`benchrun validate` reads them)
# the parameter that fixes the requests of a point, and its default (`benchrun validate` checks a
# primary percentile can be judged from them)
REQUEST_COUNT = ("requests", 32)


def _load_model(params: Mapping[str, Any], declared: str) -> str:
    """The workload's concurrency model, or without one whichever of rate / concurrency is given."""
    return declared or ("open_loop" if "rate" in params and "concurrency" not in params else "closed_loop")


def conflicts(params: Mapping[str, Any], workload: Mapping[str, Any]) -> list[str]:
    """The parameters that contradict each other or the workload's load model, one message each:
    refused when the suite starts (the first), and reported by ``benchrun validate``."""
    load_model = _load_model(params, str(workload.get("concurrencyModel") or "").strip())
    out = []
    if "concurrency" in params and "rate" in params:  # one was dropped unseen
        out.append("parameters concurrency and rate each set the point's load; give one of concurrency "
                   "(closed loop), rate (open loop)")
    elif load_model == "open_loop" and "rate" not in params:
        out.append("workload.concurrencyModel is open_loop; give 'rate' (req/s)")
    elif load_model == "closed_loop" and "rate" in params:  # the rate was dropped unseen: c=4 ran instead
        out.append("workload.concurrencyModel is closed_loop but only 'rate' was given; give 'concurrency', or set "
                   "workload.concurrencyModel: open_loop")
    if load_model == "closed_loop" and "arrival" in params:  # refused, not dropped: a closed loop has no arrival process
        out.append("parameter arrival shapes open-loop arrivals, but this point is closed loop: set "
                   "workload.concurrencyModel: open_loop and give 'rate', or leave it out")
    if "requests" in params and "duration_s" in params:  # the request count was dropped unseen
        out.append("parameters requests and duration_s each set how long the point runs; give one of requests "
                   "(a request count), duration_s (seconds)")
    return out + workload_conflicts(params, workload)


def settings(ctx: Params) -> tuple[Any, int | None, float | None]:
    """(load point, requests, duration_s) from the parameters, checked: the suite's first step, and
    ``benchrun validate``'s (``benchrun.spec.builtin_suites.check_parameters``)."""
    from benchrun.loadgen.runner import LoadPoint
    from benchrun.loadgen.suite import common_settings, workload_inputs

    check_known(ctx, PARAMETERS)
    _, _, declared, _, _, _ = workload_inputs(ctx)
    for problem in conflicts(ctx.params, ctx.workload or {}):
        raise BenchrunError(f"serving_workflow: {problem}")
    try:
        if _load_model(ctx.params, declared) == "open_loop":
            rate = float_param(ctx, "rate", 1.0)
            if rate == math.inf:
                raise ParamError(f"parameter rate={ctx.params['rate']!r} must be a finite number of req/s")
            point = LoadPoint("open_loop", rate, str(ctx.param("arrival", "poisson")))
        else:
            point = LoadPoint("closed_loop", int_param(ctx, "concurrency", 4, minimum=1))
    except ParamError:
        raise
    except (TypeError, ValueError) as exc:
        raise BenchrunError(f"serving_workflow: bad load point: {exc}") from None
    duration = float_param(ctx, "duration_s", 0.0) if "duration_s" in ctx.params else None
    requests = None if duration is not None else int_param(ctx, *REQUEST_COUNT, minimum=1)
    common_settings(ctx)  # the common options, as run_serving_suite parses them
    return point, requests, duration


def run(ctx: SuiteContext) -> None:
    """Run one load point end to end and report it."""
    from benchrun.loadgen.suite import run_serving_suite

    point, requests, duration = settings(ctx)
    run_serving_suite(ctx, [point], requests, duration, sweep=False)


if __name__ == "__main__":
    main(run)
