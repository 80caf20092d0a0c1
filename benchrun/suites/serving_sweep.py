"""The ``serving_sweep`` suite (component layer): a latency-throughput sweep of a serving endpoint.

Parameters (``BENCHRUN_PARAMS``):

- ``concurrency``: list of concurrencies (closed loop; default ``[1, 4]``), or
- ``rates``: list of request rates in req/s (open loop), with ``arrival`` poisson | constant;
- ``requests_per_point`` (default 24) or ``duration_s`` (not both: refused); ``warmup`` (default: one request per
  stream, ``loadgen.config.warmup_for``);
- ``stages`` (instead of a list; one of ``concurrency``, ``rates``, ``stages``, the others
  refused): ``ramp:START:END:N`` or ``saturate:START:FACTOR:MAX`` of
  concurrencies or rates (saturate stops when goodput falls more than ``goodput_drop``,
  default 0.1, below the best stage); ``burstiness`` (gamma arrivals, 1 = Poisson). Stages are
  rates only when the sweep is open loop (below); ``arrival`` and ``burstiness`` on a closed
  loop are refused, as are ``speedup`` and ``trace_format`` without ``trace``;
- ``trace`` (a trace file: Mooncake JSONL, Azure CSV, plain CSV/JSONL) replayed at its own
  times instead of a sweep, with ``speedup`` and ``trace_format``; ``requests_per_point`` or
  ``duration_s`` then cut it (neither: the whole trace); it sends the trace's own prompts, so
  ``workload.dataset``, ``tokenizer``, ``session_turns`` and ``shared_prefix`` are refused with it;
- ``endpoint`` (optional): without it the synthetic reference server is started on a free
  loopback port, stopped afterwards, and the result is marked ``synthetic``;
- and the common ones of :mod:`benchrun.loadgen.suite` (api, model, mix, seed, workers,
  request_timeout_s, ignore_eos, refserver, verdict, ...), parsed by
  :func:`benchrun.loadgen.suite.common_settings` when the suite starts and by ``benchrun validate``.

The load model follows ``workload.concurrencyModel`` (closed_loop → concurrency, open_loop
→ rates); without one, whichever of ``concurrency`` / ``rates`` is given. Results: per-point
x per-bucket rows in ``serving``, headline metrics per point (``case`` = the point label),
``capacity_at_slo`` across the sweep when the workload declares an SLO (absent, the context
saying why, when no point counts: a p99 needs 368 requests a point, 24 by default), the per-request
parquet in ``raw/`` and one latency-throughput figure per bucket in ``figures/``.
"""

from __future__ import annotations

import math
from typing import Any, Mapping

from benchrun.errors import BenchrunError
from benchrun.suites._common import (
    Params,
    ParamError,
    StaticParams,
    check_known,
    float_param,
    int_list_param,
    int_param,
)
from benchrun.loadgen.params import COMMON_PARAMS, SERVING_METRICS, workload_conflicts
from benchrun.suites._runtime import SuiteContext, main


def _plural(names: list[str], one: str, many: str) -> str:
    return many if len(names) > 1 else one


def _load_conflicts(params: Mapping[str, Any], load_model: str) -> list[str]:
    """What the load-point parameters contradict in the sweep's load model ("" = inferred)."""
    has_c, has_r = "concurrency" in params, "rates" in params
    if not load_model:
        load_model = "open_loop" if has_r and not has_c else "closed_loop"
    out = []
    given = [n for n in ("concurrency", "rates", "stages") if n in params]
    if len(given) > 1:
        # each sets the whole sweep's load points: the others were dropped unseen
        out.append(f"parameters {' and '.join(given)} each set the sweep's load points; give one of concurrency, "
                   "rates, stages (stages are concurrencies or rates by workload.concurrencyModel)")
    shape = [n for n in ("arrival", "burstiness") if n in params]
    if shape and load_model == "closed_loop":
        out.append(f"parameter{_plural(shape, '', 's')} {' and '.join(shape)} shape{_plural(shape, 's', '')} "
                   "open-loop arrivals, but this sweep is closed loop (workload.concurrencyModel closed_loop, or none and "
                   "no 'rates'; 'stages' are then concurrencies): set workload.concurrencyModel: open_loop or give "
                   f"'rates', or leave {_plural(shape, 'it', 'them')} out")
    if "stages" not in params and load_model == "closed_loop" and has_r and not has_c:
        out.append("workload.concurrencyModel is closed_loop but only 'rates' was given; give 'concurrency'")
    if "stages" not in params and load_model == "open_loop" and not has_r:
        out.append("workload.concurrencyModel is open_loop; give 'rates' (req/s list)")
    return out


