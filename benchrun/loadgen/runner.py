"""Load models (closed and open loop), load-point sweeps, worker processes and exact merging.

A sweep is a list of load points run one after the other. Each point has a warm-up phase
(``warmup`` requests under the same load model, run to completion and excluded from every
metric) followed by the measured phase, which ends after ``requests_per_point`` requests or
after ``duration_s`` seconds (no new request is sent after the deadline; those in flight
finish and count).

- Closed loop (``concurrency``): ``c`` slots, each sends its next request the moment the
  previous one returns. A request's *scheduled* time is when its slot became free, so the
  schedule lag is the client's own overhead.
- Open loop (``rate``): arrivals at ``rate`` req/s, Poisson (exponential gaps) or constant,
  sent on schedule whether or not earlier requests have finished. For a request-count end
  the Poisson gaps are rescaled so the schedule spans exactly ``(n - 1) / rate`` (as vLLM
  does), which makes the schedule's own rate equal the offered one; the schedule lag is
  ``send - scheduled`` (coordinated omission made visible).

With ``workers > 1`` every point is split across worker processes (concurrency and request
counts split as evenly as integers allow; each worker runs a Poisson process of
``rate / workers``, whose superposition is a Poisson process of ``rate``). Workers return
their raw request rows; the parent concatenates them and computes every percentile once
over the merged rows. Draws are seeded per (seed, point, worker), so a sweep with the same
seed and worker count sends the same requests. The workers' measured phases share one
schedule origin (the go time the parent hands them after every warm-up): a worker that wakes
late sends late and shows it as schedule lag; its schedule is not shifted.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import pickle
import socket
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Callable

import numpy as np

from benchrun.errors import BenchrunError
from benchrun.loadgen import client as http
from benchrun.loadgen.metrics import SLO, Pricing, VerdictPolicy, capacity_at_slo, load_stats, summarize, window_s
from benchrun.loadgen.workload import (
    MixBucket,
    draw_bucket,
    make_prompt,
    mix_cdf,
    new_trace_context,
    split_evenly,
    worker_rng,
)

log = logging.getLogger(__name__)
CLOCK = time.perf_counter_ns
LOAD_MODELS = ("closed_loop", "open_loop")
ARRIVALS = ("poisson", "constant")


@dataclass(frozen=True)
class LoadPoint:
    """One point of a sweep: a concurrency (closed loop) or a rate in req/s (open loop)."""

    load_model: str
    offered_load: float
    arrival: str = "poisson"

    def __post_init__(self) -> None:
        if self.load_model not in LOAD_MODELS:
            raise ValueError(f"load model {self.load_model!r} is not one of {LOAD_MODELS}")
        if self.arrival not in ARRIVALS:
            raise ValueError(f"arrival {self.arrival!r} is not one of {ARRIVALS}")
        if not self.offered_load > 0:
            raise ValueError(f"offered load {self.offered_load!r} must be positive")
        if self.load_model == "closed_loop" and int(self.offered_load) != self.offered_load:
            raise ValueError(f"concurrency {self.offered_load!r} must be an integer")

    @property
    def label(self) -> str:
        """``c=8`` or ``rate=4`` (the ``point`` value of rows and summaries)."""
        if self.load_model == "closed_loop":
            return f"c={int(self.offered_load)}"
        return f"rate={self.offered_load:g}"


@dataclass(frozen=True)
class SweepConfig:
    """Everything a sweep needs; picklable so worker processes receive it whole."""

    url: str
    model: str
    mix: tuple[MixBucket, ...]
    points: tuple[LoadPoint, ...]
    requests_per_point: int | None = None
    duration_s: float | None = None
    warmup: int = 0
    seed: int = 0
    workers: int = 1
    api: str = "completions"
    request_timeout_s: float = 60.0
    ignore_eos: bool = True
    include_usage: bool = True
    slo: SLO | None = None
    pricing: Pricing | None = None
    policy: VerdictPolicy = field(default_factory=VerdictPolicy)
    synthetic: bool = False

    def check(self) -> None:
        """Raise BenchrunError naming the bad field."""
        if not self.points:
            raise BenchrunError("give at least one load point (--concurrency or --rate)")
        if (self.requests_per_point is None) == (self.duration_s is None):
            raise BenchrunError("give exactly one of requests per point (--requests) or duration (--duration)")
        if self.requests_per_point is not None and self.requests_per_point < 1:
            raise BenchrunError("requests per point must be >= 1")
        if self.duration_s is not None and not self.duration_s > 0:
            raise BenchrunError("duration must be > 0 seconds")
        if self.warmup < 0:
            raise BenchrunError("warmup must be >= 0")
        if self.workers < 1:
            raise BenchrunError("workers must be >= 1")
        if not self.request_timeout_s > 0:
            raise BenchrunError("request timeout must be > 0 seconds")
        if not self.model:
            raise BenchrunError("model is empty; give the served model name (--model)")
        try:
            http.Endpoint.from_url(self.url, self.api)
        except http.EndpointError as exc:
            raise BenchrunError(str(exc)) from None


@dataclass
class SweepResult:
    """Measured request rows, per point x bucket summaries, capacity and context."""

    rows: list[dict[str, Any]]
    summaries: list[dict[str, Any]]
    capacity_at_slo: float | None
    context: dict[str, Any]


class _Spec:
    __slots__ = ("request_id", "trace_id", "bucket", "in_tokens", "out_tokens", "head", "body", "scheduled_ns")


def _specs(cfg: SweepConfig, endpoint: http.Endpoint, point_index: int, worker: int, nonce: str, n_warm: int, n: int | None) -> Any:
    """Yield warm-up specs then measured specs (endless when ``n`` is None), each with its
    request bytes already built so sending costs nothing on the measured path."""
    rng = worker_rng(cfg.seed, point_index, worker, 0)
    cdf = mix_cdf(cfg.mix)
    seq = 0

    def one(tag: str) -> _Spec:
        nonlocal seq
        b = cfg.mix[draw_bucket(cdf, rng)]
        s = _Spec()
        s.request_id = f"{nonce}-p{point_index}-w{worker}-{tag}{seq}"
        s.trace_id, traceparent = new_trace_context()
        s.bucket = b.label
        s.in_tokens = b.input_tokens
        s.out_tokens = b.output_tokens
        s.body = http.build_body(endpoint, cfg.model, make_prompt(b.input_tokens, rng), b.output_tokens, ignore_eos=cfg.ignore_eos, include_usage=cfg.include_usage)
        s.head = http.build_head(endpoint, "POST", endpoint.path, len(s.body), {"X-Request-Id": s.request_id, "traceparent": traceparent})
        seq += 1
        return s

    for _ in range(n_warm):
        yield one("wu")
    i = 0
    while n is None or i < n:
        yield one("")
        i += 1


def _arrivals(point: LoadPoint, rate_w: float, n: int | None, duration_s: float | None, rng: np.random.Generator, phase_s: float) -> list[float]:
    """Offsets (s) of this worker's arrivals from the phase start."""
    if point.arrival == "constant":
        if n is not None:
            return [phase_s + i / rate_w for i in range(n)]
        out, t = [], phase_s
        while t < duration_s:  # type: ignore[operator]
            out.append(t)
            t += 1.0 / rate_w
        return out
    if n is not None:
        if n == 1:
            return [0.0]
        gaps = rng.exponential(1.0 / rate_w, size=n - 1)
        cum = np.concatenate([[0.0], np.cumsum(gaps)])
        cum *= ((n - 1) / rate_w) / cum[-1]
        return [float(x) for x in cum]
    out, t = [], 0.0
    while t < duration_s:  # type: ignore[operator]
        out.append(t)
        t += float(rng.exponential(1.0 / rate_w))
    return out


