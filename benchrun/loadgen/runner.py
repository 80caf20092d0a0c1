"""Load models (closed and open loop), load-point sweeps, worker processes and exact merging.

A sweep is a list of load points run one after the other. Before the first, one probe
settles the server's dialect (:mod:`benchrun.loadgen.dialect`). Each point has a warm-up phase
(``warmup`` requests, by default one per stream, under the same load model, run to completion
and excluded from every metric); then every stream's connection is opened (and kept alive)
before the go time, so the first wave does not wait on connection set-up; then the measured phase, which ends after ``requests_per_point`` requests or
after ``duration_s`` seconds (no new request is sent after the deadline; those in flight
finish and count).

- Closed loop (``concurrency``): ``c`` slots, each sends its next request the moment the
  previous one returns. A request's *scheduled* time is when its slot became free, so the
  schedule lag is the client's own overhead.
- Open loop (``rate``): arrivals at ``rate`` req/s, Poisson (exponential gaps) or constant,
  sent on schedule whether or not earlier requests have finished. For a request-count end
  ``n - 1`` gaps are drawn and rescaled so the schedule spans exactly ``(n - 1) / rate``, the
  first request at 0, which makes the schedule's own rate equal the offered one (vLLM's bench
  serve draws ``n`` gaps and rescales them to ``n / rate``: its first request waits one gap).
  The measured schedule is one draw at the full rate whatever ``workers`` is, so a seed sends
  the same schedule with any worker count; the schedule lag is ``send - scheduled``
  (coordinated omission made visible).

With ``workers > 1`` every point is split across worker processes (concurrency split as evenly
as integers allow, and a closed loop's request count in proportion to each worker's streams, so
they all end together and the whole window runs at ``c``; open loop: request counts split evenly
and one schedule at ``rate`` dealt to the workers, see :func:`benchrun.loadgen.schedule.dealt_arrivals`). Workers return
their raw request rows; the parent concatenates them and computes every percentile once
over the merged rows. Draws are seeded per (seed, point, worker), so a sweep with the same
seed and worker count sends the same requests. The workers' measured phases share one
schedule origin (the go time the parent hands them after every warm-up): a worker that wakes
late sends late and shows it as schedule lag; its schedule is not shifted.
"""

from __future__ import annotations

import asyncio
import dataclasses
import gc
import logging
import math
import os
import socket
import sys
import time
from dataclasses import asdict
from typing import Any, Callable

import numpy as np

from benchrun.errors import BenchrunError
from benchrun.loadgen import client as http
from benchrun.loadgen import dialect, servermetrics, trace
from benchrun.loadgen.config import ARRIVALS, LOAD_MODELS, LoadPoint, SweepConfig, SweepResult, warmup_for  # noqa: F401  (re-exported)
from benchrun.loadgen.metrics import capacity_at_slo, load_stats, summarize, window_s
from benchrun.loadgen.records import _row, _Spec, _specs, _WorkerState  # noqa: F401  (_Spec, _WorkerState re-exported)
from benchrun.loadgen.content import bucket_labels, content_summary
from benchrun.loadgen.loadpods import Stopped
from benchrun.loadgen.schedule import _phase, _probe_loop
from benchrun.loadgen.sessions import session_phase, session_plans
from benchrun.loadgen.workers import _recv, _send, _Workers
from benchrun.loadgen.workload import split_by, split_evenly

log = logging.getLogger(__name__)
CLOCK = time.perf_counter_ns


