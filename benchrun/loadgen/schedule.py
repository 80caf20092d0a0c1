"""Arrival scheduling: closed-loop slots, open-loop arrival times, one phase of requests."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import numpy as np

from benchrun.loadgen import client as http
from benchrun.loadgen.config import LoadPoint
from benchrun.loadgen.records import _Spec, _WorkerState
from benchrun.loadgen.workload import worker_rng

CLOCK = time.perf_counter_ns


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