def conflicts(params: Mapping[str, Any], workload: Mapping[str, Any]) -> list[str]:
    """The parameters that contradict each other or the workload, one message each: refused
    when the suite starts (the first), and reported by ``benchrun validate`` (every one), so a
    spec that would fail every replicate is not called valid."""
    replay = "trace" in params
    # parameters of another load model are refused, not accepted and ignored
    stray = [n for n in (("concurrency", "rates", "stages", "arrival", "burstiness", "goodput_drop") if replay
                         else ("speedup", "trace_format")) if n in params]
    out = []
    if stray and replay:
        out.append(f"parameter trace replays the trace's own times; {', '.join(stray)} cannot apply to it: leave "
                   f"{_plural(stray, 'it', 'them')} out")
    elif stray:
        out.append(f"parameter{_plural(stray, '', 's')} {' and '.join(stray)} appl{_plural(stray, 'ies', 'y')} to a "
                   f"trace replay only: give 'trace', or leave {_plural(stray, 'it', 'them')} out")
    if "requests_per_point" in params and "duration_s" in params:
        # a sweep dropped the request count unseen; a replay cut the trace by one of them
        out.append("parameters requests_per_point and duration_s each set how long a point runs; give one of "
                   "requests_per_point (a request count), duration_s (seconds)")
    out += workload_conflicts(params, workload)
    if not replay:
        return out + _load_conflicts(params, str(workload.get("concurrencyModel") or "").strip())
    # the replay sends the trace's own prompts; content would be reported as used, never sent
    given = (["workload.dataset"] if workload.get("dataset") else []) + [
        f"parameter {n}" for n in ("tokenizer", "session_turns", "shared_prefix", "prompt_salt") if params.get(n) is not None]
    if given:
        out.append(f"parameter trace replays the trace's own prompts (its lengths and prefix blocks); "
                   f"{', '.join(given)} cannot apply to it: leave {_plural(given, 'it', 'them')} out, or run the "
                   "trace in a suite of its own")
    return out


def sweep_points(ctx: Params, load_model: str) -> list:
    """The sweep's load points from the parameters and the workload's concurrency model; two points
    with one label (``concurrency: [4, 4]``, rates 1.0 and 1.0000001 both ``rate=1``) are refused: each
    would write its own rows of one (suite, point, metric), which the comparison refuses to merge."""
    points = _sweep_points(ctx, load_model)
    labels = [p.label for p in points]
    repeated = sorted({x for x in labels if labels.count(x) > 1})
    if repeated:
        raise BenchrunError(f"serving_sweep: load point{'s' if len(repeated) > 1 else ''} {', '.join(repeated)} "
                            "given more than once (points are told apart by their label): give each once")
    return points


def _sweep_points(ctx: Params, load_model: str) -> list:
    from benchrun.loadgen.runner import LoadPoint

    for problem in _load_conflicts(ctx.params, load_model):
        raise BenchrunError(f"serving_sweep: {problem}")
    if not load_model:
        load_model = "open_loop" if "rates" in ctx.params and "concurrency" not in ctx.params else "closed_loop"
    arrival = str(ctx.param("arrival", "poisson"))
    burstiness = float_param(ctx, "burstiness", 1.0)
    if burstiness != 1.0 and arrival == "poisson":
        arrival = "gamma"
    try:
        if "stages" in ctx.params:
            from benchrun.loadgen.schedule import parse_stages

            points, _ = parse_stages(str(ctx.params["stages"]), load_model, arrival=arrival, burstiness=burstiness)
            return points
        if load_model == "closed_loop":
            return [LoadPoint("closed_loop", c) for c in int_list_param(ctx, "concurrency", [1, 4], minimum=1)]
        values = ctx.params["rates"] if isinstance(ctx.params["rates"], list) else [ctx.params["rates"]]
        rates = [float(r) for r in values]
        if not rates or not all(0 < r < math.inf for r in rates):
            raise ValueError(f"rates {values!r} must be a non-empty list of positive, finite req/s")
        return [LoadPoint("open_loop", r, arrival, burstiness) for r in rates]
    except ParamError:
        raise
    except (TypeError, ValueError) as exc:
        raise BenchrunError(f"serving_sweep: bad load points: {exc}") from None


# the parameters the suite takes: the load generator's and its own (checked when it starts, and by
# `benchrun validate`)
PARAMETERS = COMMON_PARAMS + ("concurrency", "rates", "requests_per_point", "duration_s", "stages", "burstiness",
                              "goodput_drop", "trace", "speedup", "trace_format")