async def _run_point(
    cfg: SweepConfig,
    point_index: int,
    worker: int,
    n_workers: int,
    nonce: str,
    start_at_ns: int | None,
    barrier: Callable[[], int] | None = None,
    resolved: http.Resolved | None = None,
) -> dict[str, Any]:
    """One worker's share of one point: warm-up, (barrier,) measured phase, raw rows; ``resolved``:
    the sweep's one lookup of the endpoint's host, which every connection uses."""
    point = cfg.points[point_index]
    st = _WorkerState(cfg, worker)
    if point.load_model == "trace":
        return await _run_trace_point(cfg, point_index, worker, n_workers, nonce, start_at_ns, barrier, resolved)
    if point.load_model == "closed_loop":
        active = min(n_workers, int(point.offered_load))
        weights = split_evenly(int(point.offered_load), active)  # each worker's streams
        conc_w = weights[worker] if worker < active else 0
        rate_w = 0.0
    else:
        active = n_workers
        weights = [1] * n_workers
        conc_w = 0
        rate_w = point.offered_load / n_workers
        st.share = (worker, n_workers)
    result: dict[str, Any] = {"worker": worker, "rows": [], "warmup_rows": 0, "warmup_errors": 0, "cpu_frac": None, "loop_lag_ms": [], "connections": 0}
    if worker >= active:
        return result
    # requests in proportion to the worker's streams (closed loop: c=17 over 2 workers is 9 and 8
    # streams sending 180 and 160 of 340), so every worker's streams end together and the whole
    # window runs at c; an even split (170 each) left the last part of the window at c=8
    shares = split_by(cfg.requests_per_point, weights) if cfg.requests_per_point is not None else None
    n_w = shares[worker] if shares is not None else None
    warm_w = split_by(warmup_for(cfg, point), weights)[worker]
    sessions = cfg.content is not None and cfg.content.sessions is not None
    if n_w == 0 and not sessions:
        return result
    # constant arrivals from several workers interleave: worker w starts w/rate later
    phase_s = (worker / point.offered_load) if point.load_model == "open_loop" and point.arrival == "constant" else 0.0
    if sessions:
        # the point's sessions are planned once and dealt whole to the workers (loadgen.sessions)
        specs = session_plans(cfg, point_index, worker, nonce, warm_w, cfg.requests_per_point, active, weights)
        run_phase = session_phase
    else:
        specs, run_phase = _specs(cfg, st.endpoint, point_index, worker, nonce, warm_w, n_w, active, shares), _phase
    warm_specs = [next(specs) for _ in range(warm_w)]
    # a count-ended phase is built in full before it starts; a timed one lazily
    measured: Any = list(specs) if n_w is not None else specs
    if sessions and n_w is not None:
        n_w = sum(len(plan.turns) for plan in measured)  # this worker's turns, in whole sessions
        if not n_w:
            return result
    return await _measure(cfg, st, point, point_index, result, warm_specs, measured, n_w, conc_w, rate_w, phase_s, start_at_ns, barrier,
                          run_phase, resolved)


async def _run_trace_point(cfg: SweepConfig, point_index: int, worker: int, n_workers: int, nonce: str,
                           start_at_ns: int | None, barrier: Callable[[], int] | None,
                           resolved: http.Resolved | None = None) -> dict[str, Any]:
    """One worker's share of a trace replay: every ``n_workers``-th request of the trace."""
    point = cfg.points[point_index]
    st = _WorkerState(cfg, worker)
    result: dict[str, Any] = {"worker": worker, "rows": [], "warmup_rows": 0, "warmup_errors": 0, "cpu_frac": None, "loop_lag_ms": [], "connections": 0}
    entries = trace.select(tuple(cfg.trace or ()), cfg.requests_per_point, cfg.duration_s, point.speedup)
    share = trace.worker_share(entries, worker, n_workers)
    if not share:
        return result
    warm_w = split_evenly(warmup_for(cfg, point), n_workers)[worker]
    # the warm-up's prompts carry none of the trace's prefix blocks: replaying the first entries' blocks
    # filled the server's prefix cache for the measured requests (their cached_tokens read the warm-up's)
    warm_specs = trace.trace_specs(cfg, st.endpoint, point_index, worker, nonce,
                                   [(i, dataclasses.replace(e, prefix_ids=())) for i, e in share[:warm_w]], "wu")
    measured = trace.trace_specs(cfg, st.endpoint, point_index, worker, nonce, share, "")
    # connections opened before the go time: one second of the trace's mean rate, at most 256
    rate_w = point.offered_load / n_workers
    return await _measure(cfg, st, point, point_index, result, warm_specs, measured, len(measured), 0, rate_w, 0.0, start_at_ns, barrier,
                          resolved=resolved)