class _WorkerState:
    def __init__(self, cfg: SweepConfig, worker: int) -> None:
        self.cfg = cfg
        self.worker = worker
        self.endpoint = http.Endpoint.from_url(cfg.url, cfg.api)
        self.mono0 = CLOCK()
        self.wall0 = time.time_ns()

    def wall_s(self, mono_ns: int) -> float:
        return (self.wall0 + (mono_ns - self.mono0)) / 1e9


def _row(st: _WorkerState, spec: _Spec, out: http.Outcome, end_ns: int, point: LoadPoint, point_index: int) -> dict[str, Any]:
    ok = out.error is None
    chunk_tokens = sum(out.chunk_tokens)
    usage_out = out.usage_completion
    output_tokens = usage_out if (ok and usage_out is not None) else (chunk_tokens if ok else None)
    ttft = (out.first_ns - out.send_ns) / 1e6 if ok and out.first_ns is not None else None
    e2e = (out.last_ns - out.send_ns) / 1e6 if ok and out.last_ns is not None else None
    decode = None
    if ok and output_tokens and output_tokens > 1 and e2e is not None and ttft is not None:
        decode = (e2e - ttft) / (output_tokens - 1)
    gaps: list[float] = []
    cn = out.chunk_ns
    for i in range(1, len(cn)):
        k = out.chunk_tokens[i]
        g = (cn[i] - cn[i - 1]) / 1e6 / k
        gaps.extend([g] * k)
    return {
        "request_id": spec.request_id,
        "trace_id": spec.trace_id,
        "worker": st.worker,
        "point": point.label,
        "point_index": point_index,
        "load_model": point.load_model,
        "offered_load": float(point.offered_load),
        "bucket": spec.bucket,
        "input_tokens_requested": spec.in_tokens,
        "output_tokens_requested": spec.out_tokens,
        "scheduled_ts": st.wall_s(spec.scheduled_ns),
        "send_ts": st.wall_s(out.send_ns),
        "schedule_lag_ms": (out.send_ns - spec.scheduled_ns) / 1e6,
        "scheduled_mono_ns": spec.scheduled_ns,
        "send_mono_ns": out.send_ns,
        "first_token_mono_ns": out.first_ns,
        "last_token_mono_ns": out.last_ns,
        "end_mono_ns": out.last_ns if (ok and out.last_ns is not None) else end_ns,
        "ttft_ms": ttft,
        "e2e_ms": e2e,
        "input_tokens": (out.usage_prompt if out.usage_prompt is not None else spec.in_tokens) if ok else None,
        "output_tokens": output_tokens,
        "usage_input_tokens": out.usage_prompt,
        "usage_output_tokens": usage_out,
        "chunk_count": len(cn),
        "chunk_output_tokens": chunk_tokens,
        "token_count_source": ("usage" if usage_out is not None else "chunks") if ok else None,
        "output_token_discrepancy": (usage_out - chunk_tokens) if (ok and usage_out is not None) else None,
        "input_token_discrepancy": (out.usage_prompt - spec.in_tokens) if out.usage_prompt is not None else None,
        "decode_ms_per_token": decode,
        "token_gaps_ms": gaps if ok else [],
        "token_gap_std_ms": float(np.std(gaps)) if ok and len(gaps) >= 2 else None,
        "http_status": out.status,
        "error_kind": out.error_kind,
        "error": out.error,
        "reused_connection": out.reused_connection,
        "synthetic": st.cfg.synthetic,
    }