METRICS = SERVING_METRICS  # the metrics it may report (`benchrun validate` reads them)
# the parameter that fixes the requests of a point, and its default (`benchrun validate` checks a
# primary percentile can be judged from them)
REQUEST_COUNT = ("requests_per_point", 24)


def check_parameters(params: dict[str, Any], *, nodes: int = 1, workload: dict[str, Any] | None = None) -> None:
    """Refuse, before any run, the load points and counts every replicate would refuse (ParamError).
    A trace is read when the suite starts (the file may live only where it runs): its options and
    its path's form (a .csv or .jsonl, no '..': :func:`benchrun.loadgen.trace.spec_path_error`) are
    checked here, the file is not. The common options are parsed as the suite parses them
    (:func:`benchrun.loadgen.suite.common_settings`), nothing started or reached."""
    from benchrun.loadgen.suite import common_settings, workload_inputs

    ctx = StaticParams("serving_sweep", params, nodes=nodes, workload=workload)
    try:
        check_known(ctx, PARAMETERS)
        _, _, declared, _, _, _ = workload_inputs(ctx)
        if "duration_s" in params:
            float_param(ctx, "duration_s", 0.0)
        if "trace" in params:
            from benchrun.loadgen.trace import spec_path_error

            problem = spec_path_error(params["trace"])
            if problem:
                raise ParamError(problem)
            float_param(ctx, "speedup", 1.0)
            if "requests_per_point" in params:
                int_param(ctx, "requests_per_point", 1, minimum=1)
        else:
            sweep_points(ctx, declared)
            if "duration_s" not in params:
                int_param(ctx, *REQUEST_COUNT, minimum=1)
            float_param(ctx, "goodput_drop", 0.1)
        common_settings(ctx)  # the common options, as run_serving_suite parses them
    except ParamError:
        raise
    except BenchrunError as exc:
        raise ParamError(str(exc)) from None


def run(ctx: SuiteContext) -> None:
    """Sweep the load points and report per point and bucket."""
    from benchrun.loadgen.suite import run_serving_suite, workload_inputs

    check_known(ctx, PARAMETERS)
    _, _, load_model, _, _, _ = workload_inputs(ctx)
    duration = float_param(ctx, "duration_s", 0.0) if "duration_s" in ctx.params else None
    for problem in conflicts(ctx.params, ctx.workload or {}):
        raise BenchrunError(f"serving_sweep: {problem}")
    if "trace" in ctx.params:
        from benchrun.loadgen import trace as tracing

        speedup = float_param(ctx, "speedup", 1.0)
        path = tracing.checked_path(ctx.params["trace"])  # a trace file, never another file of this machine
        entries = tracing.load_trace(path, str(ctx.param("trace_format", "auto")))
        requests = int_param(ctx, "requests_per_point", 1, minimum=1) if "requests_per_point" in ctx.params else None
        point = tracing.trace_point(tracing.select(entries, requests, duration, speedup), speedup)
        ctx.context["trace"] = tracing.describe(entries, str(ctx.params["trace"]), speedup)
        run_serving_suite(ctx, [point], requests, duration, sweep=False, extra={"trace": entries})
        return
    points = sweep_points(ctx, load_model)
    requests = None if duration is not None else int_param(ctx, *REQUEST_COUNT, minimum=1)
    stages = str(ctx.params.get("stages", ""))
    extra = {"stop_when_goodput_falls": stages.startswith("saturate:"), "goodput_drop": float_param(ctx, "goodput_drop", 0.1)}
    result = run_serving_suite(ctx, points, requests, duration, extra=extra)
    explain_absent_capacity(ctx, result)


def explain_absent_capacity(ctx: SuiteContext, result: Any) -> None:
    """Add to the context's "absent" note on ``capacity_at_slo`` why no point counted, with the
    requests a point needs when that is the cause (the default 24 a point bound no p99)."""
    note = ctx.context.get("capacity_at_slo")
    if result.capacity_at_slo is not None or not isinstance(note, str) or not note.startswith("absent"):
        return
    from benchrun.loadgen.metrics import VerdictPolicy, capacity_reason
    from benchrun.loadgen.suite import workload_inputs

    slo = workload_inputs(ctx)[3]
    confidence = VerdictPolicy.from_dict(ctx.params.get("verdict")).confidence  # checked by run_serving_suite
    why = capacity_reason([s for s in result.summaries if s["bucket"] == "all"], slo, confidence,
                          more="parameter requests_per_point, or a longer duration_s")
    if why:
        ctx.context["capacity_at_slo"] = f"{note}; {why}"


if __name__ == "__main__":
    main(run)