async def _measure(cfg: SweepConfig, st: _WorkerState, point: LoadPoint, point_index: int, result: dict[str, Any],
                   warm_specs: list[Any], measured: Any, n_w: int | None, conc_w: int, rate_w: float, phase_s: float,
                   start_at_ns: int | None, barrier: Callable[[], int] | None,
                   run_phase: Callable[..., Any] = _phase, resolved: http.Resolved | None = None) -> dict[str, Any]:
    """Warm-up, connections opened, (barrier,) the measured phase, raw rows. ``run_phase``: the
    schedule's phase, or the sessions' (loadgen.sessions); ``resolved``: the addresses every
    connection goes to (None: the pool looks the host up at its first connection)."""
    warm_w = len(warm_specs)
    pool = http.ConnectionPool(st.endpoint, resolved=resolved)
    if start_at_ns is not None:
        delay = start_at_ns - CLOCK()
        if delay > 0:
            await asyncio.sleep(delay / 1e9)
    try:
        if warm_w:
            if point.load_model == "trace":  # the trace's first requests, a few at a time, not on its clock
                wpoint, wconc = LoadPoint("closed_loop", min(4, warm_w)), min(4, warm_w)
            else:
                wpoint, wconc = point, (min(conc_w, warm_w) if conc_w else 0)
            wdone = await run_phase(st, pool, warm_specs, warm_w, wpoint, wconc, rate_w, phase_s, None, 2, point_index)
            result["warmup_rows"] = len(wdone)
            result["warmup_errors"] = sum(1 for _, o, _ in wdone if o.error is not None)
        if cfg.preconnect:
            # every stream's connection open (and kept alive) before the go time, so the first
            # wave does not wait on the server accepting connections one after another
            result["preconnected"] = await pool.fill(conc_w if conc_w else max(1, min(256, math.ceil(rate_w))))
        opened_before = pool.opened
        gc.collect()
        gc.freeze()  # older objects out of the collector's way while measuring
        # No cyclic collection while measuring: a collection stops the loop for milliseconds, every
        # stream's next bytes wait unread in the kernel, which merges them and keeps the later stamp;
        # that was the p99 TTFT error at 32 streams (benchmarks/README.md). The measured path makes no
        # reference cycles (0 found after 640 requests at 32 streams), so refcounting frees it all;
        # the probe loop still collects past GC_BUDGET net allocations, and the point records it.
        gc_was_enabled = gc.isenabled()
        gc.disable()
        try:
            go_ns = None
            if barrier is not None:
                # all workers start measuring together, on one schedule (nothing is in flight now)
                go_ns = barrier()
                delay = go_ns - CLOCK()
                if delay > 0:
                    await asyncio.sleep(delay / 1e9)
            stop = asyncio.Event()
            lags: list[float] = []
            gc_forced = [0]
            probe = asyncio.ensure_future(_probe_loop(lags, stop, gc_forced=gc_forced))
            cpu0, wall0 = time.process_time(), time.perf_counter()
            done = await run_phase(st, pool, measured, n_w, point, conc_w, rate_w, phase_s, cfg.duration_s, 1, point_index, go_ns)
            cpu1, wall1 = time.process_time(), time.perf_counter()
        finally:
            if gc_was_enabled:
                gc.enable()
            gc.unfreeze()
        stop.set()
        await probe
        result["rows"] = [_row(st, spec, out, end, point, point_index) for spec, out, end in done]
        result["turns_not_sent"] = dict(st.turns_not_sent)
        if point.load_model == "trace":
            for row, (spec, _, _) in zip(result["rows"], done):
                row.update(trace.trace_fields(spec))
        result["cpu_frac"] = (cpu1 - cpu0) / max(wall1 - wall0, 1e-9)
        result["loop_lag_ms"] = lags
        result["gc_collections_while_measuring"] = gc_forced[0]
        result["connections"] = pool.opened
        result["connections_opened_measured"] = pool.opened - opened_before
        result["connections_by_address"] = dict(pool.peers)
        result["kernel_timestamps"] = pool.kernel_timestamps
    finally:
        await pool.close()
    return result