async def _one(pool: http.ConnectionPool, spec: _Spec, timeout_s: float) -> tuple[_Spec, http.Outcome, int]:
    out = http.Outcome()
    await http.stream_request(pool, spec.head, spec.body, out, timeout_s=timeout_s)
    return spec, out, CLOCK()


async def _phase(
    st: _WorkerState,
    pool: http.ConnectionPool,
    specs: Any,
    n: int | None,
    point: LoadPoint,
    conc_w: int,
    rate_w: float,
    phase_s: float,
    duration_s: float | None,
    stream: int,
    point_index: int,
    start_ns: int | None = None,
) -> list[tuple[_Spec, http.Outcome, int]]:
    """Run one phase; returns (spec, outcome, end) triples (rows are built afterwards, off
    the measured path). ``start_ns`` anchors the schedule (the workers' shared go time, so that
    their arrivals interleave as planned; a worker that wakes late shows it as schedule lag);
    without it the phase starts now."""
    done: list[tuple[_Spec, http.Outcome, int]] = []
    timeout_s = st.cfg.request_timeout_s
    start = start_ns if start_ns is not None else CLOCK()
    deadline = start + int(duration_s * 1e9) if duration_s is not None else None
    it = iter(specs)
    if point.load_model == "closed_loop":

        async def slot() -> None:
            prev = start
            while deadline is None or CLOCK() < deadline:
                spec = next(it, None)
                if spec is None:
                    return
                spec.scheduled_ns = prev
                item = await _one(pool, spec, timeout_s)
                prev = item[2]
                done.append(item)

        await asyncio.gather(*(slot() for _ in range(conc_w)))
        return done
    rng = worker_rng(st.cfg.seed, point_index, st.worker, stream)
    offsets = _arrivals(point, rate_w, n, duration_s, rng, phase_s)
    tasks = []
    for off in offsets:
        spec = next(it, None)
        if spec is None:
            break
        target = start + int(off * 1e9)
        delay = target - CLOCK()
        if delay > 0:
            await asyncio.sleep(delay / 1e9)
        spec.scheduled_ns = target
        tasks.append(asyncio.ensure_future(_one(pool, spec, timeout_s)))
    done.extend(await asyncio.gather(*tasks))
    return done


