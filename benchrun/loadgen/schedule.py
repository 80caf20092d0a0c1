"""Arrival scheduling: closed-loop slots, open-loop arrival times (Poisson, gamma, constant), trace times, one phase of requests."""

from __future__ import annotations

import asyncio
import gc
import time
from typing import Any

import numpy as np

from benchrun.loadgen import client as http
from benchrun.loadgen.config import LoadPoint
from benchrun.loadgen.records import _Spec, _WorkerState
from benchrun.loadgen.workload import worker_rng

CLOCK = time.perf_counter_ns


def _gap_draws(point: LoadPoint, rate_w: float, size: int | None, rng: np.random.Generator) -> Any:
    """Inter-arrival gaps with mean ``1 / rate_w``: exponential (Poisson), or gamma with shape
    ``burstiness`` and scale ``1 / (rate_w * burstiness)`` (as vllm bench serve; the gaps' CV is
    ``1 / sqrt(burstiness)``)."""
    if point.arrival == "gamma":
        k = point.burstiness
        return rng.gamma(k, 1.0 / (rate_w * k), size=size)
    return rng.exponential(1.0 / rate_w, size=size)


def _arrivals(point: LoadPoint, rate_w: float, n: int | None, duration_s: float | None, rng: np.random.Generator, phase_s: float) -> list[float]:
    """Offsets (s) of this worker's arrivals from the phase start (a trace's come from its specs)."""
    if point.arrival == "constant":
        if n is not None:
            return [phase_s + i / rate_w for i in range(n)]
        out, t = [], phase_s
        while t < duration_s:  # type: ignore[operator]
            out.append(t)
            t += 1.0 / rate_w
        return out
    if n is not None:
        # n - 1 gaps, the first arrival at 0 and the last rescaled to exactly (n - 1) / rate_w (the
        # schedule's own rate between arrivals is the offered one). vLLM's bench serve rescales too
        # but draws n gaps and scales their sum to n / rate: its first request waits one gap.
        if n == 1:
            return [0.0]
        gaps = _gap_draws(point, rate_w, n - 1, rng)
        cum = np.concatenate([[0.0], np.cumsum(gaps)])
        cum *= ((n - 1) / rate_w) / cum[-1]
        return [float(x) for x in cum]
    out, t = [], 0.0
    while t < duration_s:  # type: ignore[operator]
        out.append(t)
        t += float(_gap_draws(point, rate_w, None, rng))
    return out


SHARED_SCHEDULE = 1 << 20  # the worker index of the generator all workers draw one schedule from


def dealt_arrivals(point: LoadPoint, total: int | None, duration_s: float | None, seed: int, point_index: int,
                   worker: int, workers: int, stream: int) -> list[float]:
    """This worker's share of ONE schedule at the point's full rate (arrivals ``worker``,
    ``worker + workers``, ...): every worker draws the same schedule from the same generator, so
    the arrivals they send together are the stated process (Poisson, gamma) at the offered rate.
    Each worker drawing its own schedule at rate/workers, each starting at 0 and each rescaled
    to end at the same instant, sent ``workers`` requests at once at the start and at the end
    (and a superposition of gamma streams is not the gamma stream asked for)."""
    rng = worker_rng(seed, point_index, SHARED_SCHEDULE, stream)
    return _arrivals(point, point.offered_load, total, duration_s, rng, 0.0)[worker::workers]


def open_loop_offsets(st: _WorkerState, point: LoadPoint, n: int | None, total: int | None, duration_s: float | None,
                      rate_w: float, phase_s: float, stream: int, point_index: int, start_ns: int | None) -> list[float]:
    """Offsets (s) from the phase start of this worker's open-loop arrivals: its requests
    (:func:`_phase`) or the starts of its sessions (:func:`benchrun.loadgen.sessions.session_phase`).

    Measured (``stream`` 1), arrivals not constant: this worker's share of ONE schedule of the
    point's ``total`` arrivals at the full rate (:func:`dealt_arrivals`; ``total`` None: timed),
    drawn from the ``SHARED_SCHEDULE`` generator whatever the worker count, so one seed sends the
    same measured schedule with 1 worker or several (one worker drew from its own generator, and
    a seed's schedule changed with ``--workers``). Otherwise (warm-up, constant arrivals) its own
    ``n`` arrivals (None: timed) at ``rate_w`` from its own generator, constant arrivals of
    several workers interleaving by ``phase_s``."""
    if stream == 1 and point.arrival != "constant":
        return dealt_arrivals(point, total if n is not None else None, duration_s, st.cfg.seed, point_index, *st.share, stream)
    rng = worker_rng(st.cfg.seed, point_index, st.worker, stream)
    return _arrivals(point, rate_w, n, duration_s, rng, phase_s)