def _worker_main() -> None:
    """Worker process (``python -m benchrun.loadgen.runner --worker``): framed pickles on
    stdin/stdout between this process and its own parent only."""
    inp, outp = sys.stdin.buffer, sys.stdout.buffer
    sys.stdout = sys.stderr  # stray prints must not corrupt the frames
    cfg, worker, n_workers, nonce, resolved = _recv(inp)
    _send(outp, ("ready",))

    def barrier() -> int:
        _send(outp, ("warm",))
        return int(_recv(inp)[1])

    while True:
        msg = _recv(inp)
        if msg is None:
            break
        point_index, start_at_ns = msg
        try:
            res = asyncio.run(_run_point(cfg, point_index, worker, n_workers, nonce, start_at_ns, barrier, resolved))
        except Exception as exc:  # reported to the parent, which fails the sweep
            res = {"fatal": f"{type(exc).__name__}: {exc}"}
        _send(outp, res)


def check_reachable(url: str, api: str | None = None, timeout_s: float = 5.0) -> http.Endpoint:
    """Fail fast with one clear line when nothing answers at ``url``."""
    try:
        ep = http.Endpoint.from_url(url, api)
    except http.EndpointError as exc:
        raise BenchrunError(str(exc)) from None
    try:
        asyncio.run(http.probe(ep, timeout_s))
    except (OSError, TimeoutError) as exc:
        if isinstance(exc, TimeoutError):
            why = f"no answer within {timeout_s:g} s"
        else:
            why = f"cannot resolve the host: {exc.strerror}" if isinstance(exc, socket.gaierror) else (
                os.strerror(exc.errno).lower() if exc.errno and exc.errno > 0 else str(exc)
            )
        raise BenchrunError(f"cannot reach {url} ({why}); start the server or fix --url/endpoint") from None
    return ep


def resolve_endpoint(ep: http.Endpoint) -> http.Resolved:
    """The endpoint's host looked up once, before any point: every connection of the sweep, in every
    worker, connects to these addresses (a lookup per connection ran inside the requests' latency)."""
    try:
        return http.resolve(ep.host, ep.port)
    except OSError as exc:
        why = exc.strerror if isinstance(exc, socket.gaierror) else str(exc)
        raise BenchrunError(f"cannot resolve the host of {ep.display()} ({why})") from None


def _server_info(ep: http.Endpoint) -> dict[str, Any]:
    try:
        models = asyncio.run(http.get_json(ep, ep.models_path, 5.0))
        data = models.get("data") if isinstance(models, dict) else None
        return {"models": [m.get("id") for m in data or [] if isinstance(m, dict)], "owned_by": sorted({str(m.get("owned_by")) for m in data or [] if isinstance(m, dict)})}
    except Exception as exc:  # informational only
        return {"models_error": f"{type(exc).__name__}: {exc}"}