async def _probe_loop(samples: list[float], stop: asyncio.Event, interval_s: float = 0.005) -> None:
    while not stop.is_set():
        t0 = CLOCK()
        await asyncio.sleep(interval_s)
        samples.append(max(0.0, (CLOCK() - t0) / 1e6 - interval_s * 1e3))


async def _run_point(
    cfg: SweepConfig,
    point_index: int,
    worker: int,
    n_workers: int,
    nonce: str,
    start_at_ns: int | None,
    barrier: Callable[[], int] | None = None,
) -> dict[str, Any]:
    """One worker's share of one point: warm-up, (barrier,) measured phase, raw rows."""
    point = cfg.points[point_index]
    st = _WorkerState(cfg, worker)
    if point.load_model == "closed_loop":
        active = min(n_workers, int(point.offered_load))
        conc_w = split_evenly(int(point.offered_load), active)[worker] if worker < active else 0
        rate_w = 0.0
    else:
        active = n_workers
        conc_w = 0
        rate_w = point.offered_load / n_workers
    result: dict[str, Any] = {"worker": worker, "rows": [], "warmup_rows": 0, "warmup_errors": 0, "cpu_frac": None, "loop_lag_ms": [], "connections": 0}
    if worker >= active:
        return result
    n_w = split_evenly(cfg.requests_per_point, active)[worker] if cfg.requests_per_point is not None else None
    warm_w = split_evenly(cfg.warmup, active)[worker]
    if n_w == 0:
        return result
    # constant arrivals from several workers interleave: worker w starts w/rate later
    phase_s = (worker / point.offered_load) if point.load_model == "open_loop" and point.arrival == "constant" else 0.0
    specs = _specs(cfg, st.endpoint, point_index, worker, nonce, warm_w, n_w)
    warm_specs = [next(specs) for _ in range(warm_w)]
    # a count-ended phase is built in full before it starts; a timed one lazily
    measured: Any = list(specs) if n_w is not None else specs
    pool = http.ConnectionPool(st.endpoint)
    if start_at_ns is not None:
        delay = start_at_ns - CLOCK()
        if delay > 0:
            await asyncio.sleep(delay / 1e9)
    try:
        if warm_w:
            wdone = await _phase(st, pool, warm_specs, warm_w, point, min(conc_w, warm_w) if conc_w else 0, rate_w, phase_s, None, 2, point_index)
            result["warmup_rows"] = len(wdone)
            result["warmup_errors"] = sum(1 for _, o, _ in wdone if o.error is not None)
        gc.collect()
        gc.freeze()  # older objects out of the collector's way while measuring
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
            probe = asyncio.ensure_future(_probe_loop(lags, stop))
            cpu0, wall0 = time.process_time(), time.perf_counter()
            done = await _phase(st, pool, measured, n_w, point, conc_w, rate_w, phase_s, cfg.duration_s, 1, point_index, go_ns)
            cpu1, wall1 = time.process_time(), time.perf_counter()
        finally:
            gc.unfreeze()
        stop.set()
        await probe
        result["rows"] = [_row(st, spec, out, end, point, point_index) for spec, out, end in done]
        result["cpu_frac"] = (cpu1 - cpu0) / max(wall1 - wall0, 1e-9)
        result["loop_lag_ms"] = lags
        result["connections"] = pool.opened
        result["kernel_timestamps"] = pool.kernel_timestamps
    finally:
        await pool.close()
    return result