async def _one(pool: http.ConnectionPool, spec: _Spec, timeout_s: float,
               keep_text: bool = False, count_text: bool = False) -> tuple[_Spec, http.Outcome, int]:
    """Send one request; ``keep_text``: keep the reply's text (a session's next turn carries it);
    ``count_text``: keep every generated piece (a tokenizer counts them when usage is absent)."""
    out = http.Outcome()
    if keep_text:
        out.text = []
    if count_text:
        out.generated = []
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
    count_text = st.counter is not None
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
                item = await _one(pool, spec, timeout_s, count_text=count_text)
                prev = item[2]
                done.append(item)

        await asyncio.gather(*(slot() for _ in range(conc_w)))
        return done
    if point.load_model == "trace":
        # the trace's own times (a worker's share of them), time-scaled; the specs are a list
        offsets = [s.t_s / point.speedup for s in specs]
    else:
        offsets = open_loop_offsets(st, point, n, st.cfg.requests_per_point, duration_s, rate_w, phase_s, stream, point_index, start_ns)
    tasks = []
    for off in offsets:
        spec = next(it, None)
        if spec is None:
            break
        if deadline is not None and point.load_model == "trace" and start + int(off * 1e9) >= deadline:
            break
        target = start + int(off * 1e9)
        delay = target - CLOCK()
        if delay > 0:
            await asyncio.sleep(delay / 1e9)
        spec.scheduled_ns = target
        tasks.append(asyncio.ensure_future(_one(pool, spec, timeout_s, count_text=count_text)))
    done.extend(await asyncio.gather(*tasks))
    return done


GC_BUDGET = 2_000_000  # net tracked allocations while measuring before a collection is forced


async def _probe_loop(samples: list[float], stop: asyncio.Event, interval_s: float = 0.005, gc_forced: list[int] | None = None) -> None:
    """Event-loop lag samples (ms late of a 5 ms sleep); with the collector off, a collection past ``GC_BUDGET``."""
    while not stop.is_set():
        t0 = CLOCK()
        await asyncio.sleep(interval_s)
        samples.append(max(0.0, (CLOCK() - t0) / 1e6 - interval_s * 1e3))
        if gc_forced is not None and gc.get_count()[0] > GC_BUDGET:
            gc.collect()
            gc_forced[0] += 1



STAGE_FORMS = "a list (1,2,4: steps), ramp:START:END:N (N evenly spaced), or saturate:START:FACTOR:MAX (x FACTOR each stage up to MAX, stopping when goodput falls)"


def parse_stages(text: str, load_model: str, *, arrival: str = "poisson", burstiness: float = 1.0) -> tuple[list[LoadPoint], bool]:
    """Load stages from ``--concurrency`` / ``--rate`` text: (points, stop when goodput falls).

    Each stage is its own point (warm-up, measured phase, verdict). ``saturate`` stops the
    sweep at the first stage whose goodput falls below the best before it (see
    :func:`benchrun.loadgen.runner.run_sweep`); MAX bounds it if goodput never falls.
    """
    what = "--concurrency" if load_model == "closed_loop" else "--rate"
    kind, sep, rest = text.partition(":")
    kind = kind.strip()
    if not sep:
        try:
            vals = [float(x) for x in text.split(",") if x.strip()]
        except ValueError:
            raise ValueError(f"{what} {text!r} is not {STAGE_FORMS}") from None
        saturate = False
    else:
        try:
            a, b, c = (float(x) for x in rest.split(":"))
        except ValueError:
            raise ValueError(f"{what} {text!r}: {kind} needs three numbers; give {STAGE_FORMS}") from None
        if kind == "ramp":
            n = int(c)
            if n < 2 or n != c or not 0 < a < b:
                raise ValueError(f"{what} {text!r}: ramp needs 0 < START < END and a whole N >= 2")
            vals = [a + (b - a) * i / (n - 1) for i in range(n)]
            saturate = False
        elif kind == "saturate":
            if not (a > 0 and b > 1 and c >= a):
                raise ValueError(f"{what} {text!r}: saturate needs START > 0, FACTOR > 1 and MAX >= START")
            vals, v = [], a
            while v <= c * (1 + 1e-9) and len(vals) < 64:
                vals.append(v)
                v *= b
            saturate = True
        else:
            raise ValueError(f"{what} {text!r}: unknown stage form {kind!r}; give {STAGE_FORMS}")
    if not vals or any(not 0 < v < float("inf") for v in vals):
        raise ValueError(f"{what} {text!r} needs positive, finite values")
    if load_model == "closed_loop":
        if arrival != "poisson" or burstiness != 1.0:
            # a closed loop sends when a request returns: an arrival shape would be dropped unseen
            raise ValueError(f"{what} {text!r} is a closed loop (each stream sends when its previous request returns): "
                             f"arrival {arrival!r} and burstiness {burstiness:g} shape open-loop arrivals only; give rates")
        ints: list[int] = []
        for v in vals:
            if not sep and v != int(v):
                raise ValueError(f"{what} {text!r} needs whole numbers")
            k = max(1, int(round(v)))
            if k not in ints:
                ints.append(k)
        return [LoadPoint("closed_loop", k) for k in ints], saturate
    return [LoadPoint("open_loop", round(v, 6), arrival, burstiness) for v in vals], saturate