def run_sweep(cfg: SweepConfig, progress: Callable[[dict[str, Any]], None] | None = None,
              pods: Any = None) -> SweepResult:
    """Run every point of ``cfg``; raw rows merged across workers, then summarised. ``pods``
    (:class:`benchrun.loadgen.loadpods.LoadPods`): this pod's share of a load Job's; pod 0 merges
    every pod's rows, pod k > 0 hands its rows to pod 0 and summarises nothing."""
    cfg.check()
    ep = check_reachable(cfg.url, cfg.api)
    resolved = resolve_endpoint(ep)
    server = _server_info(ep)
    # once, before any point: what the server accepts, how its streams end, its prompt overhead
    cfg, found = dialect.resolve(cfg, ep, server)
    context: dict[str, Any] = {
        "endpoint": ep.display(),
        "endpoint_resolution": {**resolved.info(), "note": "looked up once before the first point; every connection of "
                                "the sweep connects to these addresses (new connections take them in turn; one that refused is tried last), the Host header and TLS SNI keep the name"},
        "api": ep.api,
        "server": server,
        "server_dialect": found,
        "config": _config_dict(cfg),
        "clock": "time.perf_counter_ns (CLOCK_MONOTONIC)",
        "latency_origin": (
            "ttft_ms and e2e_ms are measured from the request's send, before a connection is taken from "
            "the pool: a connection opened inside a request counts in them, its set-up also recorded "
            "apart (connect_ms; connect_ms_* in the summary)"
            + ("; every stream's connection is opened before the measured phase's go time" if cfg.preconnect else "")
        ),
        "prompt_tokens_approximation": "one vocabulary word per requested input token; server usage recorded beside it",
        "points": [],
    }
    if cfg.content is not None:
        context["content"] = cfg.content.info()
        context["prompt_tokens_approximation"] = f"prompt tokens counted by {context['content']['tokenizer']}; server usage recorded beside it"
    nonce = os.urandom(3).hex()
    all_rows: list[dict[str, Any]] = []
    summaries: list[dict[str, Any]] = []
    server_samples: list[dict[str, Any]] = []
    scraper = None
    workers = None
    best_goodput = 0.0
    try:
        n_pods, pod = (pods.count, pods.index) if pods is not None else (1, 0)
        workers = _Workers(cfg, nonce, pod * cfg.workers, n_pods * cfg.workers, resolved) if cfg.workers > 1 else None
        if cfg.server_metrics_url:
            import tempfile

            scraper = servermetrics.Scraper(cfg.server_metrics_url, cfg.server_metrics_interval_s, tempfile.gettempdir())
            scraper.wait_first()  # a scrape before the first point's start bounds its counters
            context["server_metrics"] = {"url": cfg.server_metrics_url, "interval_s": cfg.server_metrics_interval_s,
                                         "scraper": "a child process (off the measuring event loop)", "mapping": "benchrun.loadgen.servermetrics.MAPPING"}
        for i, point in enumerate(cfg.points):
            t0 = time.perf_counter()
            met = []  # the load pods' barrier, passed once per point whether or not this pod has a share

            def barrier(i: int = i) -> int:
                met.append(pods.barrier(i))
                return met[-1]

            try:
                if workers is None:
                    results = [asyncio.run(_run_point(cfg, i, pod, n_pods, nonce, None, barrier if pods else None, resolved))]
                else:
                    results = workers.run_point(i, barrier if pods else None)
                if pods is not None and not met:
                    barrier()
            except Stopped as stopped:
                context["stages"] = {"stopped_after": cfg.points[i - 1].label, "reason": str(stopped)}
                break
            if pods is not None:
                for r in results:
                    r["pod"], r["go_late_ms"] = pod, pods.points[i]["go_late_ms"]
                if pod:  # pod 0 summarises the point over every pod's rows
                    pods.publish(i, results)
                    all_rows.extend(r for res in results for r in res["rows"])
                    context["points"].append({"point": point.label, "handed_to_pod_0": sum(len(r["rows"]) for r in results)})
                    continue
                results = results + pods.gather(i)
            rows = sorted((r for res in results for r in res["rows"]), key=lambda r: r["send_mono_ns"])
            pt_summaries = summarize_point(rows, point, results, cfg)
            for s in pt_summaries:
                s["n_warmup"] = sum(r["warmup_rows"] for r in results)
                s["synthetic"] = cfg.synthetic
            summaries.extend(pt_summaries)
            all_rows.extend(rows)
            info = {
                "point": point.label,
                "wall_s": time.perf_counter() - t0,
                "workers_active": sum(1 for r in results if r["rows"]),
                **({"load_pods": {"pods": n_pods, "go": pods.points[i],
                                  "requests_by_pod": [sum(len(r["rows"]) for r in results if r.get("pod") == k) for k in range(n_pods)],
                                  "go_late_ms_by_pod": [next((r.get("go_late_ms") for r in results if r.get("pod") == k), None) for k in range(n_pods)]}}
                   if pods is not None else {}),
                "warmup_requests": sum(r["warmup_rows"] for r in results),
                "warmup_errors": sum(r["warmup_errors"] for r in results),
                "client_cpu_by_worker": [r["cpu_frac"] for r in results],
                "connections_opened": sum(r["connections"] for r in results),
                "connections_preconnected": sum(r.get("preconnected", 0) for r in results),
                "connections_opened_while_measuring": sum(r.get("connections_opened_measured", 0) for r in results),
                "connections_by_address": _by_address(results),
                "gc_collections_while_measuring": sum(r.get("gc_collections_while_measuring") or 0 for r in results),
                "receive_timestamps": "kernel (SO_TIMESTAMPNS)" if any(r.get("kernel_timestamps") for r in results) else "event loop",
            }
            if scraper is not None and rows:
                a, b = min(r["send_mono_ns"] for r in rows), max(r["end_mono_ns"] for r in rows)
                scrapes = scraper.samples_after(b)
                got = servermetrics.for_point(scrapes, a, b)
                before, after = servermetrics.bounds(scrapes, a, b)
                pt_summaries[0]["server_metrics"] = info["server_metrics"] = servermetrics.summarize(
                    got, cfg.server_metrics_interval_s, window=(a, b), before=before, after=after)
                server_samples.extend(servermetrics.sample_rows(got, point.label, cfg.server_metrics_interval_s))
            context["points"].append(info)
            log.info("point %s: %d requests, %d errors, verdict %s", point.label, pt_summaries[0]["n_requests"], pt_summaries[0]["n_errors"], pt_summaries[0]["verdict"])
            if progress is not None:
                progress(pt_summaries[0])
            if cfg.stop_when_goodput_falls:
                why = _goodput_fell(pt_summaries[0], best_goodput, cfg)
                best_goodput = max(best_goodput, _goodput(pt_summaries[0], cfg))
                if why:
                    if pods is not None:
                        pods.stop(i, why)
                    context["stages"] = {"stopped_after": point.label, "reason": why, "points_not_run": [p.label for p in cfg.points[i + 1:]]}
                    log.info("sweep stopped after %s: %s", point.label, why)
                    break
    except BaseException as exc:
        # Whatever ends the sweep early (a signal, a worker failure, a bug), the points measured
        # so far travel with the exception so the caller can still write them.
        exc.partial_result = SweepResult(all_rows, summaries, None, context, server_samples)  # type: ignore[attr-defined]
        raise
    finally:
        if workers is not None:
            workers.close()
        if scraper is not None:
            scraper.close()
    cap = capacity_at_slo([s for s in summaries if s["bucket"] == "all"], cfg.slo)
    return SweepResult(all_rows, summaries, cap, context, server_samples)