def _send(fh: Any, obj: Any) -> None:
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    fh.write(len(data).to_bytes(8, "big") + data)
    fh.flush()


def _recv(fh: Any) -> Any:
    head = fh.read(8)
    if len(head) < 8:
        raise EOFError("load generator worker closed its pipe")
    n = int.from_bytes(head, "big")
    data = fh.read(n)
    if len(data) < n:
        raise EOFError("load generator worker closed its pipe mid-message")
    return pickle.loads(data)


def _worker_main() -> None:
    """Worker process (``python -m benchrun.loadgen.runner --worker``): framed pickles on
    stdin/stdout between this process and its own parent only."""
    inp, outp = sys.stdin.buffer, sys.stdout.buffer
    sys.stdout = sys.stderr  # stray prints must not corrupt the frames
    cfg, worker, n_workers, nonce = _recv(inp)
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
            res = asyncio.run(_run_point(cfg, point_index, worker, n_workers, nonce, start_at_ns, barrier))
        except Exception as exc:  # reported to the parent, which fails the sweep
            res = {"fatal": f"{type(exc).__name__}: {exc}"}
        _send(outp, res)


class _Workers:
    """Worker subprocesses (argv lists, no shell) for a multi-worker sweep."""

    def __init__(self, cfg: SweepConfig, nonce: str) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("DAGSTER_PIPES")}
        self.procs = []
        try:
            for w in range(cfg.workers):
                p = subprocess.Popen(
                    [sys.executable, "-m", "benchrun.loadgen.runner", "--worker"],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    env=env,
                )
                self.procs.append(p)
                _send(p.stdin, (cfg, w, cfg.workers, nonce))
            for p in self.procs:
                _recv(p.stdout)  # ("ready",): imports done
        except BaseException:
            self.close()
            raise

    def run_point(self, point_index: int) -> list[dict[str, Any]]:
        start_at = CLOCK() + 50_000_000  # all workers start the warm-up together
        for p in self.procs:
            _send(p.stdin, (point_index, start_at))
        first = [_recv(p.stdout) for p in self.procs]
        waiting = [i for i, m in enumerate(first) if isinstance(m, tuple) and m == ("warm",)]
        go = CLOCK() + 20_000_000
        for i in waiting:
            _send(self.procs[i].stdin, ("go", go))
        results = [_recv(self.procs[i].stdout) if i in waiting else first[i] for i in range(len(self.procs))]
        fatal = [r["fatal"] for r in results if "fatal" in r]
        if fatal:
            raise RuntimeError(f"load generator worker failed: {fatal[0]}")
        return results

    def close(self) -> None:
        for p in self.procs:
            try:
                _send(p.stdin, None)
                p.stdin.close()
            except (OSError, ValueError):
                pass
        for p in self.procs:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(5)
            if p.stdout is not None:
                p.stdout.close()


def check_reachable(url: str, api: str = "completions", timeout_s: float = 5.0) -> http.Endpoint:
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


def _server_info(ep: http.Endpoint) -> dict[str, Any]:
    try:
        models = asyncio.run(http.get_json(ep, ep.models_path, 5.0))
        data = models.get("data") if isinstance(models, dict) else None
        return {"models": [m.get("id") for m in data or [] if isinstance(m, dict)], "owned_by": sorted({str(m.get("owned_by")) for m in data or [] if isinstance(m, dict)})}
    except Exception as exc:  # informational only
        return {"models_error": f"{type(exc).__name__}: {exc}"}


def run_sweep(cfg: SweepConfig, progress: Callable[[dict[str, Any]], None] | None = None) -> SweepResult:
    """Run every point of ``cfg``; raw rows merged across workers, then summarised."""
    cfg.check()
    ep = check_reachable(cfg.url, cfg.api)
    context: dict[str, Any] = {
        "endpoint": ep.display(),
        "api": ep.api,
        "server": _server_info(ep),
        "config": _config_dict(cfg),
        "clock": "time.perf_counter_ns (CLOCK_MONOTONIC)",
        "prompt_tokens_approximation": "one vocabulary word per requested input token; server usage recorded beside it",
        "points": [],
    }
    nonce = os.urandom(3).hex()
    all_rows: list[dict[str, Any]] = []
    summaries: list[dict[str, Any]] = []
    workers = _Workers(cfg, nonce) if cfg.workers > 1 else None
    try:
        for i, point in enumerate(cfg.points):
            t0 = time.perf_counter()
            if workers is None:
                results = [asyncio.run(_run_point(cfg, i, 0, 1, nonce, None))]
            else:
                results = workers.run_point(i)
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
                "warmup_requests": sum(r["warmup_rows"] for r in results),
                "warmup_errors": sum(r["warmup_errors"] for r in results),
                "client_cpu_by_worker": [r["cpu_frac"] for r in results],
                "connections_opened": sum(r["connections"] for r in results),
                "receive_timestamps": "kernel (SO_TIMESTAMPNS)" if any(r.get("kernel_timestamps") for r in results) else "event loop",
            }
            context["points"].append(info)
            log.info("point %s: %d requests, %d errors, verdict %s", point.label, pt_summaries[0]["n_requests"], pt_summaries[0]["n_errors"], pt_summaries[0]["verdict"])
            if progress is not None:
                progress(pt_summaries[0])
    except BaseException as exc:
        # Whatever ends the sweep early (a signal, a worker failure, a bug), the points measured
        # so far travel with the exception so the caller can still write them.
        exc.partial_result = SweepResult(all_rows, summaries, None, context)  # type: ignore[attr-defined]
        raise
    finally:
        if workers is not None:
            workers.close()
    cap = capacity_at_slo([s for s in summaries if s["bucket"] == "all"], cfg.slo)
    return SweepResult(all_rows, summaries, cap, context)


def summarize_point(rows: list[dict[str, Any]], point: LoadPoint, results: list[dict[str, Any]], cfg: SweepConfig) -> list[dict[str, Any]]:
    """The ``all`` row and one row per mix bucket for one point's merged rows."""
    cpu = [r["cpu_frac"] for r in results if r.get("cpu_frac") is not None]
    lags = [x for r in results for x in r.get("loop_lag_ms", [])]
    client = {
        "client_cpu_max": max(cpu) if cpu else None,
        "loop_lag_p99_ms": float(np.percentile(lags, 99)) if lags else None,
    }
    win = window_s(rows)
    stats = load_stats(rows, point.load_model, point.offered_load)
    total_out = int(sum(r["output_tokens"] or 0 for r in rows if r["error"] is None))
    common = dict(point=point.label, load_model=point.load_model, offered_load=point.offered_load, window=win, slo=cfg.slo, pricing=cfg.pricing, stats=stats, client=client, policy=cfg.policy)
    out = [summarize(rows, bucket="all", **common)]
    for b in cfg.mix:
        brows = [r for r in rows if r["bucket"] == b.label]
        out.append(summarize(brows, bucket=b.label, point_output_tokens=total_out, **common))
    return out


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