def _goodput(summary: dict[str, Any], cfg: SweepConfig) -> float:
    """A stage's goodput: requests meeting the SLO per second, or completed requests per second without one."""
    v = summary.get("request_goodput") if cfg.slo is not None else summary.get("request_throughput_rps")
    return float(v or 0.0)


def _goodput_fell(summary: dict[str, Any], best: float, cfg: SweepConfig) -> str | None:
    """Why a sweep to saturation stops after this point (None: go on)."""
    g = _goodput(summary, cfg)
    what = "request_goodput" if cfg.slo is not None else "completed req/s (no SLO given)"
    if best > 0 and g < best * (1 - cfg.goodput_drop):
        return f"{what} {g:.3g} fell more than {cfg.goodput_drop:.0%} below the best so far ({best:.3g})"
    return None


def summarize_point(rows: list[dict[str, Any]], point: LoadPoint, results: list[dict[str, Any]], cfg: SweepConfig) -> list[dict[str, Any]]:
    """The ``all`` row and one row per mix bucket for one point's merged rows."""
    # the worst worker's figures, the worker named: one saturated worker makes the point invalid,
    # even when the others' samples would dilute it in a merged percentile
    cpu = [(r["cpu_frac"], _who(r)) for r in results if r.get("cpu_frac") is not None]
    lag_p99 = [(float(np.percentile(r["loop_lag_ms"], 99)), _who(r)) for r in results if r.get("loop_lag_ms")]
    client = {
        "client_cpu_max": max(cpu)[0] if cpu else None,
        "client_cpu_worker": max(cpu)[1] if cpu else None,
        "loop_lag_p99_ms": max(lag_p99)[0] if lag_p99 else None,
        "loop_lag_worker": max(lag_p99)[1] if lag_p99 else None,
    }
    win = window_s(rows)
    stats = load_stats(rows, point.load_model, point.offered_load)
    total_out = int(sum(r["output_tokens"] or 0 for r in rows if r["error"] is None))
    common = dict(point=point.label, load_model=point.load_model, offered_load=point.offered_load, window=win, slo=cfg.slo, pricing=cfg.pricing, stats=stats, client=client, policy=cfg.policy)
    not_sent: dict[str, int] = {}  # session turns never sent after a failed turn, per bucket
    for res in results:
        for label, k in (res.get("turns_not_sent") or {}).items():
            not_sent[label] = not_sent.get(label, 0) + k
    out = [summarize(rows, bucket="all", turns_not_sent=sum(not_sent.values()), **common)]
    out[0].update(content_summary(rows))
    for label in bucket_labels(cfg, point.load_model):
        brows = [r for r in rows if r["bucket"] == label]
        out.append(summarize(brows, bucket=label, point_output_tokens=total_out, turns_not_sent=not_sent.get(label, 0), **common))
    # a load pod that passed the start barrier after the agreed go time started late: the pods'
    # load did not overlap as offered (benchrun.loadgen.loadpods)
    late = sorted({(r["pod"], r["go_late_ms"]) for r in results if (r.get("go_late_ms") or 0) > 0})
    for s in out:
        for pod, ms in late:
            s["verdict"] = "invalid"
            s["verdict_reasons"].append(f"load pod {pod} reached the start barrier {ms:.3g} ms after the agreed go time")
    return out


def _by_address(results: list[dict[str, Any]]) -> dict[str, int]:
    """Connections opened to each address, over every worker (and load pod)."""
    total: dict[str, int] = {}
    for r in results:
        for addr, n in (r.get("connections_by_address") or {}).items():
            total[addr] = total.get(addr, 0) + int(n)
    return dict(sorted(total.items()))


def _who(result: dict[str, Any]) -> str:
    """``worker 3`` or, in a load Job, ``load pod 1 worker 3`` (global worker index)."""
    w = result.get("worker", "?")
    return f"load pod {result['pod']} worker {w}" if result.get("pod") is not None else f"worker {w}"


def _config_dict(cfg: SweepConfig) -> dict[str, Any]:
    d = asdict(cfg)
    d["mix"] = [asdict(b) for b in cfg.mix]
    d["points"] = [{"label": p.label, **asdict(p)} for p in cfg.points]
    return d


if __name__ == "__main__":
    if sys.argv[1:] == ["--worker"]:
        _worker_main()
    else:
        sys.exit("usage: python -m benchrun.loadgen.runner --worker (started by run_sweep)")
